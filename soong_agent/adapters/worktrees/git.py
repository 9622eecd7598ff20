"""`GitWorktrees`: member worktrees over the real ``git`` binary.

Layout: the worktree of `member` is ``<project>/.soong-agent/worktrees/<member>`` on branch
``soong/<team>/<member>``. The folder ``.soong-agent/worktrees/`` holds a ``.gitignore`` of
``*`` (written by `create`), so the worktrees never show up in the main tree's ``git status``
(nor in tools that honour ``.gitignore``) without touching the project's own ignore files or
anything under ``.git/``. The member's base commit is kept in the repository's config as
``branch.<branch>.soongbase`` (deleted with the branch), so it survives a restart.

Every git call goes through `git_cli.GitCli`: an argv list (never a shell), ``subprocess.run``
with a timeout, stdin closed, ``LC_ALL=C``, the caller's ``GIT_DIR`` & co dropped. Commits pass
``-c user.name=soong-agent -c user.email=…`` so a machine without a git identity works, and
run with hooks off and signing off (a hook or a passphrase prompt would block or fail an
unattended commit).

`accept`: the worktree's pending changes (``git add -A``) are committed on the branch; the main
tree must be on a branch, not mid-merge, without staged changes and without changes (or
untracked files) at the paths the branch touches, else the outcome says so. The merge is first
computed without touching any tree (``git merge-tree --write-tree``, git >= 2.38): a conflict
is reported from it and the main tree is never touched. With an older git the merge runs in the
main tree and a conflict is aborted (``git merge --abort``). A clean merge is ``git merge
--no-ff`` (always a merge commit).

`diff` runs ``git add -A`` into a temporary copy of the worktree's index and diffs that against
the base: the member's index and files are left as they are.

Operations that change a repository are serialised by a lock of this object; two processes
working on one project's worktrees at once are not coordinated (git's own locks refuse the
second writer).

No worktree leaves the project (TEAM-4): ``.soong-agent`` and ``.soong-agent/worktrees`` must be
real folders (made without following a link, `StateDir`), a member's folder must not be a link,
and a worktree git registered anywhere but at its own path below them is neither found nor kept
(one that a link swapped in during the checkout sent elsewhere is removed again). A link there
is refused with `WorktreeError` naming it.
"""

from __future__ import annotations

import builtins
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from soong_agent.adapters.state_dirs import StateDir, link_refused
from soong_agent.adapters.worktrees.git_cli import (
    AUTHOR_EMAIL,
    AUTHOR_NAME,
    BASE_KEY,
    COMMIT_CONFIG,
    GitCli,
    Listed,
    conflict_text,
    merge_messages,
)
from soong_agent.ports.errors import SandboxViolation
from soong_agent.ports.worktrees import (
    BRANCH_PREFIX,
    WORKTREES_DIR,
    MergeOutcome,
    Worktree,
    WorktreeError,
    branch_name,
    name_problem,
    team_problem,
)

_WHAT = "member worktrees"
_IGNORE = "# soong-agent: member worktrees, never part of the project\n*\n"


