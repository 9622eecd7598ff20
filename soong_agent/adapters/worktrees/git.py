"""`GitWorktrees`: member worktrees over the real ``git`` binary.

Layout: the worktree of `member` is ``<project>/.soong-agent/worktrees/<member>`` on branch
``soong/<team>/<member>``. The folder ``.soong-agent/worktrees/`` holds a ``.gitignore`` of
``*`` (written by `create`), so the worktrees never show up in the main tree's ``git status``
(nor in tools that honour ``.gitignore``) without touching the project's own ignore files or
anything under ``.git/``. The member's base commit is kept in the repository's config as
``branch.<branch>.soongbase`` (deleted with the branch), so it survives a restart.

Every git call: an argv list (never a shell), ``subprocess.run`` with a timeout, stdin closed,
``GIT_TERMINAL_PROMPT=0``, ``LC_ALL=C`` (messages we parse), the caller's ``GIT_DIR`` /
``GIT_WORK_TREE`` / ``GIT_INDEX_FILE`` dropped. Commits pass ``-c user.name=soong-agent -c
user.email=…`` so a machine without a git identity works, and run with hooks off and signing
off (a hook or a passphrase prompt would block or fail an unattended commit).

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
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from soong_agent.adapters.state_dirs import StateDir, link_refused
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
AUTHOR_NAME = "soong-agent"
AUTHOR_EMAIL = "soong-agent@localhost"
_BASE_KEY = "soongbase"
_IGNORE = "# soong-agent: member worktrees, never part of the project\n*\n"
_DROPPED_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)
_COMMIT_CONFIG = (
    "-c",
    f"user.name={AUTHOR_NAME}",
    "-c",
    f"user.email={AUTHOR_EMAIL}",
    "-c",
    "commit.gpgsign=false",
    "-c",
    f"core.hooksPath={os.devnull}",
)


@dataclass(frozen=True, slots=True)
class _Result:
    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0


@dataclass(frozen=True, slots=True)
class _Listed:
    """One entry of ``git worktree list --porcelain``."""

    path: str
    head: str
    branch: str  # without refs/heads/; "" when detached


def _one_line(text: str, limit: int = 400) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    joined = "; ".join(lines)
    return joined if len(joined) <= limit else joined[: limit - 1] + "…"


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
        self._git = git
        self._timeout_s = timeout_s
        base_env = dict(os.environ if env is None else env)
        for name in _DROPPED_ENV:
            base_env.pop(name, None)
        base_env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANGUAGE": "C"})
        self._env = base_env
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
            result = self._run(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
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
            self._run(["worktree", "prune"])
            if path.exists() and any(path.iterdir()):
                raise WorktreeError(
                    f"member {member!r}: {path} exists and is not a worktree; remove it first"
                )
            if self._branch_exists(branch):
                # the branch outlived its worktree (removed by hand): check it out again
                self._check(["worktree", "add", str(path), branch], f"member {member!r}")
            else:
                head = self._check(["rev-parse", "--verify", "HEAD^{commit}"], "HEAD").out
                base = head.strip()
                self._check(
                    ["worktree", "add", "-b", branch, str(path), base], f"member {member!r}"
                )
                self._check(["config", f"branch.{branch}.{_BASE_KEY}", base], "config")
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
        for entry in self._listed():
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
        index = self._check(
            ["rev-parse", "--git-path", "index"], f"member {member!r}", cwd=where
        ).out.strip()
        index_path = Path(index) if os.path.isabs(index) else where / index
        with tempfile.TemporaryDirectory(prefix="soong-worktree-") as tmp:
            scratch = Path(tmp) / "index"
            if index_path.is_file():
                shutil.copyfile(index_path, scratch)
            env = {"GIT_INDEX_FILE": str(scratch)}
            self._check(["add", "-A"], f"member {member!r}", cwd=where, extra_env=env)
            return self._check(
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
            blocked = self._main_tree_problem()
            if blocked:
                return MergeOutcome(False, None, blocked)
            self._commit_pending(member, where, message)
            tip = self._check(
                ["rev-parse", "--verify", f"refs/heads/{worktree.branch}"], f"member {member!r}"
            )
            tip_sha = tip.out.strip()
            head = self._check(["rev-parse", "--verify", "HEAD^{commit}"], "HEAD").out.strip()
            if self._is_ancestor(tip_sha, head):
                self._set_base(worktree.branch, tip_sha)
                return MergeOutcome(True, None)
            involved = self._involved(head, tip_sha)
            dirty = sorted(set(involved) & set(self._dirty_paths()))
            if dirty:
                return MergeOutcome(
                    False,
                    None,
                    "the main tree has uncommitted changes to files the merge touches: "
                    + ", ".join(dirty),
                )
            planned = self._run(
                ["merge-tree", "--write-tree", "--name-only", "--no-messages", head, tip_sha]
            )
            if planned.code == 1:
                files = [line for line in planned.out.splitlines()[1:] if line.strip()]
                messages = self._run(["merge-tree", "--write-tree", head, tip_sha])
                return MergeOutcome(False, None, _conflict_text(files, _messages(messages.out)))
            merge_message = f"Merge {worktree.branch}\n\n{message.strip() or 'accepted work'}"
            merged = self._run(
                [*_COMMIT_CONFIG, "merge", "--no-ff", "--no-edit", "-m", merge_message, tip_sha]
            )
            if not merged.ok:
                return self._abort_merge(merged)
            commit = self._check(["rev-parse", "--verify", "HEAD"], "HEAD").out.strip()
            self._set_base(worktree.branch, tip_sha)
            return MergeOutcome(True, commit)

    def reject(self, member: str) -> None:
        self._check_member(member)
        self._require_repository()
        with self._lock:
            listed = self._find(member)
            branch = listed.branch if listed is not None else self._orphan_branch(member)
            if listed is None and branch is None:
                raise WorktreeError(f"member {member!r} has no worktree")
            self._drop(member, listed, branch)

    def remove(self, member: str) -> None:
        self._check_member(member)
        if not self.available():
            return
        with self._lock:
            listed = self._find(member)
            branch = listed.branch if listed is not None else self._orphan_branch(member)
            if listed is None and branch is None:
                return
            if listed is not None:
                status = self._check(
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
                head = self._check(["rev-parse", "--verify", "HEAD^{commit}"], "HEAD").out
                if not self._is_ancestor(f"refs/heads/{branch}", head.strip()):
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
        if not self._run(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"]).ok:
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
        self._run(["worktree", "remove", "--force", "--force", real])
        self._run(["worktree", "prune"])
        raise WorktreeError(
            f"member {member!r}: the worktree went to {real}, not {path} (a symbolic link on "
            "the way); it was removed again"
        )

    def _listed(self) -> builtins.list[_Listed]:
        out = self._check(["worktree", "list", "--porcelain"], "worktree list").out
        entries: builtins.list[_Listed] = []
        for block in out.split("\n\n"):
            fields: dict[str, str] = {}
            for line in block.splitlines():
                key, _, value = line.partition(" ")
                fields[key] = value
            if "worktree" not in fields:
                continue
            branch = fields.get("branch", "")
            entries.append(
                _Listed(
                    path=os.path.realpath(fields["worktree"]),
                    head=fields.get("HEAD", ""),
                    branch=branch.removeprefix("refs/heads/"),
                )
            )
        return entries

    def _find(self, member: str) -> _Listed | None:
        """The registered worktree of `member` whose folder exists (one removed by hand is
        pruned by `create`, which checks its branch out again)."""
        want = str(self.root / member)  # real when its folders are (`_prepare_root`)
        for entry in self._listed():
            if entry.path == want and os.path.isdir(entry.path):
                return entry
        return None

    def _orphan_branch(self, member: str) -> str | None:
        """A member branch of `member` left without a worktree (the first, if several)."""
        out = self._check(
            ["for-each-ref", "--format=%(refname:short)", f"refs/heads/{BRANCH_PREFIX}"],
            "branches",
        ).out
        for line in out.splitlines():
            name = line.strip()
            if name.startswith(BRANCH_PREFIX) and name.rsplit("/", 1)[-1] == member:
                return name
        return None

    def _worktree(self, member: str, listed: _Listed) -> Worktree:
        base = ""
        if listed.branch:
            got = self._run(["config", "--get", f"branch.{listed.branch}.{_BASE_KEY}"])
            base = got.out.strip() if got.ok else ""
        if not base:  # written by an older run, or lost: the fork point with the main tree
            fork = self._run(["merge-base", "HEAD", listed.head])
            base = fork.out.strip() if fork.ok else listed.head
        return Worktree(member=member, path=listed.path, branch=listed.branch, base=base)

    def _branch_exists(self, branch: str) -> bool:
        return self._run(["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"]).ok

    def _set_base(self, branch: str, sha: str) -> None:
        self._check(["config", f"branch.{branch}.{_BASE_KEY}", sha], "config")

    def _is_ancestor(self, commit: str, of: str) -> bool:
        return self._run(["merge-base", "--is-ancestor", commit, of]).ok

    def _commit_pending(self, member: str, where: Path, message: str) -> None:
        who = f"member {member!r}"
        self._check(["add", "-A"], who, cwd=where)
        if self._run(["diff", "--cached", "--quiet"], cwd=where).ok:
            return
        text = message.strip() or f"work of {member}"
        self._check([*_COMMIT_CONFIG, "commit", "--no-verify", "-q", "-m", text], who, cwd=where)

    def _main_tree_problem(self) -> str:
        """Why the main tree cannot take a merge now ("" when it can)."""
        if not self._run(["symbolic-ref", "-q", "HEAD"]).ok:
            return "the main tree is on a detached HEAD: check out a branch first"
        for ref in ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "REBASE_HEAD"):
            if self._run(["rev-parse", "--verify", "--quiet", ref]).ok:
                return f"the main tree is in the middle of an operation ({ref}): finish it first"
        staged = self._check(["diff", "--cached", "--name-only", "-z", "HEAD"], "status").out
        names = [n for n in staged.split("\0") if n]
        if names:
            return "the main tree has staged changes: " + ", ".join(sorted(names))
        return ""

    def _involved(self, head: str, tip: str) -> builtins.list[str]:
        fork = self._check(["merge-base", head, tip], "merge-base").out.strip()
        out = self._check(
            ["diff", "--name-only", "--no-renames", "-z", fork, tip], "merge files"
        ).out
        return [n for n in out.split("\0") if n]

    def _dirty_paths(self) -> builtins.list[str]:
        """Paths of the main tree with unstaged changes or untracked (ignored aside)."""
        out = self._check(
            ["status", "--porcelain", "-z", "--untracked-files=all", "--no-renames"], "status"
        ).out
        return [entry[3:] for entry in out.split("\0") if len(entry) > 3]

    def _abort_merge(self, merged: _Result) -> MergeOutcome:
        listed = self._run(["diff", "--name-only", "-z", "--diff-filter=U"]).out
        conflicted = [n for n in listed.split("\0") if n]
        text = _messages(merged.out + "\n" + merged.err)
        self._run(["merge", "--abort"])
        return MergeOutcome(False, None, _conflict_text(conflicted, text))

    def _drop(self, member: str, listed: _Listed | None, branch: str | None) -> None:
        who = f"member {member!r}"
        if listed is not None:
            removed = self._run(["worktree", "remove", "--force", "--force", listed.path])
            if not removed.ok:
                if Path(listed.path).exists():
                    shutil.rmtree(listed.path, ignore_errors=True)
                self._check(["worktree", "prune"], who)
        if branch:
            if self._branch_exists(branch):
                self._check(["branch", "-D", branch], who)
            self._run(["config", "--remove-section", f"branch.{branch}"])

    def _check(
        self,
        args: Sequence[str],
        what: str,
        *,
        cwd: Path | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> _Result:
        result = self._run(args, cwd=cwd, extra_env=extra_env)
        if not result.ok:
            command = next((a for a in args if not a.startswith("-") and "=" not in a), "")
            raise WorktreeError(
                f"{what}: git {command} failed (exit {result.code}): "
                f"{_one_line(result.err or result.out) or 'no message'}"
            )
        return result

    def _run(
        self,
        args: Sequence[str],
        *,
        cwd: Path | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> _Result:
        env = self._env if extra_env is None else {**self._env, **extra_env}
        argv = [self._git, *args]
        try:
            done = subprocess.run(  # an argv list, never a shell
                argv,
                cwd=cwd or self._project,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self._timeout_s,
                check=False,
            )
        except FileNotFoundError as exc:
            raise WorktreeError(f"git ({self._git}) is not installed or not on PATH") from exc
        except subprocess.TimeoutExpired as exc:
            command = next((a for a in args if not a.startswith("-") and "=" not in a), "")
            raise WorktreeError(
                f"git {command} timed out after {self._timeout_s:g}s in {cwd or self._project}"
            ) from exc
        except OSError as exc:
            raise WorktreeError(f"git could not run: {exc}") from exc
        return _Result(
            done.returncode,
            done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "replace"),
        )


def _messages(text: str) -> str:
    """git's merge messages (CONFLICT lines first), one line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    conflicts = [line for line in lines if line.startswith("CONFLICT")]
    if conflicts:
        return " ".join(conflicts)
    return _one_line("\n".join(line for line in lines if not _is_sha_line(line)))


def _is_sha_line(line: str) -> bool:
    return len(line) in (40, 64) and all(c in "0123456789abcdef" for c in line)


def _conflict_text(files: Sequence[str], message: str) -> str:
    named = ", ".join(dict.fromkeys(files)) or "unknown files"
    message = message.strip()
    return f"merge conflict in {named}: {message}" if message else f"merge conflict in {named}"
