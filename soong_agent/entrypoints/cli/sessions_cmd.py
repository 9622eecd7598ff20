"""`soong-agent sessions list|show`: read sessions back from SQLite."""

from __future__ import annotations

import asyncio
import datetime as dt
import sys

from soong_agent.entrypoints.cli.common import EXIT_OK, guarded
from soong_agent.entrypoints.cli.render import call_preview
from soong_agent.ports.errors import SessionNotFound
from soong_agent.ports.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from soong_agent.ports.storage import SessionStore


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _store(path: str | None) -> SessionStore:
    from soong_agent.entrypoints.factories import session_store
    from soong_agent.entrypoints.sdk import load

    return session_store(load(path, None), [])


def list_sessions(*, path: str | None, limit: int) -> int:
    async def go() -> int:
        store = _store(path)
        try:
            sessions = await store.list_sessions(limit=limit)
        finally:
            await store.close()
        if not sessions:
            sys.stdout.write("no sessions yet\n")
            return EXIT_OK
        width = max(len(s.id) for s in sessions)
        sys.stdout.write(f"{'session':<{width}}  {'updated':<19}  title  (project)\n")
        for s in sessions:
            title = s.title if len(s.title) <= 60 else s.title[:59] + "…"
            sys.stdout.write(
                f"{s.id:<{width}}  {_when(s.updated_at)}  {title}  ({s.project_dir})\n"
            )
        return EXIT_OK

    return guarded(lambda: asyncio.run(go()))


def transcript_lines(messages: list[Message]) -> list[str]:
    """A readable transcript of messages."""
    lines: list[str] = []
    for m in messages:
        label = {"user": "user", "assistant": "assistant", "tool": "tool results"}[m.role]
        if m.kind != "normal":
            label += f" ({m.kind})"
        lines.append(f"── {label} ── {m.id}")
        for block in m.content:
            if isinstance(block, TextBlock):
                if block.text:
                    lines.append(block.text)
            elif isinstance(block, ThinkingBlock):
                lines.append(f"[thinking] {block.text}")
            elif isinstance(block, ToolCallBlock):
                lines.append(f"→ {call_preview(block.name, block.arguments)}  [{block.id}]")
            elif isinstance(block, ToolResultBlock):
                mark = "✗" if block.is_error else "←"
                lines.append(f"{mark} {block.name}: {block.content}")
        lines.append("")
    return lines


def show_session(session_id: str, *, path: str | None) -> int:
    async def go() -> int:
        store = _store(path)
        try:
            session = await store.get_session(session_id)
            if session is None:
                raise SessionNotFound(session_id)
            path_messages = await store.active_path(session_id)
            everything = await store.all_messages(session_id)
            runs = await store.list_runs(session_id)
        finally:
            await store.close()
        out = sys.stdout
        out.write(f"session {session.id}\n")
        out.write(f"project {session.project_dir}\n")
        out.write(f"created {_when(session.created_at)}, updated {_when(session.updated_at)}\n")
        for r in runs:
            reason = f" ({r.reason})" if r.reason else ""
            out.write(f"run {r.id}: {r.status}{reason}, {_when(r.started_at)}, {r.model}\n")
        off_path = len(everything) - len(path_messages)
        if off_path:
            out.write(f"{off_path} message(s) on other branches are not shown\n")
        out.write("\n" + "\n".join(transcript_lines(path_messages)))
        out.flush()
        return EXIT_OK

    return guarded(lambda: asyncio.run(go()))
