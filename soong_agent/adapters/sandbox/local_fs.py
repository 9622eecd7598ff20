"""`LocalFileSystem`: the `FileSystem` port over the local disk, confined by a `PathPolicy`.

Every path is resolved and checked by the policy, then opened with `safe_io.open_beneath`, which
walks from the allowed root without following symlinks, so a symlink swapped in between the
check and the open cannot redirect the access. Reads also compare the opened file's device and
inode with those seen at the check; writes refuse files with more than one hard link.

Single-file operations do their I/O directly on the event loop: the files are local and small,
each call is a handful of syscalls taking microseconds, and a thread hop would cost more than it
saves. `glob` and `grep` walk whole trees, which can take seconds on a big repository, so they run
in a worker thread (`asyncio.to_thread`) and stop early when the awaiting task is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import stat
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from soong_agent.adapters.sandbox import safe_io
from soong_agent.adapters.sandbox.globbing import GlobMatcher, compile_filter, compile_glob
from soong_agent.adapters.sandbox.paths import PathPolicy, relative_parts
from soong_agent.ports.errors import SandboxViolation, ToolInputError
from soong_agent.ports.filesystem import DirEntry, GrepMatch, Listing

GREP_MAX_FILE_BYTES = 2 * 1024 * 1024
GREP_BINARY_SNIFF_BYTES = 8 * 1024
GREP_MAX_LINE_CHARS = 2000

_T = TypeVar("_T")


def _with_display(exc: OSError, display: str) -> OSError:
    """The same kind of OSError, naming the path as the user knows it."""
    if exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror or os.strerror(exc.errno), display)


def _error(kind: type[OSError], code: int, display: str) -> OSError:
    return kind(code, os.strerror(code), display)


class LocalFileSystem:
    """Project files on the local disk, behind the sandbox policy (SBX-1).

    Reads are confined to the resolved `project`; writes to `write_roots` (default: the project)
    plus the system temp directory when `allow_tmp_write`; `sensitive` patterns (``.env``,
    ``~/.ssh``, absolute paths; ``~`` is `home_dir` or the user's home) are never read, written,
    listed or searched.
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
        self._policy = PathPolicy(
            project=project,
            write_roots=write_roots,
            sensitive=sensitive,
            allow_tmp_write=allow_tmp_write,
            home_dir=home_dir,
        )

    # --- plain properties ------------------------------------------------------------------

    @property
    def root(self) -> str:
        """The resolved project directory."""
        return self._policy.project

    @property
    def policy(self) -> PathPolicy:
        """The path policy in force (read-only use)."""
        return self._policy

    def display_path(self, path: str) -> str:
        """`path` relative to the project when inside it, else absolute."""
        return self._policy.display(path)

    def check_write(self, path: str) -> str:
        """The resolved absolute path if a write there is allowed; else raise SandboxViolation."""
        resolved, _root = self._policy.check_write(path)
        try:
            st = os.stat(resolved, follow_symlinks=False)
        except OSError:
            return resolved
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            raise self._hard_link_violation(path)
        return resolved

    # --- the port --------------------------------------------------------------------------

    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The file's bytes (the first `max_bytes` of them when given)."""
        return self._read_bytes(path, max_bytes)

    async def file_size(self, path: str) -> int:
        """The file's size in bytes."""
        return self._file_size(path)

    async def write_text(self, path: str, text: str) -> None:
        """Create or replace a UTF-8 text file; missing parent folders are created."""
        self._write_text(path, text)

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
        entries = self._list_dir(path)
        return entries[: max(limit, 0)], len(entries) > max(limit, 0)

    async def glob(self, pattern: str, *, base: str, limit: int) -> Listing:
        """Project-relative posix paths of files under `base` matching `pattern`, sorted."""
        return await self._in_thread(lambda stop: self._glob(pattern, base, limit, stop))

    async def grep(
        self, pattern: str, *, base: str, glob: str | None, limit: int, ignore_case: bool
    ) -> tuple[list[GrepMatch], bool]:
        """Lines matching the regex `pattern` in text files under `base` (or the file `base`)."""
        return await self._in_thread(
            lambda stop: self._grep(pattern, base, glob, limit, ignore_case, stop)
        )

    # --- helpers ---------------------------------------------------------------------------

    @staticmethod
    async def _in_thread(work: Callable[[threading.Event], _T]) -> _T:
        stop = threading.Event()
        try:
            return await asyncio.to_thread(work, stop)
        except asyncio.CancelledError:
            stop.set()  # the worker thread notices and ends its walk
            raise

    def _hard_link_violation(self, path: str) -> SandboxViolation:
        return SandboxViolation(
            f"write to {self.display_path(path)!r} refused: the file has more than one hard "
            "link, and another name for it may lie outside the sandbox"
        )

    def _open_in_project(self, resolved: str, flags: int, display: str) -> int:
        project = self._policy.project
        parts = relative_parts(resolved, project)
        try:
            if not parts:
                return safe_io.open_root(project)
            return safe_io.open_beneath(project, parts, flags, display=display)
        except OSError as exc:
            raise _with_display(exc, display) from None

    def _read_bytes(self, path: str, max_bytes: int | None) -> bytes:
        display = self.display_path(path)
        resolved = self._policy.check_read(path)
        try:
            before = os.stat(resolved, follow_symlinks=False)
        except OSError as exc:
            raise _with_display(exc, display) from None
        if stat.S_ISDIR(before.st_mode):
            raise _error(IsADirectoryError, errno.EISDIR, display)
        if stat.S_ISLNK(before.st_mode):  # it resolved to a non-link a moment ago
            raise safe_io.swapped_error(display)
        if not stat.S_ISREG(before.st_mode):
            raise ToolInputError(f"{display!r} is not a regular file")
        fd = self._open_in_project(resolved, safe_io.READ_FLAGS, display)
        try:
            after = os.fstat(fd)
            if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
                raise SandboxViolation(
                    f"read of {display!r} refused: the file was replaced between the check "
                    "and the open"
                )
            if max_bytes is not None and max_bytes <= 0:
                return b""
            return safe_io.read_all(fd, max_bytes)
        finally:
            os.close(fd)

    def _file_size(self, path: str) -> int:
        display = self.display_path(path)
        resolved = self._policy.check_read(path)
        fd = self._open_in_project(resolved, safe_io.READ_FLAGS, display)
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise _error(IsADirectoryError, errno.EISDIR, display)
        return st.st_size

    def _write_text(self, path: str, text: str) -> None:
        display = self.display_path(path)
        resolved, root = self._policy.check_write(path)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ToolInputError(f"the text for {display!r} is not valid UTF-8: {exc}") from None
        parts = relative_parts(resolved, root)
        if not parts:
            raise _error(IsADirectoryError, errno.EISDIR, display)
        try:
            fd = safe_io.open_beneath(
                root, parts, safe_io.WRITE_FLAGS, display=display, make_parents=True
            )
        except OSError as exc:
            raise _with_display(exc, display) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ToolInputError(f"{display!r} is not a regular file")
            # Checked before truncating: a hard link's other name may be a file outside.
            if st.st_nlink > 1:
                raise self._hard_link_violation(path)
            os.ftruncate(fd, 0)
            safe_io.write_all(fd, data)
        finally:
            os.close(fd)

    def _list_dir(self, path: str) -> list[DirEntry]:
        display = self.display_path(path)
        resolved = self._policy.check_read(path, action="listing of")
        fd = self._open_in_project(resolved, safe_io.DIR_FLAGS, display)
        prefix = "" if resolved == self._policy.project else self._policy.relative(resolved) + "/"
        out: list[DirEntry] = []
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                raise _error(NotADirectoryError, errno.ENOTDIR, display)
            with os.scandir(fd) as scan:
                for entry in scan:
                    absolute = f"{resolved.rstrip('/')}/{entry.name}"
                    if self._policy.entry_is_sensitive(absolute, entry.name):
                        continue
                    is_dir, size = self._describe(entry, absolute)
                    out.append(DirEntry(path=prefix + entry.name, is_dir=is_dir, size=size))
        finally:
            os.close(fd)
        out.sort(key=lambda item: item.path)
        return out

    def _describe(self, entry: os.DirEntry[str], absolute: str) -> tuple[bool, int]:
        """(is_dir, size) of a listed entry; a symlink counts only if its target is readable."""
        try:
            if entry.is_symlink():
                target = self._policy.check_read(absolute)
                st = os.stat(target)
            else:
                st = entry.stat(follow_symlinks=False)
        except (OSError, SandboxViolation):
            return False, 0
        if stat.S_ISDIR(st.st_mode):
            return True, 0
        return False, st.st_size

    def _prune(self, absolute: str, name: str) -> bool:
        return self._policy.entry_is_sensitive(absolute, name)

    def _walk_top(self, base: str, display: str) -> str:
        """The resolved folder `base`, checked for reading."""
        resolved = self._policy.check_read(base, action="search of")
        try:
            st = os.stat(resolved)
        except OSError as exc:
            raise _with_display(exc, display) from None
        if not stat.S_ISDIR(st.st_mode):
            raise _error(NotADirectoryError, errno.ENOTDIR, display)
        return resolved

    def _glob(self, pattern: str, base: str, limit: int, stop: threading.Event) -> Listing:
        base_display = self.display_path(base)
        base_resolved = self._walk_top(base, base_display)
        matcher = compile_glob(self._relative_pattern(pattern, base, base_resolved))
        top = base_resolved
        depth = matcher.max_depth
        if matcher.literal_prefix:
            prefix_path = os.path.join(base_resolved, *matcher.literal_prefix)
            top = self._policy.check_read(prefix_path, action="search of")
            if not os.path.isdir(top):
                return Listing(items=[], truncated=False)
            if depth is not None:
                depth -= len(matcher.literal_prefix)
        lex_prefix = "".join(part + "/" for part in matcher.literal_prefix)
        out_prefix = "" if top == self._policy.project else self._policy.relative(top) + "/"
        items: list[str] = []
        truncated = False
        walk = safe_io.walk_files(top, prune=self._prune, max_depth=depth, stop=stop)
        with contextlib.closing(walk) as files:
            for found in files:
                if not matcher.matches(lex_prefix + found.rel):
                    continue
                if found.is_symlink and not self._link_target_is_file(top, found.rel):
                    continue
                if len(items) >= limit:
                    truncated = True
                    break
                items.append(out_prefix + found.rel)
        return Listing(items=items, truncated=truncated)

    def _relative_pattern(self, pattern: str, base: str, base_resolved: str) -> str:
        """`pattern` relative to the base; an absolute one must lie below the base."""
        if not pattern.startswith("/"):
            return pattern
        for root in (base_resolved, self._policy.lexical(base)):
            head = root.rstrip("/") + "/"
            if pattern.startswith(head):
                return pattern[len(head) :]
        raise ToolInputError(
            f"the glob pattern {pattern!r} is absolute but not below the base "
            f"{self.display_path(base)!r}; give it relative to the base"
        )

    def _link_target_is_file(self, top: str, rel: str) -> bool:
        try:
            target = self._policy.check_read(f"{top.rstrip('/')}/{rel}")
            return os.path.isfile(target)
        except (SandboxViolation, ToolInputError, OSError):
            return False

    def _grep(
        self,
        pattern: str,
        base: str,
        glob: str | None,
        limit: int,
        ignore_case: bool,
        stop: threading.Event,
    ) -> tuple[list[GrepMatch], bool]:
        try:
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise ToolInputError(f"invalid regular expression {pattern!r}: {exc}") from None
        file_filter: tuple[GlobMatcher, bool] | None = compile_filter(glob) if glob else None
        display = self.display_path(base)
        resolved = self._policy.check_read(base, action="search of")
        try:
            st = os.stat(resolved)
        except OSError as exc:
            raise _with_display(exc, display) from None
        matches: list[GrepMatch] = []
        if not stat.S_ISDIR(st.st_mode):  # one file, searched whatever the glob says
            fd = self._open_in_project(resolved, safe_io.READ_FLAGS, display)
            text = _grep_text(fd)
            truncated = _search(regex, text, self._policy.relative(resolved), matches, limit)
            return matches, truncated
        out_prefix = "" if resolved == self._policy.project else self._policy.relative(resolved)
        out_prefix = out_prefix + "/" if out_prefix else ""
        walk = safe_io.walk_files(resolved, prune=self._prune, stop=stop)
        with contextlib.closing(walk) as files:
            for found in files:
                if found.is_symlink:  # its target, if inside the project, is searched itself
                    continue
                if file_filter is not None:
                    matcher, on_name = file_filter
                    if not matcher.matches(found.name if on_name else found.rel):
                        continue
                try:
                    fd = os.open(
                        found.name,
                        safe_io.READ_FLAGS | os.O_NOFOLLOW | os.O_CLOEXEC,
                        dir_fd=found.dir_fd,
                    )
                except OSError:
                    continue
                text = _grep_text(fd)
                if _search(regex, text, out_prefix + found.rel, matches, limit):
                    return matches, True
        return matches, False


def _grep_text(fd: int) -> str | None:
    """The decoded text of the open file `fd` (closed here), or None to skip it."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > GREP_MAX_FILE_BYTES:
            return None
        data = safe_io.read_all(fd, GREP_MAX_FILE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > GREP_MAX_FILE_BYTES or b"\x00" in data[:GREP_BINARY_SNIFF_BYTES]:
        return None
    return data.decode("utf-8", errors="replace")


def _search(
    regex: re.Pattern[str], text: str | None, path: str, out: list[GrepMatch], limit: int
) -> bool:
    """Append the matching lines of `text` to `out`; True when `limit` was exceeded."""
    if text is None:
        return False
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, raw in enumerate(lines, start=1):
        line = raw.removesuffix("\r")
        if regex.search(line) is None:
            continue
        if len(out) >= limit:
            return True
        if len(line) > GREP_MAX_LINE_CHARS:
            line = line[:GREP_MAX_LINE_CHARS] + "…"
        out.append(GrepMatch(path=path, line_number=number, line=line))
    return False
