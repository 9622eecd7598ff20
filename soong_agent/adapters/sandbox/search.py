"""`glob` and `grep` of `LocalFileSystem`: ripgrep lists and searches, the policy re-checks.

ripgrep (`rg`, from the ``ripgrep`` wheel) runs as an asyncio subprocess: it honours
``.gitignore``/``.ignore`` (also outside git repositories), never follows symlinks, skips binary
and over-2-MiB files, and is killed as soon as the result cap is reached. Every path it reports
goes through the same policy again before it is returned, so ripgrep can never list or show
what a read would refuse.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable, Sequence
from typing import Protocol

from soong_agent.adapters.sandbox import safe_io
from soong_agent.adapters.sandbox.checked_io import (
    LinkGuard,
    open_in_project,
    os_error,
    sensitive_link_violation,
    with_display,
)
from soong_agent.adapters.sandbox.globbing import (
    GlobMatcher,
    compile_filter,
    compile_glob,
    last_segments,
)
from soong_agent.adapters.sandbox.paths import PathPolicy
from soong_agent.adapters.sandbox.ripgrep import (
    COMMON_FLAGS,
    GREP_MAX_FILESIZE,
    RgOutcome,
    json_text,
    name_filter,
)
from soong_agent.ports.errors import RunError, SandboxViolation, ToolInputError
from soong_agent.ports.filesystem import GrepMatch, Listing

GREP_MAX_FILE_BYTES = 2 * 1024 * 1024  # the same as GREP_MAX_FILESIZE ("2M") for ripgrep
GREP_BINARY_SNIFF_BYTES = 64 * 1024
GREP_MAX_LINE_CHARS = 2000
REGEX_SYNTAX_NOTE = (
    "grep runs ripgrep, whose patterns use Rust regex syntax: close to Python's, but without "
    "look-around ((?=…), (?<=…)) or backreferences (\\1)"
)


class RunRg(Protocol):
    """Runs ripgrep with `args`, handing each record to `consume` (see `ripgrep.run_rg`)."""

    async def __call__(
        self,
        args: Sequence[str],
        *,
        separator: bytes,
        consume: Callable[[bytes], bool],
        stdin: int | None = None,
    ) -> RgOutcome: ...


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


class RipgrepSearch:
    """Finds files and lines under the project with ripgrep, behind `policy`."""

    def __init__(self, policy: PathPolicy, *, excludes: Sequence[str], run: RunRg) -> None:
        self._policy = policy
        self._excludes = list(excludes)
        self._run = run

    def _walk_top(self, base: str, display: str) -> str:
        """The resolved folder `base`, checked for reading."""
        resolved = self._policy.check_read(base, action="search of")
        try:
            st = os.stat(resolved)
        except OSError as exc:
            raise with_display(exc, display) from None
        if not stat.S_ISDIR(st.st_mode):
            raise os_error(NotADirectoryError, errno.ENOTDIR, display)
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
            f"{self._policy.display(base)!r}; give it relative to the base"
        )

    def _reportable(self, absolute: str, guard: LinkGuard) -> str | None:
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

    async def glob(self, pattern: str, base: str, limit: int) -> Listing:
        """Project-relative paths of the files under `base` matching `pattern`."""
        base_display = self._policy.display(base)
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
        args += name_filter(last_segments(relative_pattern))
        args += [*self._excludes, "--", top]

        items: list[str] = []
        truncated = False
        guard = LinkGuard(self._policy)

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

        outcome = await self._run(args, separator=b"\0", consume=consume)
        if outcome.returncode not in (0, 1, None) and outcome.records == 0 and outcome.stderr:
            raise RunError(f"glob {pattern!r} failed: ripgrep said: {outcome.stderr}")
        return Listing(items=items, truncated=truncated)

    async def grep(
        self, pattern: str, base: str, glob: str | None, limit: int, ignore_case: bool
    ) -> tuple[list[GrepMatch], bool]:
        """Lines matching `pattern` under the folder (or in the file) `base`, and whether cut."""
        if "\x00" in pattern:
            raise ToolInputError("the grep pattern contains a NUL character")
        file_filter = compile_filter(glob) if glob else None
        display = self._policy.display(base)
        resolved = self._policy.check_read(base, action="search of")
        try:
            st = os.stat(resolved)
        except OSError as exc:
            raise with_display(exc, display) from None
        args = ["--json", *COMMON_FLAGS, f"--max-filesize={GREP_MAX_FILESIZE}", "--crlf"]
        if ignore_case:
            args.append("--ignore-case")
        if stat.S_ISDIR(st.st_mode):
            if glob:
                args += name_filter(last_segments(glob))
            args += [*self._excludes, f"--regexp={pattern}", "--", resolved]
            return await self._run_grep(
                pattern, args, limit, stdin=None, top=resolved, file_filter=file_filter
            )
        # One file, searched whatever the glob says. It is opened here (no symlink followed)
        # and handed to ripgrep as stdin, so what is searched is exactly what was checked.
        fd = open_in_project(self._policy, resolved, safe_io.READ_FLAGS, display)
        try:
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode):
                raise ToolInputError(f"{display!r} is not a regular file")
            if LinkGuard(self._policy).is_sensitive_link(opened):
                raise sensitive_link_violation(display, "search of")
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
        guard = LinkGuard(self._policy)
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

        outcome = await self._run(args, separator=b"\n", consume=consume, stdin=stdin)
        if not outcome.stopped and not saw_summary and outcome.returncode not in (0, 1):
            raise _grep_failure(pattern, outcome)
        return matches, truncated

    def _grep_verdict(
        self,
        absolute: str,
        top: str,
        file_filter: tuple[GlobMatcher, bool] | None,
        guard: LinkGuard,
    ) -> str | None:
        rel = _below(absolute, top)
        if rel is None:
            return None
        if file_filter is not None:
            matcher, on_name = file_filter
            if not matcher.matches(rel.rsplit("/", 1)[-1] if on_name else rel):
                return None
        return self._reportable(absolute, guard)


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
