"""`InMemoryWorktrees`: the Worktrees fake, for tests of the team runtime.

The main tree and each member's worktree are dicts of project-relative paths to bytes; a test
writes into a worktree with `write` / `delete` (what a member's tools would do on disk) and
reads the main tree with `main_file`. Merges are three-way per file: a file the member changed
merges when the main tree still has it as it was at the member's base (or already has the
member's version), else it is a conflict and nothing is merged. Names, errors and outcomes are
those of the git adapter; commit ids are 40 hex digits.
"""

from __future__ import annotations

import builtins
import difflib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

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

Files = dict[str, bytes]


@dataclass(slots=True)
class _Tree:
    branch: str
    base: str
    base_files: Files
    files: Files = field(default_factory=dict)


def _bytes(content: str | bytes) -> bytes:
    return content.encode("utf-8") if isinstance(content, str) else content


class InMemoryWorktrees:
    """Member worktrees of an in-memory project at `project` holding `files` (one commit).

    `available=False` is a project that is not a git repository.
    """

    def __init__(
        self,
        files: Mapping[str, str | bytes] | None = None,
        *,
        project: str = "/project",
        available: bool = True,
    ) -> None:
        self._project = project.rstrip("/") or "/"
        self._available = available
        self._main: Files = {path: _bytes(c) for path, c in (files or {}).items()}
        self._commits = 1
        self._head = self._id(self._commits)
        self._trees: dict[str, _Tree] = {}
        self._lock = threading.RLock()

    # --- test helpers --------------------------------------------------------------------

    @property
    def head(self) -> str:
        """The main tree's current commit."""
        return self._head

    def main_file(self, path: str) -> str | None:
        """A file of the main tree (None when absent)."""
        with self._lock:
            data = self._main.get(path)
        return None if data is None else data.decode("utf-8", "replace")

    def commit_main(self, path: str, content: str | bytes) -> str:
        """Someone commits `content` at `path` on the main tree's branch; the new head."""
        with self._lock:
            self._main[path] = _bytes(content)
            return self._advance()

    def write(self, member: str, path: str, content: str | bytes) -> None:
        """The member writes a file in its worktree."""
        with self._lock:
            self._tree(member).files[path] = _bytes(content)

    def delete(self, member: str, path: str) -> None:
        """The member deletes a file of its worktree."""
        with self._lock:
            self._tree(member).files.pop(path, None)

    def read(self, member: str, path: str) -> str | None:
        """A file of the member's worktree (None when absent)."""
        with self._lock:
            data = self._tree(member).files.get(path)
        return None if data is None else data.decode("utf-8", "replace")

    # --- the port ------------------------------------------------------------------------

    def available(self) -> bool:
        return self._available

    def create(self, team: str, member: str) -> Worktree:
        problem = team_problem(team)
        if problem is not None:
            raise WorktreeError(problem)
        self._check(member)
        self._require_repository()
        branch = branch_name(team, member)
        with self._lock:
            tree = self._trees.get(member)
            if tree is None:
                tree = _Tree(branch, self._head, dict(self._main), dict(self._main))
                self._trees[member] = tree
            elif tree.branch != branch:
                raise WorktreeError(
                    f"member {member!r} already has a worktree on branch {tree.branch}, "
                    f"not {branch}"
                )
            return self._worktree(member, tree)

    def get(self, member: str) -> Worktree | None:
        self._check(member)
        with self._lock:
            tree = self._trees.get(member)
            return None if tree is None else self._worktree(member, tree)

    def list(self) -> builtins.list[Worktree]:
        with self._lock:
            return [self._worktree(m, t) for m, t in sorted(self._trees.items())]

    def diff(self, member: str) -> str:
        with self._lock:
            tree = self._tree(member)
            return _unified(tree.base_files, tree.files)

    def accept(self, member: str, message: str) -> MergeOutcome:
        with self._lock:
            tree = self._tree(member)
            changed = _changed(tree.base_files, tree.files)
            if not changed:
                return MergeOutcome(True, None)
            conflicts = [
                path
                for path in changed
                if self._main.get(path) not in (tree.base_files.get(path), tree.files.get(path))
            ]
            if conflicts:
                messages = " ".join(f"CONFLICT (content): Merge conflict in {p}" for p in conflicts)
                return MergeOutcome(
                    False, None, f"merge conflict in {', '.join(conflicts)}: {messages}"
                )
            for path in changed:
                data = tree.files.get(path)
                if data is None:
                    self._main.pop(path, None)
                else:
                    self._main[path] = data
            tip = self._advance()  # the member's commit
            tree.base, tree.base_files = tip, dict(tree.files)
            return MergeOutcome(True, self._advance())

    def reject(self, member: str) -> None:
        self._check(member)
        self._require_repository()
        with self._lock:
            if self._trees.pop(member, None) is None:
                raise WorktreeError(f"member {member!r} has no worktree")

    def remove(self, member: str) -> None:
        self._check(member)
        with self._lock:
            tree = self._trees.get(member)
            if tree is None:
                return
            if _changed(tree.base_files, tree.files):
                raise WorktreeError(
                    f"member {member!r} has changes that were not accepted; "
                    "accept or reject them first"
                )
            del self._trees[member]

    # --- helpers -------------------------------------------------------------------------

    def _check(self, member: str) -> None:
        problem = name_problem(member)
        if problem is not None:
            raise WorktreeError(problem)

    def _require_repository(self) -> None:
        if not self._available:
            raise WorktreeError(
                f"{self._project} is not a git repository with a commit; member worktrees need one"
            )

    def _tree(self, member: str) -> _Tree:
        self._check(member)
        self._require_repository()
        tree = self._trees.get(member)
        if tree is None:
            raise WorktreeError(f"member {member!r} has no worktree")
        return tree

    def _worktree(self, member: str, tree: _Tree) -> Worktree:
        path = f"{self._project}/{WORKTREES_DIR}/{member}".replace("//", "/")
        assert tree.branch.startswith(BRANCH_PREFIX)
        return Worktree(member=member, path=path, branch=tree.branch, base=tree.base)

    def _advance(self) -> str:
        self._commits += 1
        self._head = self._id(self._commits)
        return self._head

    @staticmethod
    def _id(n: int) -> str:
        return f"{n:040x}"


def _changed(before: Files, after: Files) -> builtins.list[str]:
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def _text(data: bytes) -> builtins.list[str] | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _unified(before: Files, after: Files) -> str:
    out: builtins.list[str] = []
    for path in _changed(before, after):
        old, new = before.get(path), after.get(path)
        out.append(f"diff --git a/{path} b/{path}\n")
        if old is None:
            out.append("new file mode 100644\n")
        elif new is None:
            out.append("deleted file mode 100644\n")
        left = "/dev/null" if old is None else f"a/{path}"
        right = "/dev/null" if new is None else f"b/{path}"
        old_lines, new_lines = _text(old or b""), _text(new or b"")
        if old_lines is None or new_lines is None:
            out.append(f"Binary files {left} and {right} differ\n")
            continue
        lines = difflib.unified_diff(old_lines, new_lines, left, right, n=3)
        for line in lines:
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)
