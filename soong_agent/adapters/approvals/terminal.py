"""Asks the user on the terminal (PERM-3): 1 allow once, 2 allow for session, 3 deny.

Below the question comes the request's `detail` (a file change as a unified diff, a command
line's parts, a URL's host): a long one is cut with a count of the hidden lines, and the answer
``d`` then shows the whole of it and asks again. A diff is coloured (removed lines red, added
ones green) only on a terminal without ``NO_COLOR``, and only after the text was scrubbed of
secrets by `clean`: colour codes inside a multi-line secret would hide it from the scrubber.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TextIO

from soong_agent.ports.approval import ApprovalRequest, Decision, PlanReview, printable

_ANSWERS: dict[str, Decision] = {
    "1": "allow_once",
    "allow once": "allow_once",
    "allow_once": "allow_once",
    "2": "allow_for_session",
    "allow for session": "allow_for_session",
    "allow_for_session": "allow_for_session",
    "3": "deny",
    "deny": "deny",
}
_SHOW_ALL = "d"
"""The answer that shows the whole detail and asks again (offered when the detail was cut)."""

SHOWN_LINES = 40
"""How many lines of a detail the question shows before cutting it."""
SHOWN_LINE_CHARS = 240
"""How many characters of one detail line the question shows before cutting it."""

_RED, _GREEN, _CYAN, _BOLD, _DIM, _RESET = (
    "\x1b[31m",
    "\x1b[32m",
    "\x1b[36m",
    "\x1b[1m",
    "\x1b[2m",
    "\x1b[0m",
)
_INDENT = "    "


def parse_answer(line: str) -> Decision | None:
    """The decision a typed or piped line stands for; None when it is not an answer."""
    return _ANSWERS.get(" ".join(line.strip().lower().split()))


def color_wanted(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Whether `stream` should get colours: it is a terminal, ``NO_COLOR`` is unset (or empty,
    as no-color.org says) and ``TERM`` is not ``dumb``."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (OSError, ValueError):  # a closed or detached stream is no terminal
        return False


def _is_diff(detail: str) -> bool:
    return detail.startswith("--- ")


def _paint(line: str) -> str:
    """A unified diff line in its colour, chosen by its first character."""
    if line.startswith(("--- ", "+++ ")):
        return f"{_BOLD}{line}{_RESET}"
    if line.startswith("@@"):
        return f"{_CYAN}{line}{_RESET}"
    if line.startswith("-"):
        return f"{_RED}{line}{_RESET}"
    if line.startswith("+"):
        return f"{_GREEN}{line}{_RESET}"
    return line


_ALLOW = ("allow_once", "allow_for_session")


class TerminalApprover:
    """Reads one line per question from `stdin`; a closed or exhausted stdin, or a line that is
    not an answer, means deny.

    `write` shows the question (the CLI's renderer, which scrubs secrets from what it writes).
    `clean` scrubs a detail before it is coloured; `color` None decides by `color_wanted` on
    stderr (where the CLI asks), and never colours without `clean`.
    """

    def __init__(
        self,
        *,
        stdin: TextIO | None,
        write: Callable[[str], None],
        clean: Callable[[str], str] | None = None,
        color: bool | None = None,
        shown_lines: int = SHOWN_LINES,
    ) -> None:
        self._stdin = stdin
        self._write = write
        self._clean = clean
        self._color = color if color is not None else clean is not None and color_wanted(sys.stderr)
        self._shown_lines = shown_lines
        self._lock = asyncio.Lock()
        self._exhausted = False
        self._pending: asyncio.Future[str | None] | None = None  # a read under way

    async def _next_line(self) -> str | None:
        """The next line of stdin (None at its end), read on a daemon thread of its own: a
        run cancelled while the question waits (Ctrl-C) does not keep the process alive until
        a line comes, as a thread of the loop's executor would at its shutdown. A read that
        was abandoned that way answers the next question."""
        pending = self._pending
        if pending is None:  # (awaited shielded only: never cancelled)
            loop = asyncio.get_running_loop()
            pending = self._pending = loop.create_future()

            def read(done: asyncio.Future[str | None] = pending) -> None:
                line = self._read_line()
                with contextlib.suppress(RuntimeError):  # the loop has closed: nobody asks
                    loop.call_soon_threadsafe(_hand_over, done, line)

            threading.Thread(target=read, name="soong-approval-input", daemon=True).start()
        line = await asyncio.shield(pending)
        self._pending = None
        return line

    def _read_line(self) -> str | None:
        if self._stdin is None or self._stdin.closed:
            return None
        try:
            line = self._stdin.readline()
        except (OSError, ValueError):
            return None
        return line or None

    def _detail(self, detail: str, *, whole: bool) -> tuple[str, bool]:
        """The detail as shown under the question (indented, cut unless `whole`, coloured
        when wanted), and whether something was left out."""
        if not detail.strip():
            return "", False
        text = detail.rstrip("\n")
        text = printable(self._clean(text) if self._clean is not None else text)
        lines = text.split("\n")
        hidden = 0 if whole else max(0, len(lines) - self._shown_lines)
        if hidden:
            lines = lines[: self._shown_lines]
        cut = hidden > 0
        if not whole:
            for i, line in enumerate(lines):
                if len(line) > SHOWN_LINE_CHARS:
                    lines[i] = line[: SHOWN_LINE_CHARS - 1] + "…"
                    cut = True
        diff = _is_diff(text)
        if self._color and diff:
            lines = [_paint(line) for line in lines]
        shown = "".join(f"{_INDENT}{line}\n" for line in lines)
        if cut:
            what = "diff" if diff else "detail"
            more = f"{hidden} more line{'s' if hidden != 1 else ''}; " if hidden else ""
            note = f"… {more}answer {_SHOW_ALL} to see the whole {what}"
            shown += f"{_INDENT}{_DIM}{note}{_RESET}\n" if self._color else f"{_INDENT}{note}\n"
        return shown, cut

    def _question(self, request: ApprovalRequest, detail: str, offer_all: bool) -> str:
        keys = f"1/2/3/{_SHOW_ALL}" if offer_all else "1/2/3"
        return (
            f"\n? {_asker(request)}{request.tool} wants to {request.summary}\n"
            f"{detail}"
            f"  1) allow once\n"
            f"  2) allow for session: {request.session_scope}\n"
            f"  3) deny\n"
            f"  answer [{keys}]: "
        )

    async def review_plan(self, request: ApprovalRequest) -> PlanReview:
        """`1` (or an allow answer) approves the plan; `2` (or anything else) keeps planning
        and reads one more line, the note for the model; a closed stdin keeps planning."""
        async with self._lock:
            shown, _ = self._detail(request.detail, whole=True)
            self._write(
                f"\n? {_asker(request)}{request.tool}: {request.summary}\n{shown}"
                "  1) approve the plan\n"
                "  2) keep planning (you can add a note for the agent)\n"
                "  answer [1/2]: "
            )
            line = None if self._exhausted else await self._next_line()
            if line is None:
                self._exhausted = True
                self._write("(no answer: stdin is closed) -> keep planning\n")
                return PlanReview(approved=False)
            answer = line.strip().lower()
            if self._stdin is not None and not self._stdin.isatty():
                self._write(f"{line.strip()}\n")
            keep = answer in ("2", "keep", "keep planning", "n", "no")
            if not keep and (answer in ("approve", "y", "yes") or parse_answer(line) in _ALLOW):
                return PlanReview(approved=True)
            self._write("  note for the agent (Enter for none): ")
            note = None if self._exhausted else await self._next_line()
            if note is None:
                self._exhausted = True
                return PlanReview(approved=False)
            return PlanReview(approved=False, note=note.strip())

    @contextlib.asynccontextmanager
    async def holding(self) -> AsyncIterator[Callable[[str], Awaitable[str | None]]]:
        """The terminal for several questions in a row (an MCP server's form, MCP-4): yields
        `ask(text)`, which shows `text` and returns the next line typed, without its line end
        (None once stdin is closed). No other question is put meanwhile."""
        async with self._lock:

            async def ask(text: str) -> str | None:
                self._write(text)
                line = None if self._exhausted else await self._next_line()
                if line is None:
                    self._exhausted = True
                    self._write("(no answer: stdin is closed)\n")
                    return None
                if self._stdin is not None and not self._stdin.isatty():
                    self._write(f"{line.strip()}\n")
                return line.rstrip("\r\n")

            yield ask

    async def decide(self, request: ApprovalRequest) -> Decision:
        async with self._lock:  # one question at a time on one terminal
            for _ in range(3):  # let the event printer show the pending tool call line first
                await asyncio.sleep(0)
            shown, offer_all = self._detail(request.detail, whole=False)
            self._write(self._question(request, shown, offer_all))
            while True:
                line = None if self._exhausted else await self._next_line()
                if line is None:
                    self._exhausted = True
                    self._write("(no answer: stdin is closed) -> deny\n")
                    return "deny"
                if self._stdin is not None and not self._stdin.isatty():
                    self._write(f"{line.strip()}\n")
                if offer_all and line.strip().lower() == _SHOW_ALL:
                    whole, _ = self._detail(request.detail, whole=True)
                    self._write(self._question(request, whole, offer_all))
                    continue
                decision = parse_answer(line)
                if decision is None:
                    self._write(f"(answer {line.strip()!r} not understood) -> deny\n")
                    return "deny"
                return decision


def _asker(request: ApprovalRequest) -> str:
    """`[sub-agent reviewer] ` when a child agent asks (AGT-2); empty for the session's own."""
    return f"[{printable(request.agent)}] " if request.agent else ""


def _hand_over(done: asyncio.Future[str | None], line: str | None) -> None:
    if not done.done():
        done.set_result(line)
