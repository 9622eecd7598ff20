"""The rows the SQLite stores write and read (the parameters of `sql`'s statements, and the
port values made of what they select).

Inserts take every column, so each parameter row carries every column. Messages and events are
written as `model_dump_json()` would write them, by their serializer directly (half the cost for
a small event).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from soong_agent.adapters.storage.sql import EVENT_PARAMS, MESSAGE_PARAMS
from soong_agent.ports.artifacts import ArtifactInfo
from soong_agent.ports.events import RunEvent
from soong_agent.ports.messages import Message
from soong_agent.ports.storage import RunInfo, SessionInfo
from soong_agent.ports.text import safe_text


def session_row(session: SessionInfo, updated_at: float) -> dict[str, Any]:
    """Parameters of `UPSERT_SESSION`."""
    return {
        "id": session.id,
        "project_dir": session.project_dir,
        "title": session.title,
        "agent": session.agent,
        "active_leaf_id": session.active_leaf_id,
        "parent_session_id": session.parent_session_id,
        "created_at": session.created_at,
        "updated_at": updated_at,
    }


def run_row(run: RunInfo) -> dict[str, Any]:
    """Parameters of `UPSERT_RUN`."""
    return {
        "id": run.id,
        "session_id": run.session_id,
        "status": run.status,
        "model": run.model,
        "reason": run.reason,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
    }


def message_params(
    session_id: str, batch: list[Message], at: float, *, safe: bool = False
) -> list[tuple[Any, ...]]:
    """Parameters of `INSERT_MESSAGE_BY_POSITION`; the caller has checked that ids are set.
    `safe`: texts holding lone surrogates are written by the rule of `ports.text` (slower)."""
    to_json = safe_json if safe else Message.__pydantic_serializer__.to_json
    return [(m.id, session_id, m.parent_id, m.role, m.kind, to_json(m).decode(), at) for m in batch]


def safe_json(model: BaseModel) -> bytes:
    """`model` as its serializer writes it, each text with a lone surrogate written out by the
    rule of `ports.text` (the serializer refuses such text)."""
    try:
        return model.__pydantic_serializer__.to_json(model)
    except PydanticSerializationError:
        dumped = _safe_value(model.model_dump(mode="json"))
        return json.dumps(dumped, ensure_ascii=False, separators=(",", ":")).encode()


def _safe_value(value: Any) -> Any:
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, list):
        return [_safe_value(v) for v in value]
    if isinstance(value, dict):
        return {safe_text(k): _safe_value(v) for k, v in value.items()}
    return value


def safe_params(rows: Any) -> Any:
    """`rows` (parameters: tuples, lists and dicts of values) with each text made safe by the
    rule of `ports.text`."""
    if isinstance(rows, str):
        return safe_text(rows)
    if isinstance(rows, tuple):
        return tuple(safe_params(v) for v in rows)
    if isinstance(rows, list):
        return [safe_params(v) for v in rows]
    if isinstance(rows, dict):
        return {k: safe_params(v) for k, v in rows.items()}
    return rows


def event_values(batch: Sequence[RunEvent], *, safe: bool = False) -> list[Any]:
    """The parameters of `insert_events(len(batch))`: each event's `EVENT_PARAMS` in turn
    (`PydanticSerializationError` for an event holding a value JSON cannot take; with `safe`,
    texts holding lone surrogates are written by the rule of `ports.text`)."""
    values: list[Any] = []
    for e in batch:
        payload = (safe_json(e) if safe else e.__pydantic_serializer__.to_json(e)).decode()
        values += (e.run_id, e.session_id, e.seq, e.type, payload, e.at)
    return values


def event_params(batch: list[RunEvent]) -> list[tuple[Any, ...]]:
    """The parameters of `INSERT_EVENT`, a tuple per event (see `event_values`)."""
    return [
        (
            e.run_id,
            e.session_id,
            e.seq,
            e.type,
            e.__pydantic_serializer__.to_json(e).decode(),
            e.at,
        )
        for e in batch
    ]


def message_rows(session_id: str, batch: list[Message], at: float) -> list[dict[str, Any]]:
    """Parameters of `INSERT_MESSAGE` (by name)."""
    return [
        dict(zip(MESSAGE_PARAMS, p, strict=True)) for p in message_params(session_id, batch, at)
    ]


def event_rows(batch: list[RunEvent]) -> list[dict[str, Any]]:
    """Parameters of `INSERT_EVENT` (by name)."""
    return [dict(zip(EVENT_PARAMS, p, strict=True)) for p in event_params(batch)]


def artifact_row(info: ArtifactInfo, run_id: str | None, created_at: float) -> dict[str, Any]:
    """Parameters of `INSERT_ARTIFACT`."""
    return {
        "id": info.id,
        "session_id": info.session_id,
        "run_id": run_id,
        "filename": info.filename,
        "size": info.size,
        "sha256": info.sha256,
        "preview": info.preview,
        "created_at": created_at,
    }


def mark_row(session_id: str, key: str, value: str, at: float) -> dict[str, Any]:
    """Parameters of `UPSERT_MARK`."""
    return {"session_id": session_id, "key": key, "value": value, "updated_at": at}


# --- rows read -----------------------------------------------------------------------------------
