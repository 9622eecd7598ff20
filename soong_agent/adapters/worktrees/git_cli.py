"""The ``git`` command line of `GitWorktrees` (TEAM-4): each call an argv list (never a shell),
``subprocess.run`` with a timeout, stdin closed, ``GIT_TERMINAL_PROMPT=0``, ``LC_ALL=C`` (messages
we parse), the caller's ``GIT_DIR`` / ``GIT_WORK_TREE`` / ``GIT_INDEX_FILE`` dropped; and the
questions the worktrees ask the repository."""

from __future__ import annotations

import builtins
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from soong_agent.ports.worktrees import BRANCH_PREFIX, MergeOutcome, WorktreeError

AUTHOR_NAME = "soong-agent"
AUTHOR_EMAIL = "soong-agent@localhost"
BASE_KEY = "soongbase"
BASE_KEY = "soongbase"
DROPPED_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)
COMMIT_CONFIG = (
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
class GitResult:
    """What one git call gave: its exit code and its output."""

    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0


@dataclass(frozen=True, slots=True)
class Listed:
    """One entry of ``git worktree list --porcelain``."""

    path: str
    head: str
    branch: str  # without refs/heads/; "" when detached


def one_line(text: str, limit: int = 400) -> str:
    """`text`'s non-empty lines joined on one line, cut at `limit`."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    joined = "; ".join(lines)
    return joined if len(joined) <= limit else joined[: limit - 1] + "…"


class GitCli:
    """``git`` in the repository at `project`: `git` is the binary (a name on PATH or a path),
    `timeout_s` bounds each call, `env` is the environment git runs with (default: this
    process's)."""

    def __init__(
        self,
        project: Path,
        *,
        git: str = "git",
        timeout_s: float = 120.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._project = project
        self._git = git
        self._timeout_s = timeout_s
        base_env = dict(os.environ if env is None else env)
        for name in DROPPED_ENV:
            base_env.pop(name, None)
        base_env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANGUAGE": "C"})
        self._env = base_env

    def listed(self) -> builtins.list[Listed]:
        out = self.check(["worktree", "list", "--porcelain"], "worktree list").out
        entries: builtins.list[Listed] = []
        for block in out.split("\n\n"):
            fields: dict[str, str] = {}
            for line in block.splitlines():
                key, _, value = line.partition(" ")
                fields[key] = value
            if "worktree" not in fields:
                continue
            branch = fields.get("branch", "")
            entries.append(
                Listed(
                    path=os.path.realpath(fields["worktree"]),
                    head=fields.get("HEAD", ""),
                    branch=branch.removeprefix("refs/heads/"),
                )
            )
        return entries

    def branch_exists(self, branch: str) -> bool:
        return self.run(["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"]).ok

    def set_base(self, branch: str, sha: str) -> None:
        self.check(["config", f"branch.{branch}.{BASE_KEY}", sha], "config")

    def is_ancestor(self, commit: str, of: str) -> bool:
        return self.run(["merge-base", "--is-ancestor", commit, of]).ok

    def main_tree_problem(self) -> str:
        """Why the main tree cannot take a merge now ("" when it can)."""
        if not self.run(["symbolic-ref", "-q", "HEAD"]).ok:
            return "the main tree is on a detached HEAD: check out a branch first"
        for ref in ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "REBASE_HEAD"):
            if self.run(["rev-parse", "--verify", "--quiet", ref]).ok:
                return f"the main tree is in the middle of an operation ({ref}): finish it first"
        staged = self.check(["diff", "--cached", "--name-only", "-z", "HEAD"], "status").out
        names = [n for n in staged.split("\0") if n]
        if names:
            return "the main tree has staged changes: " + ", ".join(sorted(names))
        return ""

    def involved(self, head: str, tip: str) -> builtins.list[str]:
        fork = self.check(["merge-base", head, tip], "merge-base").out.strip()
        out = self.check(
            ["diff", "--name-only", "--no-renames", "-z", fork, tip], "merge files"
        ).out
        return [n for n in out.split("\0") if n]

    def dirty_paths(self) -> builtins.list[str]:
        """Paths of the main tree with unstaged changes or untracked (ignored aside)."""
        out = self.check(
            ["status", "--porcelain", "-z", "--untracked-files=all", "--no-renames"], "status"
        ).out
        return [entry[3:] for entry in out.split("\0") if len(entry) > 3]

    def abort_merge(self, merged: GitResult) -> MergeOutcome:
        listed = self.run(["diff", "--name-only", "-z", "--diff-filter=U"]).out
        conflicted = [n for n in listed.split("\0") if n]
        text = merge_messages(merged.out + "\n" + merged.err)
        self.run(["merge", "--abort"])
        return MergeOutcome(False, None, conflict_text(conflicted, text))

    def check(
        self,
        args: Sequence[str],
        what: str,
        *,
        cwd: Path | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> GitResult:
        result = self.run(args, cwd=cwd, extra_env=extra_env)
        if not result.ok:
            command = next((a for a in args if not a.startswith("-") and "=" not in a), "")
            raise WorktreeError(
                f"{what}: git {command} failed (exit {result.code}): "
                f"{one_line(result.err or result.out) or 'no message'}"
            )
        return result

    def run(
        self,
        args: Sequence[str],
        *,
        cwd: Path | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> GitResult:
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
        return GitResult(
            done.returncode,
            done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "replace"),
        )

    def orphan_branch(self, member: str) -> str | None:
        """A member branch of `member` left without a worktree (the first, if several)."""
        out = self.check(
            ["for-each-ref", "--format=%(refname:short)", f"refs/heads/{BRANCH_PREFIX}"],
            "branches",
        ).out
        for line in out.splitlines():
            name = line.strip()
            if name.startswith(BRANCH_PREFIX) and name.rsplit("/", 1)[-1] == member:
                return name
        return None

    def commit_pending(self, member: str, where: Path, message: str) -> None:
        who = f"member {member!r}"
        self.check(["add", "-A"], who, cwd=where)
        if self.run(["diff", "--cached", "--quiet"], cwd=where).ok:
            return
        text = message.strip() or f"work of {member}"
        self.check([*COMMIT_CONFIG, "commit", "--no-verify", "-q", "-m", text], who, cwd=where)


def merge_messages(text: str) -> str:
    """git's merge messages (CONFLICT lines first), one line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    conflicts = [line for line in lines if line.startswith("CONFLICT")]
    if conflicts:
        return " ".join(conflicts)
    return one_line("\n".join(line for line in lines if not _is_sha_line(line)))


def _is_sha_line(line: str) -> bool:
    return len(line) in (40, 64) and all(c in "0123456789abcdef" for c in line)


def conflict_text(files: Sequence[str], message: str) -> str:
    named = ", ".join(dict.fromkeys(files)) or "unknown files"
    message = message.strip()
    return f"merge conflict in {named}: {message}" if message else f"merge conflict in {named}"
