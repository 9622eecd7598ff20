"""The worktrees port: one git worktree per team member, reviewed and merged by the lead.

A member works on its own branch ``soong/<team>/<member>`` in its own checkout,
``<project>/.soong-agent/worktrees/<member>``, so nothing it writes reaches the main tree until
the lead accepts it: `Worktrees.diff` shows the lead everything the member changed,
`Worktrees.accept` commits it on the member's branch and merges that branch into the main
tree's current branch (a conflict is reported, never forced), `Worktrees.reject` discards it.

Calls are synchronous and may take seconds (they run git): call them from a worker thread.
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from soong_agent.ports.errors import RunError

MEMBER_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
"""What a member name must be (whole): it names a folder and a branch."""

TEAM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
"""What a team name must be (whole): it names a branch folder."""

WORKTREES_DIR = ".soong-agent/worktrees"
"""Where the worktrees are, relative to the project."""

BRANCH_PREFIX = "soong/"
"""Every member branch is ``soong/<team>/<member>``."""


def branch_name(team: str, member: str) -> str:
    """The branch of `member` of `team`."""
    return f"{BRANCH_PREFIX}{team}/{member}"


def name_problem(member: str) -> str | None:
    """Why `member` cannot name a worktree, or None."""
    if MEMBER_NAME.fullmatch(member) is None:
        return (
            f"member name {member!r} refused: use 1 to 64 of a-z, 0-9 and '-', "
            "starting with a letter or digit"
        )
    return None


def team_problem(team: str) -> str | None:
    """Why `team` cannot name a branch folder, or None."""
    if TEAM_NAME.fullmatch(team) is None:
        return (
            f"team name {team!r} refused: use 1 to 128 of A-Z, a-z, 0-9, '_' and '-', "
            "starting with a letter or digit"
        )
    return None


@dataclass(frozen=True, slots=True)
class Worktree:
    """A member's checkout.

    `path` is the worktree's root folder (absolute), `branch` its branch (without
    ``refs/heads/``), `base` the commit its pending work is measured from: the commit it started
    from, then, after each accepted merge, the tip that was merged.
    """

    member: str
    path: str
    branch: str
    base: str


@dataclass(frozen=True, slots=True)
class MergeOutcome:
    """What `Worktrees.accept` did.

    `merged`: the member's work is in the main tree's branch; `commit` is the merge commit, None
    when there was nothing to merge. When not merged, `conflict` says why: the files in
    conflict and git's message, or the main tree's changes that stand in the way; the main tree
    is then exactly as it was.
    """

    merged: bool
    commit: str | None
    conflict: str = ""


class WorktreeError(RunError):
    """A worktree operation failed (not a repository, an unknown member, git failed); the
    message is one line and names the member when there is one."""


@runtime_checkable
class Worktrees(Protocol):
    """The worktrees of one project's members. Synchronous; safe to call from several threads."""

    def available(self) -> bool:
        """The project is a git repository with at least one commit (and git runs)."""
        ...

    def create(self, team: str, member: str) -> Worktree:
        """A new worktree for `member` on branch ``soong/<team>/<member>``, started at the main
        tree's HEAD. Idempotent: an existing worktree of that branch is returned as it is (after
        a restart); a branch left without its worktree gets it back. WorktreeError for a bad
        name, a project that is not a repository, or a member whose worktree is another
        team's."""
        ...

    def get(self, member: str) -> Worktree | None:
        """The member's worktree, None when it has none."""
        ...

    def list(self) -> builtins.list[Worktree]:
        """Every member worktree, sorted by member."""
        ...

    def diff(self, member: str) -> str:
        """Everything the member changed since its base, as one unified diff: commits on its
        branch, staged, unstaged and untracked files (ignored files aside); binary files are
        named, not shown. Empty when nothing changed. Changes nothing."""
        ...

    def accept(self, member: str, message: str) -> MergeOutcome:
        """Commit the worktree's pending changes on its branch (`message`, author soong-agent),
        then merge the branch into the main tree's current branch with a merge commit.

        Not merged (and the main tree left as it was) when the merge conflicts, when the main
        tree has staged changes or changes to the files involved, is on a detached HEAD or in
        the middle of a merge. WorktreeError for an unknown member."""
        ...

    def reject(self, member: str) -> None:
        """Remove the worktree, changes and all, and delete its branch. WorktreeError when the
        member has neither."""
        ...

    def remove(self, member: str) -> None:
        """Clean up after a member whose work was accepted: worktree and branch gone. Nothing
        to do when it has none; WorktreeError (nothing removed) when it holds work that was not
        accepted (pending changes, or commits not in the main tree's branch)."""
        ...
