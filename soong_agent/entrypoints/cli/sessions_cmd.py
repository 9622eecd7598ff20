"""`soong-agent sessions list|show`: read sessions back from SQLite."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import sys
from collections.abc import Sequence

from soong_agent.entrypoints.cli.common import EXIT_OK, guarded, tolerant_streams
from soong_agent.entrypoints.cli.json_output import SCHEMA_VERSION
from soong_agent.entrypoints.cli.render import call_preview
from soong_agent.entrypoints.cli.session_tree import (
    ancestry,
    load_tree,
    origin_lines,
    tree_json,
    tree_lines,
    worker_lines,
    worker_use,
)
from soong_agent.ports.errors import SessionNotFound
from soong_agent.ports.events import RunEvent, UsageEvent
from soong_agent.ports.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.storage import SessionInfo, SessionStore
from soong_agent.ports.streaming import Usage


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _store(path: str | None) -> tuple[SessionStore, SecretRedactor]:
    """The session store, and the redactor everything shown goes through: rows written before
    secrets were scrubbed at the recorder may still hold one (CFG-6)."""
    from soong_agent.entrypoints.containers import CliContainer
    from soong_agent.entrypoints.sdk import load

    adapters = CliContainer(loaded=load(path, None)).adapters
    store: SessionStore = adapters.session_store()
    redactor: SecretRedactor = adapters.redactor()
    return store, redactor


def _json(obj: object, redactor: SecretRedactor) -> str:
    """One JSON line, scrubbed (rows written before scrubbing existed may hold a secret)."""
    import json

    return redactor.redact(json.dumps(obj, ensure_ascii=False, separators=(",", ":"))) + "\n"


def _session_obj(session: SessionInfo) -> dict[str, object]:
    return {"schema_version": SCHEMA_VERSION, "type": "session", **dataclasses.asdict(session)}


def list_sessions(*, path: str | None, limit: int, output: str = "text") -> int:
    async def go() -> int:
        store, redactor = _store(path)
        try:
            sessions = await store.list_sessions(limit=limit)
        finally:
            await store.close()
        if output == "json":  # one object per line, most recently used first
            sys.stdout.write("".join(_json(_session_obj(s), redactor) for s in sessions))
            return EXIT_OK
        if not sessions:
            sys.stdout.write("no sessions yet\n")
            return EXIT_OK
        width = max(len(s.id) for s in sessions)
        lines = [f"{'session':<{width}}  {'updated':<19}  title  (project)\n"]
        for s in sessions:
            title = redactor.redact(s.title)
            title = title if len(title) <= 60 else title[:59] + "…"
            lines.append(f"{s.id:<{width}}  {_when(s.updated_at)}  {title}  ({s.project_dir})\n")
        sys.stdout.write("".join(lines))
        return EXIT_OK

    tolerant_streams()
    return guarded(lambda: asyncio.run(go()))


def _run_totals(events: Sequence[RunEvent]) -> str:
    """``, 1200 in / 80 out tokens, $0.0031`` from a run's usage events."""
    usage = Usage()
    cost: float | None = None
    for event in events:
        if isinstance(event, UsageEvent):
            usage = usage + event.usage
            if event.cost_usd is not None:
                cost = (cost or 0.0) + event.cost_usd
    if not (usage.input_tokens or usage.output_tokens):
        return ""
    prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    text = f", {prompt} in / {usage.output_tokens} out tokens"
    return text + (f", ${cost:.4f}" if cost is not None else "")


def branches_of(messages: Sequence[Message]) -> dict[str | None, list[Message]]:
    """Children of each message id (None: the roots), in write order."""
    children: dict[str | None, list[Message]] = {}
    for message in messages:
        children.setdefault(message.parent_id, []).append(message)
    return children


def _preview(message: Message) -> str:
    text = " ".join(message.text.split())
    return text if len(text) <= 50 else text[:49] + "…"


def transcript_lines(
    messages: list[Message], children: dict[str | None, list[Message]] | None = None
) -> list[str]:
    """A readable transcript of messages; `children` marks where other branches start."""
    lines: list[str] = []
    for m in messages:
        siblings = [s for s in (children or {}).get(m.parent_id, []) if s.id != m.id]
        for other in siblings if m.role == "user" else []:
            lines.append(f"⑂ another branch starts here: {other.id} {_preview(other)!r}")
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


def show_session(session_id: str, *, path: str | None, output: str = "text") -> int:
    async def go() -> int:
        store, redactor = _store(path)
        try:
            session = await store.get_session(session_id)
            if session is None:
                raise SessionNotFound(session_id)
            path_messages = await store.active_path(session_id)
            everything = await store.all_messages(session_id)
            runs = await store.list_runs(session_id)
            events_of = {r.id: await store.run_events(r.id) for r in runs}
            totals = {r.id: _run_totals(events_of[r.id]) for r in runs}
            tree = await load_tree(store, session, runs, events_of)
            parents = await ancestry(store, session)
        finally:
            await store.close()
        workers = worker_use(events_of)
        if output == "json":
            shown = {
                **_session_obj(session),
                "runs": [{**dataclasses.asdict(r), "events": len(events_of[r.id])} for r in runs],
                **tree_json(tree, workers),
                "messages": [m.model_dump(mode="json") for m in path_messages],
                "other_messages": len(everything) - len(path_messages),
            }
            sys.stdout.write(_json(shown, redactor))
            return EXIT_OK
        lines = [
            f"session {session.id}\n",
            *origin_lines(session, tree.link, parents),
            f"project {session.project_dir}\n",
            f"created {_when(session.created_at)}, updated {_when(session.updated_at)}\n",
        ]
        for r in runs:
            reason = f" ({r.reason})" if r.reason else ""
            lines.append(
                f"run {r.id}: {r.status}{reason}, {_when(r.started_at)}, {r.model}{totals[r.id]}\n"
            )
        lines += tree_lines(tree)
        lines += worker_lines(workers)
        off_path = len(everything) - len(path_messages)
        if off_path:
            lines.append(
                f"{off_path} message(s) on other branches (or compacted away) are not shown; "
                "the active branch is below\n"
            )
        lines.append("\n" + "\n".join(transcript_lines(path_messages, branches_of(everything))))
        sys.stdout.write(redactor.redact("".join(lines)))
        sys.stdout.flush()
        return EXIT_OK

    tolerant_streams()
    return guarded(lambda: asyncio.run(go()))
