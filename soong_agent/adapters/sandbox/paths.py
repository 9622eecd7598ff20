"""The path policy of the local sandbox: how a model's path resolves, and what may touch it.

All paths here are absolute posix strings. A path is checked in two forms: *lexical* (made
absolute and normalised, symlinks untouched) and *resolved* (every existing symlink followed).
Containment is decided on the resolved form; sensitive patterns (the domain's `SensitivePaths`,
which the in-memory sandbox uses too) are matched against both, so neither a symlink into a
secret nor a symlink named like a secret gets through.

A path argument may name a file whose name is not UTF-8 by the escapes it is shown with
(``caf\\xe9.txt``, see `soong_agent.ports.text`): when the path as written names nothing but
the one with those bytes does, it is that one.

Kernel alias trees (``/proc``, ``/dev``, ``/sys``) are refused in both forms: ``/proc/self/root``,
``/proc/<pid>/cwd``, ``/proc/self/fd/N`` and ``/dev/fd/N`` can stand for any file, and no tool
needs them. A literal sensitive path also covers SQLite's sidecar files (``-wal``, ``-shm``,
``-journal``), and `is_sensitive_inode` recognises another name (a hard link) of a file that lies
under a literal sensitive path.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from soong_agent.domain.permissions.sensitive import SensitivePaths, SensitiveRule
from soong_agent.domain.permissions.targets import (
    expand_home,
    is_within,
    normalise,
    relative_parts,
)
from soong_agent.ports.errors import SandboxViolation, ToolInputError, UsageError
from soong_agent.ports.text import escaped_bytes_path

# Filesystems of these platforms usually ignore case, so a secret must not hide behind ".ENV".
FOLD_CASE = sys.platform in ("darwin", "win32")
# Kernel trees whose entries alias other files (/proc/self/root/…, /proc/self/fd/N, /dev/fd/N).
ALIAS_ROOTS: tuple[str, ...] = ("/proc", "/dev", "/sys")
# How many entries `is_sensitive_inode` looks at below one sensitive folder.
INODE_SCAN_BUDGET = 20_000

__all__ = ["ALIAS_ROOTS", "PathPolicy", "is_within", "relative_parts"]


class PathPolicy:
    """Where reads and writes may go, for one project.

    Reads: inside the resolved project. Writes: inside the resolved write roots (the project by
    default) and, when `allow_tmp_write`, the resolved system temp directory. Sensitive paths:
    never (`SensitivePaths`, shared with the in-memory sandbox). Every refusal raises
    `SandboxViolation` naming the path.
    """

    def __init__(
        self,
        *,
        project: Path,
        write_roots: Sequence[Path] | None = None,
        sensitive: Sequence[str] = (),
        allow_tmp_write: bool = False,
        home_dir: Path | None = None,
    ) -> None:
        home = os.fspath(home_dir) if home_dir is not None else os.path.expanduser("~")
        self.home = normalise(os.path.abspath(home))
        self.project = os.path.realpath(self._expand_home(os.fspath(project)))
        if not os.path.isdir(self.project):
            raise UsageError(f"the project directory {os.fspath(project)} does not exist")
        roots = [project] if write_roots is None else list(write_roots)
        resolved_roots: list[str] = []
        for root in roots:
            text = self._expand_home(os.fspath(root))
            resolved = os.path.realpath(os.path.join(self.project, text))
            if resolved not in resolved_roots:
                resolved_roots.append(resolved)
        if allow_tmp_write:
            tmp = os.path.realpath(tempfile.gettempdir())
            if tmp not in resolved_roots:
                resolved_roots.append(tmp)
        self.write_roots: tuple[str, ...] = tuple(resolved_roots)
        self.sensitive = SensitivePaths(
            sensitive,
            project=self.project,
            home=self.home,
            roots=self.write_roots,
            resolve=os.path.realpath,
            fold_case=FOLD_CASE,
        )

    @property
    def rules(self) -> tuple[SensitiveRule, ...]:
        """The compiled sensitive entries."""
        return self.sensitive.rules

    # --- resolution ------------------------------------------------------------------------

    def _expand_home(self, path: str) -> str:
        return expand_home(path, self.home)

    def lexical(self, path: str) -> str:
        """`path` made absolute (relative ones against the project, ``~`` as home), normalised."""
        if "\x00" in path:
            raise ToolInputError(f"the path {path!r} contains a NUL character")
        if not path.strip():  # an empty path means the project itself
            return self.project
        lexical = normalise(os.path.join(self.project, self._expand_home(path)))
        if "\\x" in lexical:
            return _named_by_bytes(lexical)
        return lexical

    def resolve(self, path: str) -> tuple[str, str]:
        """(lexical, resolved) forms of `path`; resolved follows every existing symlink."""
        lexical = self.lexical(path)
        return lexical, os.path.realpath(lexical)

    def display(self, path: str) -> str:
        """`path` for messages: project-relative when inside the project, else absolute."""
        try:
            lexical, resolved = self.resolve(path)
        except (ToolInputError, ValueError, OSError):
            return path
        for candidate in (lexical, resolved):
            if is_within(candidate, self.project):
                return self.relative(candidate)
        return lexical

    def relative(self, inside: str) -> str:
        """The project-relative posix form of a path inside the project (``.`` for the root)."""
        return "/".join(relative_parts(inside, self.project)) or "."

    # --- sensitive paths -------------------------------------------------------------------

    def _root_of(self, path: str) -> str | None:
        return self.sensitive.root_of(path)

    def sensitive_rule(self, lexical: str, resolved: str) -> SensitiveRule | None:
        """The first rule that `path` (in both its forms) falls under, or None."""
        return self.sensitive.rule_for(lexical, resolved)

    def entry_is_sensitive(self, path: str, name: str) -> bool:
        """For walks whose parent folder was already checked: `name` at the resolved `path`."""
        return self.sensitive.entry_is_sensitive(path, name)

    def sensitive_inodes(self) -> frozenset[tuple[int, int]]:
        """(device, inode) of every file under a literal sensitive path, as of now.

        Lets a caller recognise another name (a hard link) of such a file, e.g. a link inside
        the project to ``~/.ssh/id_rsa`` or the home's ``config.toml``. Name patterns (``.env``)
        and wildcard paths cannot be enumerated, so they are not covered. Folders are searched
        without following links, `INODE_SCAN_BUDGET` entries at most.
        """
        found: set[tuple[int, int]] = set()
        budget = [INODE_SCAN_BUDGET]
        for prefix in self.sensitive.literal_prefixes:
            _collect_inodes(prefix, found, budget)
        return frozenset(found)

    def is_sensitive_inode(self, dev: int, ino: int) -> bool:
        """Whether the file (`dev`, `ino`) also has a name under a literal sensitive path."""
        return (dev, ino) in self.sensitive_inodes()

    def _refuse_alias(self, path: str, lexical: str, resolved: str, action: str) -> None:
        for form in (lexical, resolved):
            for alias_root in ALIAS_ROOTS:
                if is_within(form, alias_root) and self._root_of(form) is None:
                    raise SandboxViolation(
                        f"{action} {path!r} refused: {form} lies under {alias_root}, whose "
                        "entries are process and device aliases (/proc/self/root, "
                        "/proc/self/fd/N, /dev/fd/N …) that tools never use"
                    )

    def _refuse_sensitive(self, path: str, lexical: str, resolved: str, action: str) -> None:
        rule = self.sensitive_rule(lexical, resolved)
        if rule is not None:
            raise SandboxViolation(
                f"{action} {self.display(path)!r} refused: it is a sensitive path "
                f"(matches {rule.pattern!r}) and is never read, written or listed"
            )

    # --- checks ----------------------------------------------------------------------------

    def check_read(self, path: str, *, action: str = "read of") -> str:
        """The resolved path if reading it is allowed; else raise SandboxViolation."""
        lexical, resolved = self.resolve(path)
        self._refuse_alias(path, lexical, resolved, action)
        self._refuse_sensitive(path, lexical, resolved, action)
        if not is_within(resolved, self.project):
            raise SandboxViolation(
                f"{action} {path!r} refused: {resolved} is outside the project {self.project}"
            )
        return resolved

    def check_write(self, path: str) -> tuple[str, str]:
        """(resolved path, write root holding it) if writing it is allowed; else raise."""
        lexical, resolved = self.resolve(path)
        self._refuse_alias(path, lexical, resolved, "write to")
        self._refuse_sensitive(path, lexical, resolved, "write to")
        for root in self.write_roots:
            if is_within(resolved, root):
                return resolved, root
        allowed = ", ".join(self.write_roots) or "none"
        outside = "outside the project and " if not is_within(resolved, self.project) else ""
        raise SandboxViolation(
            f"write to {path!r} refused: {resolved} is {outside}outside the allowed write roots "
            f"({allowed})"
        )

    def check_access(self, path: str) -> str:
        """The resolved path if it may be read or written (for existence checks)."""
        lexical, resolved = self.resolve(path)
        self._refuse_alias(path, lexical, resolved, "access to")
        self._refuse_sensitive(path, lexical, resolved, "access to")
        if is_within(resolved, self.project) or any(
            is_within(resolved, root) for root in self.write_roots
        ):
            return resolved
        raise SandboxViolation(
            f"access to {path!r} refused: {resolved} is outside the project {self.project}"
        )


def _named_by_bytes(lexical: str) -> str:
    """`lexical`, or the path its ``\\xNN`` escapes name as bytes (`ports.text`: how a file
    name that is not UTF-8 is shown, ``caf\\xe9.txt``) when that one is the file meant: the
    path as written names nothing and the escaped one names a file, or a folder to create it
    in that the path as written has not."""
    decoded = escaped_bytes_path(lexical)
    if decoded is None or os.path.lexists(lexical):
        return lexical
    if os.path.lexists(decoded):
        return decoded
    parent = os.path.dirname(decoded)
    if parent != os.path.dirname(lexical) and os.path.isdir(parent):
        return decoded
    return lexical


def _collect_inodes(top: str, out: set[tuple[int, int]], budget: list[int]) -> None:
    """Add (dev, ino) of the regular files at or below `top` (links not followed) to `out`."""
    try:
        st = os.lstat(top)
    except OSError:
        return
    if stat.S_ISREG(st.st_mode):
        out.add((st.st_dev, st.st_ino))
    if not stat.S_ISDIR(st.st_mode):
        return
    stack = [top]
    while stack and budget[0] > 0:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    budget[0] -= 1
                    if budget[0] <= 0:
                        return
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            entry_st = entry.stat(follow_symlinks=False)
                            out.add((entry_st.st_dev, entry_st.st_ino))
                    except OSError:
                        continue
        except OSError:
            continue
