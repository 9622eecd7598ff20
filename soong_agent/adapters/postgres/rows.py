"""The rows the PostgreSQL stores write and read: statement parameters made of port values, and
port values made of selected rows.

Messages and events are written as their pydantic serializer writes them (text holding lone
surrogates by the rule of `ports.text`, when the serializer refuses it). PostgreSQL text cannot
hold NUL: a header (title, reason, ...) holding one has it written as U+FFFD by `safe_params`
(JSON never holds one raw: it is escaped).
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from soong_agent.ports.events import RunEvent
from soong_agent.ports.messages import MESSAGE_LIST, Message
from soong_agent.ports.storage import RunInfo, SessionInfo
from soong_agent.ports.text import safe_text

if TYPE_CHECKING:
    from pydantic import TypeAdapter

_T = TypeVar("_T")
_CHUNK = 2000
"""Documents validated per pydantic call when loading."""


def session_params(session: SessionInfo, updated_at: float) -> tuple[Any, ...]:
    """Parameters of `UPSERT_SESSION`."""
    return (
        session.id,
        session.project_dir,
        session.title,
        session.agent,
        session.active_leaf_id,
        session.parent_session_id,
        session.created_at,
        updated_at,
    )


def run_params(run: RunInfo) -> tuple[Any, ...]:
    """Parameters of `UPSERT_RUN`."""
    return (
        run.id,
        run.session_id,
        run.status,
        run.model,
        run.reason,
        run.started_at,
        run.finished_at,
    )


def message_params(
    session_id: str, batch: Sequence[Message], at: float, *, safe: bool = False
) -> list[tuple[Any, ...]]:
    """Parameters of `INSERT_MESSAGE` (ids are set: the caller checked)."""
    to_json = safe_json if safe else Message.__pydantic_serializer__.to_json
    return [
        (
            m.id,
            session_id,
            m.parent_id,
            session_id,
            m.parent_id,
            m.role,
            m.kind,
            to_json(m).decode(),
            at,
        )
        for m in batch
    ]


def event_params(batch: Sequence[RunEvent], *, safe: bool = False) -> list[tuple[Any, ...]]:
    """Parameters of `INSERT_EVENT` (and the rows of `COPY_EVENTS`)."""
    rows = []
    for e in batch:
        payload = (safe_json(e) if safe else e.__pydantic_serializer__.to_json(e)).decode()
        rows.append((e.run_id, e.session_id, e.seq, e.type, payload, e.at))
    return rows


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


def safe_params(value: Any) -> Any:
    """`value` (parameters: tuples and lists of values) with each text storable: lone
    surrogates by the rule of `ports.text`, NUL as U+FFFD."""
    if isinstance(value, str):
        return safe_text(value).replace("\x00", "\ufffd")
    if isinstance(value, tuple):
        return tuple(safe_params(v) for v in value)
    if isinstance(value, list):
        return [safe_params(v) for v in value]
    return value


# --- rows read -----------------------------------------------------------------------------------


@cache
def _event_list() -> TypeAdapter[list[RunEvent]]:
    from pydantic import TypeAdapter

    return TypeAdapter(list[RunEvent])


def messages(docs: Sequence[str]) -> list[Message]:
    """Messages from their stored JSON."""
    return validate_json_rows(docs, MESSAGE_LIST.validate_json)


def events(docs: Sequence[str]) -> list[RunEvent]:
    """Events from their stored JSON."""
    return validate_json_rows(docs, _event_list().validate_json)


def validate_json_rows(docs: Sequence[str], validate: Callable[[str], list[_T]]) -> list[_T]:
    """Validate JSON documents joined into arrays of `_CHUNK` documents.

    A long session makes many long-lived objects at once: the cyclic GC is paused meanwhile
    (its young passes would walk them again and again), and what was made is then moved to the
    oldest generation (`gc.freeze()` + `gc.unfreeze()`), unless the application froze the GC.
    """
    out: list[_T] = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for start in range(0, len(docs), _CHUNK):
            out.extend(validate("[" + ",".join(docs[start : start + _CHUNK]) + "]"))
    finally:
        if len(docs) >= _CHUNK and gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()
    return out
