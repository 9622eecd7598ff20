"""Property: the SQLite store commits any text a run can carry, and reads back what the rule of
`soong_agent.ports.text` makes of it; a batch it refuses writes nothing (issue 39 item 5).

Texts with lone surrogates, NUL and control characters, byte order marks, cut UTF-8
sequences and huge values go into every kind of text a turn writes: message blocks (text,
tool call name and arguments, tool result), event fields, the session title and the run's
reason."""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
from soong_agent.ports.events import ErrorEvent, TextDeltaEvent, ToolCallRequested, ToolResultEvent
from soong_agent.ports.messages import Message, TextBlock, ToolCallBlock, ToolResultBlock
from soong_agent.ports.storage import RunInfo, SessionInfo, TurnCommit
from soong_agent.ports.text import safe_text
from tests.property.bad_input import bad_text, huge_text

EXAMPLES = 200
HUGE_EXAMPLES = 12
_ids = itertools.count()


def _turn(session_id: str, texts: list[str]) -> tuple[TurnCommit, list[Message]]:
    a, b, c, d, e, f = texts
    run_id = f"run_{session_id}"
    session = SessionInfo(
        id=session_id,
        project_dir="/p",
        created_at=1.0,
        updated_at=1.0,
        title=e,
        active_leaf_id="m3",
    )
    run = RunInfo(id=run_id, session_id=session_id, started_at=1.0, model="m", reason=f)
    user = Message(id="m1", role="user", content=[TextBlock(text=a)])
    assistant = Message(
        id="m2",
        parent_id="m1",
        role="assistant",
        content=[TextBlock(text=b), ToolCallBlock(id="c1", name=c, arguments=d)],
    )
    tool = Message(
        id="m3",
        parent_id="m2",
        role="tool",
        content=[ToolResultBlock(call_id="c1", name=c, content=a + b, is_error=True)],
    )
    common = {"run_id": run_id, "session_id": session_id, "at": 1.0}
    events = [
        TextDeltaEvent(seq=1, text=b, **common),
        ToolCallRequested(seq=2, call_id="c1", name=c, arguments=d, **common),
        ToolResultEvent(seq=3, call_id="c1", name=c, content=a + b, is_error=True, **common),
        ErrorEvent(seq=4, kind="internal", message=f, fatal=True, **common),
    ]
    messages = [user, assistant, tool]
    return TurnCommit(session=session, run=run, messages=messages, events=events, at=2.0), messages


async def _commit_and_read(db: Path, texts: list[str]) -> None:
    session_id = f"ses_{next(_ids)}"
    batch, messages = _turn(session_id, texts)
    store = SqliteSessionStore(db)
    try:
        await store.commit(batch)
        stored = await store.active_path(session_id)
        events = await store.run_events(batch.run.id)
        [run] = await store.list_runs(session_id)
        session = await store.get_session(session_id)
    finally:
        await store.close()
    # what was stored is what the rule makes of it: nothing lost, nothing refused
    assert [m.id for m in stored] == ["m1", "m2", "m3"]
    for kept, given_message in zip(stored, messages, strict=True):
        assert kept.model_dump() == _safe(given_message.model_dump())
    assert [e.model_dump() for e in events] == [_safe(e.model_dump()) for e in batch.events]
    assert run.reason == safe_text(texts[5]) and run.status == "running"
    assert session is not None and session.title == safe_text(texts[4])


def _safe(value: object) -> object:
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, list):
        return [_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _safe(v) for k, v in value.items()}
    return value


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(values=st.lists(bad_text, min_size=6, max_size=6))
def test_any_text_a_turn_carries_is_committed_and_read_back_safe(values: list[str]) -> None:
    asyncio.run(_commit_and_read(_database(), values))


@settings(
    max_examples=HUGE_EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(huge=huge_text, values=st.lists(bad_text, min_size=5, max_size=5), at=st.integers(0, 5))
def test_a_huge_text_in_any_field_is_committed_and_read_back(
    huge: str, values: list[str], at: int
) -> None:
    values.insert(at, huge)
    asyncio.run(_commit_and_read(_database(), values))


_FOLDER: list[tempfile.TemporaryDirectory[str]] = []


def _database() -> Path:
    """One database file for every example (each writes a session of its own): creating a
    database per example would cost far more than the commit tested."""
    if not _FOLDER:
        _FOLDER.append(tempfile.TemporaryDirectory())
    return Path(_FOLDER[0].name) / "sessions.sqlite"


def teardown_module() -> None:
    for folder in _FOLDER:
        folder.cleanup()
