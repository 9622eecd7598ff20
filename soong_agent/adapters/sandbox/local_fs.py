"""`LocalFileSystem`: the `FileSystem` port over the local disk, confined by a `PathPolicy`.

Every path is resolved and checked by the policy, then opened with `safe_io.open_beneath`, which
walks from the allowed root without following symlinks, so a symlink swapped in between the
check and the open cannot redirect the access. Reads also compare the opened file's device and
inode with those seen at the check; writes refuse files with more than one hard link, and reads
refuse a hard link to a file under a literal sensitive path.

Single-file operations do their I/O directly on the event loop: the files are local and small,
each call is a handful of syscalls taking microseconds, and a thread hop would cost more than it
saves. `glob` and `grep` run the ripgrep binary (`rg`, from the ``ripgrep`` wheel) as an asyncio
subprocess: it honours ``.gitignore``/``.ignore`` (also outside git repositories), never follows
symlinks, skips binary and over-2-MiB files, and is killed as soon as the result cap is reached.
Every path it reports goes through the same policy again before it is returned, so ripgrep can
never list or show what a read would refuse. There is no pure-Python fallback: without `rg` the
constructor fails with `RipgrepMissing`.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from soong_agent.adapters.sandbox import safe_io
from soong_agent.adapters.sandbox.globbing import (
    GlobMatcher,
    compile_filter,
    compile_glob,
    last_segments,
)
from soong_agent.adapters.sandbox.paths import PathPolicy, relative_parts
from soong_agent.adapters.sandbox.ripgrep import (
    COMMON_FLAGS,
    GREP_MAX_FILESIZE,
    RgOutcome,
    exclusion_globs,
    find_rg,
    json_text,
    name_filter,
    run_rg,
)
from soong_agent.ports.errors import RunError, SandboxViolation, ToolInputError
from soong_agent.ports.filesystem import DirEntry, GrepMatch, Listing

GREP_MAX_FILE_BYTES = 2 * 1024 * 1024  # the same as GREP_MAX_FILESIZE ("2M") for ripgrep
GREP_BINARY_SNIFF_BYTES = 64 * 1024
GREP_MAX_LINE_CHARS = 2000
REGEX_SYNTAX_NOTE = (
    "grep runs ripgrep, whose patterns use Rust regex syntax: close to Python's, but without "
    "look-around ((?=…), (?<=…)) or backreferences (\\1)"
)


def _with_display(exc: OSError, display: str) -> OSError:
    """The same kind of OSError, naming the path as the user knows it."""
    if exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror or os.strerror(exc.errno), display)


def _error(kind: type[OSError], code: int, display: str) -> OSError:
    return kind(code, os.strerror(code), display)


def _below(path: str, top: str) -> str | None:
    """`path` relative to the folder `top` (posix), or None when it is not strictly below it."""
    head = top.rstrip("/") + "/"
    return path[len(head) :] if path.startswith(head) and len(path) > len(head) else None


def _mode(path: str) -> int:
    """The mode of what `path` names (links followed), 0 when nothing is there."""
    try:
        return os.stat(path).st_mode
    except (OSError, ValueError):
        return 0


def _clean_line(text: str) -> str:
    line = text.removesuffix("\n").removesuffix("\r")
    if len(line) > GREP_MAX_LINE_CHARS:
        line = line[:GREP_MAX_LINE_CHARS] + "…"
    return line


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
        self._rg_excludes = exclusion_globs(
            [rule.pattern.strip() for rule in self._policy.rules if rule.name_glob is not None]
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

    @property
    def rg_path(self) -> str:
        """The ripgrep binary that `glob` and `grep` run."""
        return self._rg

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
        if self._is_sensitive_link(st):
            raise self._sensitive_link_violation(path, "read of")
        return resolved

    def sensitive_below(self, path: str, *, limit: int = 20_000) -> str | None:
        """A sensitive file or folder under the folder `path` (display form), or None.

        Used to refuse commands that read folders recursively (`grep -r`, `tar`, `rg`): the
        shell would open what the file tools refuse. Symlinked folders are not entered; the
        walk stops after `limit` entries (then the folder counts as unchecked: None).
        """
        try:
            _, resolved = self._policy.resolve(path)
        except SandboxViolation:
            return None
        if not os.path.isdir(resolved):
            return None
        seen = 0
        for folder, dirs, files in os.walk(resolved, followlinks=False):
            for name in (*dirs, *files):
                seen += 1
                if seen > limit:
                    return None
                full = os.path.join(folder, name)
                if self._policy.entry_is_sensitive(full, name):
                    return self._policy.display(full)
        return None

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
        """Project-relative posix paths of files under `base` matching `pattern`.

        In path order (folder by folder, names sorted); ignored files (``.gitignore``,
        ``.ignore``), symlinks, `ripgrep.EXCLUDED_DIRS` and sensitive paths are left out.
        `truncated` says more than `limit` files matched.
        """
        return await self._glob(pattern, base, limit)

    async def grep(
        self, pattern: str, *, base: str, glob: str | None, limit: int, ignore_case: bool
    ) -> tuple[list[GrepMatch], bool]:
        """Lines matching the regex `pattern` (Rust regex syntax) under `base` (or the file).

        Binary files, files over 2 MiB, ignored files, symlinks and sensitive paths are not
        searched or not reported; at most `limit` matches, and whether there were more.
        """
        return await self._grep(pattern, base, glob, limit, ignore_case)

    # --- helpers ---------------------------------------------------------------------------

    def _hard_link_violation(self, path: str) -> SandboxViolation:
        return SandboxViolation(
            f"write to {self.display_path(path)!r} refused: the file has more than one hard "
            "link, and another name for it may lie outside the sandbox"
        )

    def _sensitive_link_violation(self, path: str, action: str) -> SandboxViolation:
        return SandboxViolation(
            f"{action} {self.display_path(path)!r} refused: it is a hard link to a sensitive "
            "file, which is never read, written or listed"
        )

    def _is_sensitive_link(self, st: os.stat_result) -> bool:
        return (
            stat.S_ISREG(st.st_mode)
            and st.st_nlink > 1
            and self._policy.is_sensitive_inode(st.st_dev, st.st_ino)
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
            if self._is_sensitive_link(after):
                raise self._sensitive_link_violation(path, "read of")
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
        if self._is_sensitive_link(st):
            raise self._sensitive_link_violation(path, "read of")
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
        guard = self._guard()
        try:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                raise _error(NotADirectoryError, errno.ENOTDIR, display)
            with os.scandir(fd) as scan:
                for entry in scan:
                    absolute = f"{resolved.rstrip('/')}/{entry.name}"
                    if self._policy.entry_is_sensitive(absolute, entry.name):
                        continue
                    described = self._describe(entry, absolute, guard)
                    if described is None:
                        continue
                    is_dir, size = described
                    out.append(DirEntry(path=prefix + entry.name, is_dir=is_dir, size=size))
        finally:
            os.close(fd)
        out.sort(key=lambda item: item.path)
        return out

    def _describe(
        self, entry: os.DirEntry[str], absolute: str, guard: _LinkGuard
    ) -> tuple[bool, int] | None:
        """(is_dir, size) of a listed entry, None to leave it out (a hard link to a secret).

        A symlink counts only if its target is readable.
        """
        try:
            if entry.is_symlink():
                target = self._policy.check_read(absolute)
                st = os.stat(target)
            else:
                st = entry.stat(follow_symlinks=False)
        except (OSError, SandboxViolation):
            return False, 0
        if guard.is_sensitive_link(st):
            return None
        if stat.S_ISDIR(st.st_mode):
            return True, 0
        return False, st.st_size

    def _guard(self) -> _LinkGuard:
        return _LinkGuard(self._policy)

    # --- glob and grep (ripgrep) -----------------------------------------------------------

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

    def _reportable(self, absolute: str, guard: _LinkGuard) -> str | None:
        """The project-relative path of a file ripgrep reported, if the policy lets it out.

        Re-checked here whatever ripgrep did: inside the project, not sensitive, no symlink
        anywhere on the way (ripgrep follows none, so one now means a swap), a regular file,
        not a hard link to a sensitive file.
        """
        try:
            resolved = self._policy.check_read(absolute, action="listing of")
        except (SandboxViolation, ToolInputError, ValueError, OSError):
            return None
        if resolved != absolute:
            return None
        try:
            st = os.stat(absolute, follow_symlinks=False)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or guard.is_sensitive_link(st):
            return None
        return self._policy.relative(resolved)

    async def _glob(self, pattern: str, base: str, limit: int) -> Listing:
        base_display = self.display_path(base)
        base_resolved = self._walk_top(base, base_display)
        relative_pattern = self._relative_pattern(pattern, base, base_resolved)
        matcher = compile_glob(relative_pattern)
        top = base_resolved
        depth = matcher.max_depth
        if matcher.literal_prefix:
            top = self._policy.check_read(
                os.path.join(base_resolved, *matcher.literal_prefix), action="search of"
            )
            if not stat.S_ISDIR(_mode(top)):
                return Listing(items=[], truncated=False)
            if depth is not None:
                depth -= len(matcher.literal_prefix)
        lex_prefix = "".join(part + "/" for part in matcher.literal_prefix)
        args = ["--files", "--null", *COMMON_FLAGS]
        if depth is not None:
            args.append(f"--max-depth={max(depth, 1)}")
        args += self._name_prefilter(relative_pattern)
        args += [*self._rg_excludes, "--", top]

        items: list[str] = []
        truncated = False
        guard = self._guard()

        def consume(record: bytes) -> bool:
            nonlocal truncated
            absolute = os.fsdecode(record)
            rel = _below(absolute, top)
            if rel is None or not matcher.matches(lex_prefix + rel):
                return True
            shown = self._reportable(absolute, guard)
            if shown is None:
                return True
            if len(items) >= limit:
                truncated = True
                return False
            items.append(shown)
            return True

        outcome = await run_rg(
            self._rg, args, separator=b"\0", consume=consume, cwd=self._policy.project
        )
        if outcome.returncode not in (0, 1, None) and outcome.records == 0 and outcome.stderr:
            raise RunError(f"glob {pattern!r} failed: ripgrep said: {outcome.stderr}")
        return Listing(items=items, truncated=truncated)

    @staticmethod
    def _name_prefilter(pattern: str) -> list[str]:
        """Arguments letting through only the base names `pattern` can match (or none)."""
        return name_filter(last_segments(pattern))

    async def _grep(
        self, pattern: str, base: str, glob: str | None, limit: int, ignore_case: bool
    ) -> tuple[list[GrepMatch], bool]:
        if "\x00" in pattern:
            raise ToolInputError("the grep pattern contains a NUL character")
        file_filter = compile_filter(glob) if glob else None
        display = self.display_path(base)
        resolved = self._policy.check_read(base, action="search of")
        try:
            st = os.stat(resolved)
        except OSError as exc:
            raise _with_display(exc, display) from None
        args = ["--json", *COMMON_FLAGS, f"--max-filesize={GREP_MAX_FILESIZE}", "--crlf"]
        if ignore_case:
            args.append("--ignore-case")
        if stat.S_ISDIR(st.st_mode):
            if glob:
                args += self._name_prefilter(glob)
            args += [*self._rg_excludes, f"--regexp={pattern}", "--", resolved]
            return await self._run_grep(
                pattern, args, limit, stdin=None, top=resolved, file_filter=file_filter
            )
        # One file, searched whatever the glob says. It is opened here (no symlink followed)
        # and handed to ripgrep as stdin, so what is searched is exactly what was checked.
        fd = self._open_in_project(resolved, safe_io.READ_FLAGS, display)
        try:
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode):
                raise ToolInputError(f"{display!r} is not a regular file")
            if self._guard().is_sensitive_link(opened):
                raise self._sensitive_link_violation(base, "search of")
            if opened.st_size > GREP_MAX_FILE_BYTES:
                return [], False
            if b"\x00" in os.pread(fd, GREP_BINARY_SNIFF_BYTES, 0):
                return [], False
            args += [f"--regexp={pattern}", "--", "-"]
            return await self._run_grep(
                pattern, args, limit, stdin=fd, fixed=self._policy.relative(resolved)
            )
        finally:
            os.close(fd)

    async def _run_grep(
        self,
        pattern: str,
        args: list[str],
        limit: int,
        *,
        stdin: int | None,
        top: str = "",
        file_filter: tuple[GlobMatcher, bool] | None = None,
        fixed: str | None = None,
    ) -> tuple[list[GrepMatch], bool]:
        matches: list[GrepMatch] = []
        truncated = False
        saw_summary = False
        guard = self._guard()
        verdicts: dict[str, str | None] = {}

        def reportable(absolute: str) -> str | None:
            if absolute not in verdicts:
                verdicts[absolute] = self._grep_verdict(absolute, top, file_filter, guard)
            return verdicts[absolute]

        def consume(record: bytes) -> bool:
            nonlocal truncated, saw_summary
            try:
                message = json.loads(record)
            except ValueError:
                return True
            if not isinstance(message, dict):
                return True
            kind = message.get("type")
            if kind == "summary":
                saw_summary = True
                return True
            data = message.get("data")
            if kind != "match" or not isinstance(data, dict):
                return True
            if fixed is not None:
                shown: str | None = fixed
            else:
                absolute = json_text(data.get("path"), path=True)
                shown = reportable(absolute) if absolute is not None else None
            number = data.get("line_number")
            line = json_text(data.get("lines"))
            if shown is None or not isinstance(number, int) or line is None:
                return True
            if len(matches) >= limit:
                truncated = True
                return False
            matches.append(GrepMatch(path=shown, line_number=number, line=_clean_line(line)))
            return True

        outcome = await run_rg(
            self._rg,
            args,
            separator=b"\n",
            consume=consume,
            cwd=self._policy.project,
            stdin=stdin,
        )
        if not outcome.stopped and not saw_summary and outcome.returncode not in (0, 1):
            raise _grep_failure(pattern, outcome)
        return matches, truncated

    def _grep_verdict(
        self,
        absolute: str,
        top: str,
        file_filter: tuple[GlobMatcher, bool] | None,
        guard: _LinkGuard,
    ) -> str | None:
        rel = _below(absolute, top)
        if rel is None:
            return None
        if file_filter is not None:
            matcher, on_name = file_filter
            if not matcher.matches(rel.rsplit("/", 1)[-1] if on_name else rel):
                return None
        return self._reportable(absolute, guard)


class _LinkGuard:
    """Recognises hard links to sensitive files; the sensitive inodes are read at most once."""

    def __init__(self, policy: PathPolicy) -> None:
        self._policy = policy
        self._inodes: frozenset[tuple[int, int]] | None = None

    def is_sensitive_link(self, st: os.stat_result) -> bool:
        if not stat.S_ISREG(st.st_mode) or st.st_nlink <= 1:
            return False
        if self._inodes is None:
            self._inodes = self._policy.sensitive_inodes()
        return (st.st_dev, st.st_ino) in self._inodes


def _grep_failure(pattern: str, outcome: RgOutcome) -> Exception:
    said = "\n".join(
        line.removeprefix("rg: ") for line in outcome.stderr.splitlines() if line.strip()
    )
    if "regex" in said.lower():
        return ToolInputError(
            f"invalid regular expression {pattern!r}: {said}\n({REGEX_SYNTAX_NOTE})"
        )
    return RunError(
        f"grep for {pattern!r} failed: ripgrep exited with status {outcome.returncode}: "
        f"{said or 'no message'}"
    )