class GitWorktrees:
    """The member worktrees of the git repository at `project_dir`.

    `git` is the binary (a name on PATH or a path); `timeout_s` bounds each git call;
    `env` is the environment git runs with (default: this process's).
    """

    def __init__(
        self,
        project_dir: str | os.PathLike[str],
        *,
        git: str = "git",
        timeout_s: float = 120.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._project = Path(os.path.realpath(project_dir))
        self._cli = GitCli(self._project, git=git, timeout_s=timeout_s, env=env)
        self._lock = threading.RLock()
        self._dir = StateDir(self.root, what=_WHAT, project=self._project)

    @property
    def project(self) -> Path:
        return self._project

    @property
    def root(self) -> Path:
        """The folder holding every worktree."""
        return self._project / WORKTREES_DIR

    def path(self, member: str) -> Path:
        """Where the worktree of `member` is (whether or not it exists)."""
        self._check_member(member)
        return self.root / member

    # --- the port ------------------------------------------------------------------------

    def available(self) -> bool:
        if not self._project.is_dir():
            return False
        try:
            result = self._cli.run(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
        except WorktreeError:
            return False
        return result.ok

    def create(self, team: str, member: str) -> Worktree:
        problem = team_problem(team)
        if problem is not None:
            raise WorktreeError(problem)
        self._check_member(member)
        self._require_repository()
        branch = branch_name(team, member)
        path = self.root / member
        with self._lock:
            existing = self._find(member)
            if existing is not None:
                if existing.branch != branch:
                    raise WorktreeError(
                        f"member {member!r} already has a worktree on branch "
                        f"{existing.branch or 'detached HEAD'}, not {branch}"
                    )
                return self._worktree(member, existing)
            self._prepare_root(member)
            self._cli.run(["worktree", "prune"])
            if path.exists() and any(path.iterdir()):
                raise WorktreeError(
                    f"member {member!r}: {path} exists and is not a worktree; remove it first"
                )
            if self._cli.branch_exists(branch):
                # the branch outlived its worktree (removed by hand): check it out again
                self._cli.check(["worktree", "add", str(path), branch], f"member {member!r}")
            else:
                head = self._cli.check(["rev-parse", "--verify", "HEAD^{commit}"], "HEAD").out
                base = head.strip()
                self._cli.check(
                    ["worktree", "add", "-b", branch, str(path), base], f"member {member!r}"
                )
                self._cli.check(["config", f"branch.{branch}.{BASE_KEY}", base], "config")
            self._keep_inside(member, path)
            listed = self._find(member)
            if listed is None:  # pragma: no cover - git said it worked
                raise WorktreeError(f"member {member!r}: git did not register {path}")
            return self._worktree(member, listed)

    def get(self, member: str) -> Worktree | None:
        self._check_member(member)
        if not self.available():
            return None
        listed = self._find(member)
        return None if listed is None else self._worktree(member, listed)

    def list(self) -> builtins.list[Worktree]:
        if not self.available():
            return []
        root = str(self.root)  # real when its folders are (a worktree through a link is not ours)
        found: builtins.list[Worktree] = []
        for entry in self._cli.listed():
            parent, member = os.path.split(entry.path)
            if parent != root or name_problem(member) is not None:
                continue
            if not entry.branch.startswith(BRANCH_PREFIX):
                continue
            found.append(self._worktree(member, entry))
        return sorted(found, key=lambda w: w.member)

    def diff(self, member: str) -> str:
        worktree = self._require(member)
        where = Path(worktree.path)
        index = self._cli.check(
            ["rev-parse", "--git-path", "index"], f"member {member!r}", cwd=where
        ).out.strip()
        index_path = Path(index) if os.path.isabs(index) else where / index
        with tempfile.TemporaryDirectory(prefix="soong-worktree-") as tmp:
            scratch = Path(tmp) / "index"
            if index_path.is_file():
                shutil.copyfile(index_path, scratch)
            env = {"GIT_INDEX_FILE": str(scratch)}
            self._cli.check(["add", "-A"], f"member {member!r}", cwd=where, extra_env=env)
            return self._cli.check(
                [
                    "-c",
                    "core.quotepath=false",
                    "diff",
                    "--cached",
                    "--no-color",
                    "--no-ext-diff",
                    worktree.base,
                ],
                f"member {member!r}",
                cwd=where,
                extra_env=env,
            ).out

    def accept(self, member: str, message: str) -> MergeOutcome:
        with self._lock:
            worktree = self._require(member)
            where = Path(worktree.path)
            blocked = self._cli.main_tree_problem()
            if blocked:
                return MergeOutcome(False, None, blocked)
            self._cli.commit_pending(member, where, message)
            tip = self._cli.check(
                ["rev-parse", "--verify", f"refs/heads/{worktree.branch}"], f"member {member!r}"
            )
            tip_sha = tip.out.strip()
            head = self._cli.check(["rev-parse", "--verify", "HEAD^{commit}"], "HEAD").out.strip()
            if self._cli.is_ancestor(tip_sha, head):
                self._cli.set_base(worktree.branch, tip_sha)
                return MergeOutcome(True, None)
            involved = self._cli.involved(head, tip_sha)
            dirty = sorted(set(involved) & set(self._cli.dirty_paths()))
            if dirty:
                return MergeOutcome(
                    False,
                    None,
                    "the main tree has uncommitted changes to files the merge touches: "
                    + ", ".join(dirty),
                )
            planned = self._cli.run(
                ["merge-tree", "--write-tree", "--name-only", "--no-messages", head, tip_sha]
            )
            if planned.code == 1:
                files = [line for line in planned.out.splitlines()[1:] if line.strip()]
                messages = self._cli.run(["merge-tree", "--write-tree", head, tip_sha])
                return MergeOutcome(False, None, conflict_text(files, merge_messages(messages.out)))
            merge_message = f"Merge {worktree.branch}\n\n{message.strip() or 'accepted work'}"
            merged = self._cli.run(
                [*COMMIT_CONFIG, "merge", "--no-ff", "--no-edit", "-m", merge_message, tip_sha]
            )
            if not merged.ok:
                return self._cli.abort_merge(merged)
            commit = self._cli.check(["rev-parse", "--verify", "HEAD"], "HEAD").out.strip()
            self._cli.set_base(worktree.branch, tip_sha)
            return MergeOutcome(True, commit)

    def reject(self, member: str) -> None:
        self._check_member(member)
        self._require_repository()
        with self._lock:
            listed = self._find(member)
            branch = listed.branch if listed is not None else self._cli.orphan_branch(member)
            if listed is None and branch is None:
                raise WorktreeError(f"member {member!r} has no worktree")
            self._drop(member, listed, branch)

    def remove(self, member: str) -> None:
        self._check_member(member)
        if not self.available():
            return
        with self._lock:
            listed = self._find(member)
            branch = listed.branch if listed is not None else self._cli.orphan_branch(member)
            if listed is None and branch is None:
                return
            if listed is not None:
                status = self._cli.check(
                    ["status", "--porcelain", "--untracked-files=all"],
                    f"member {member!r}",
                    cwd=Path(listed.path),
                )
                if status.out.strip():
                    raise WorktreeError(
                        f"member {member!r} has changes that were not accepted; "
                        "accept or reject them first"
                    )
            if branch:
                head = self._cli.check(["rev-parse", "--verify", "HEAD^{commit}"], "HEAD").out
                if not self._cli.is_ancestor(f"refs/heads/{branch}", head.strip()):
                    raise WorktreeError(
                        f"member {member!r} has commits on {branch} that were not merged; "
                        "accept or reject them first"
                    )
            self._drop(member, listed, branch)

    # --- helpers -------------------------------------------------------------------------

    def _check_member(self, member: str) -> None:
        problem = name_problem(member)
        if problem is not None:
            raise WorktreeError(problem)

    def _require_repository(self) -> None:
        """WorktreeError unless the project is a repository with a commit; a missing or hanging
        git is reported as such."""
        if not self._project.is_dir():
            raise WorktreeError(f"project folder {self._project} does not exist")
        if not self._cli.run(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"]).ok:
            raise WorktreeError(
                f"{self._project} is not a git repository with a commit; member worktrees need one"
            )

    def _require(self, member: str) -> Worktree:
        self._check_member(member)
        self._require_repository()
        listed = self._find(member)
        if listed is None:
            raise WorktreeError(f"member {member!r} has no worktree")
        if not listed.branch.startswith(BRANCH_PREFIX):
            raise WorktreeError(
                f"member {member!r}: its worktree is on {listed.branch or 'a detached HEAD'}, "
                f"not on its {BRANCH_PREFIX}… branch; check that branch out again"
            )
        return self._worktree(member, listed)

    def _prepare_root(self, member: str) -> None:
        """The worktrees folder made (its folders real, never a link) with its ``.gitignore``;
        WorktreeError when a link stands in the way, the member's own folder included."""
        try:
            folder = self._dir.open(create=True)
        except SandboxViolation as exc:
            raise WorktreeError(f"member {member!r}: {exc}") from exc
        assert folder is not None  # made when missing
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                fd = os.open(".gitignore", flags, 0o644, dir_fd=folder)
            except FileExistsError:
                pass  # written before (or a link: never written through)
            else:
                with os.fdopen(fd, "w", encoding="utf-8") as ignore:
                    ignore.write(_IGNORE)
            try:
                info = os.stat(member, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                return
        finally:
            os.close(folder)
        if stat.S_ISLNK(info.st_mode):
            raise WorktreeError(f"member {member!r}: {link_refused(self.root / member, _WHAT)}")

    def _keep_inside(self, member: str, path: Path) -> None:
        """WorktreeError, and the worktree removed again, when git checked it out anywhere but
        at `path` (a link swapped in since `_prepare_root` looked)."""
        real = os.path.realpath(path)
        if real == str(path):
            return
        self._cli.run(["worktree", "remove", "--force", "--force", real])
        self._cli.run(["worktree", "prune"])
        raise WorktreeError(
            f"member {member!r}: the worktree went to {real}, not {path} (a symbolic link on "
            "the way); it was removed again"
        )

    def _find(self, member: str) -> Listed | None:
        """The registered worktree of `member` whose folder exists (one removed by hand is
        pruned by `create`, which checks its branch out again)."""
        want = str(self.root / member)  # real when its folders are (`_prepare_root`)
        for entry in self._cli.listed():
            if entry.path == want and os.path.isdir(entry.path):
                return entry
        return None

    def _worktree(self, member: str, listed: Listed) -> Worktree:
        base = ""
        if listed.branch:
            got = self._cli.run(["config", "--get", f"branch.{listed.branch}.{BASE_KEY}"])
            base = got.out.strip() if got.ok else ""
        if not base:  # written by an older run, or lost: the fork point with the main tree
            fork = self._cli.run(["merge-base", "HEAD", listed.head])
            base = fork.out.strip() if fork.ok else listed.head
        return Worktree(member=member, path=listed.path, branch=listed.branch, base=base)

    def _drop(self, member: str, listed: Listed | None, branch: str | None) -> None:
        who = f"member {member!r}"
        if listed is not None:
            removed = self._cli.run(["worktree", "remove", "--force", "--force", listed.path])
            if not removed.ok:
                if Path(listed.path).exists():
                    shutil.rmtree(listed.path, ignore_errors=True)
                self._cli.check(["worktree", "prune"], who)
        if branch:
            if self._cli.branch_exists(branch):
                self._cli.check(["branch", "-D", branch], who)
            self._cli.run(["config", "--remove-section", f"branch.{branch}"])


__all__ = ["AUTHOR_EMAIL", "AUTHOR_NAME", "GitWorktrees"]
