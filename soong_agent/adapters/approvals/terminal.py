"""Asks the user on the terminal (PERM-3): 1 allow once, 2 allow for session, 3 deny."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TextIO

from soong_agent.ports.approval import ApprovalRequest, Decision

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


def parse_answer(line: str) -> Decision | None:
    """The decision a typed or piped line stands for; None when it is not an answer."""
    return _ANSWERS.get(" ".join(line.strip().lower().split()))


class TerminalApprover:
    """Reads one line per question from `stdin`; a closed or exhausted stdin, or a line that is
    not an answer, means deny."""

    def __init__(self, *, stdin: TextIO | None, write: Callable[[str], None]) -> None:
        self._stdin = stdin
        self._write = write
        self._lock = asyncio.Lock()
        self._exhausted = False

    def _read_line(self) -> str | None:
        if self._stdin is None or self._stdin.closed:
            return None
        try:
            line = self._stdin.readline()
        except (OSError, ValueError):
            return None
        return line or None

    async def decide(self, request: ApprovalRequest) -> Decision:
        async with self._lock:  # one question at a time on one terminal
            for _ in range(3):  # let the event printer show the pending tool call line first
                await asyncio.sleep(0)
            self._write(
                f"\n? {request.tool} wants to {request.summary}\n"
                f"  1) allow once\n"
                f"  2) allow for session: {request.session_scope}\n"
                f"  3) deny\n"
                f"  answer [1/2/3]: "
            )
            line = None if self._exhausted else await asyncio.to_thread(self._read_line)
            if line is None:
                self._exhausted = True
                self._write("(no answer: stdin is closed) -> deny\n")
                return "deny"
            if self._stdin is not None and not self._stdin.isatty():
                self._write(f"{line.strip()}\n")
            decision = parse_answer(line)
            if decision is None:
                self._write(f"(answer {line.strip()!r} not understood) -> deny\n")
                return "deny"
            return decision
