"""`soong-agent sessions rewind SESSION_ID --to MESSAGE_ID` (RWD-1), and the lines that say what
a rewind did, which chat's `/undo` and `/rewind` print too."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

from soong_agent.entrypoints.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    fail,
    guarded,
    tolerant_streams,
)
from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:
    from soong_agent.application.checkpoints.rewind import RewindReport


def _first_line(text: str, most: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= most else line[: most - 1] + "…"


def report_lines(report: RewindReport) -> list[str]:
    """What a rewind did (or would have done), one line each, for people."""
    if report.refused:
        return [
            "rewind refused: changed outside the agent since it last left them: "
            + ", ".join(report.changed_outside)
            + " (--force overwrites them); nothing was changed"
        ]
    lines = [f"rewound session {report.session_id} to before {report.to_message_id}"]
    if report.files:
        lines += [f"  restored      {path}" for path in report.restored]
        lines += [f"  removed       {path}" for path in report.removed]
        lines += [
            f"  overwritten   {path} (changed outside the agent)" for path in report.changed_outside
        ]
        if not (report.restored or report.removed):
            lines.append("  no file to put back: each is as it was then")
    for what, why in report.not_restored:
        lines.append(f"  not restored  {what}: {why}")
    if report.conversation:
        where = (
            f"after {report.continues_after}"
            if report.continues_after is not None
            else "from the start"
        )
        lines.append(
            f"  the conversation continues {where}; the rewound message was: "
            f"{_first_line(report.message)!r}"
        )
    return lines


def rewind_command(
    session_id: str,
    *,
    to: str,
    path: str | None,
    files_only: bool,
    conversation_only: bool,
    force: bool,
) -> int:
    """`sessions rewind`: exit 0 when done, 1 when refused, 2 for a mistake."""

    async def go() -> int:
        from soong_agent.entrypoints.containers import CliContainer
        from soong_agent.entrypoints.rewinding import rewind_service
        from soong_agent.entrypoints.sdk import load

        if files_only and conversation_only:
            raise UsageError("--files-only and --conversation-only: give at most one")
        adapters = CliContainer(loaded=load(path, None)).adapters
        try:
            report = await rewind_service(adapters).rewind(
                session_id,
                to=to,
                files=not conversation_only,
                conversation=not files_only,
                force=force,
            )
        finally:
            from soong_agent.entrypoints.closing import close_all

            await close_all(adapters.closables())
        redactor = adapters.redactor()
        if report.refused:
            return fail(redactor.redact(report_lines(report)[0]), EXIT_FAILED)
        sys.stdout.write(redactor.redact("".join(line + "\n" for line in report_lines(report))))
        return EXIT_OK

    tolerant_streams()
    return guarded(lambda: asyncio.run(go()))
