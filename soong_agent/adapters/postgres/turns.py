"""One turn written to PostgreSQL in one transaction: the session and run rows (upserted), the
new messages and events. A turn fenced with a queued run's lease first checks, in the same
transaction, that the run queue's row still holds the fence (else `LeaseLost`, nothing written).

The statements of a turn go to the server in one pipeline (no round trip per statement); a
turn with many events (text deltas) sends them with `COPY`, the cheapest way in. Each message's
parent is looked up as it is inserted, so a parent earlier in the same batch counts.

A turn written again after a lost connection (`retrying`) is first looked for: the connection
may have been lost after the server committed it, and a turn is all or nothing, so finding its
first message (or event) as written means it is there, and it is not written twice.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pydantic_core import PydanticSerializationError

from soong_agent.adapters.postgres import rows as dbrows
from soong_agent.adapters.postgres import session_sql as sql
from soong_agent.adapters.postgres.queue_sql import FENCE_HELD
from soong_agent.ports.errors import UsageError
from soong_agent.ports.events import RunEvent
from soong_agent.ports.messages import Message
from soong_agent.ports.run_queue import LeaseLost
from soong_agent.ports.storage import RunFence, RunInfo, SessionInfo

if TYPE_CHECKING:
    from psycopg import AsyncConnection

PIPELINED_EVENTS = 16
"""Up to this many events go as inserts in the turn's pipeline; more go by `COPY`."""


@dataclass(frozen=True, slots=True)
class TurnRows:
    """The parameters of one turn's statements."""

    session: tuple[Any, ...]
    run: tuple[Any, ...] | None
    messages: list[tuple[Any, ...]]
    events: list[tuple[Any, ...]]
    fence: tuple[str, int] | None = None
    """The run id and fence a queued run's lease must still hold (`FENCE_HELD`)."""

    def safe(self) -> TurnRows:
        """The same rows with every text storable (`rows.safe_params`)."""
        return replace(
            self,
            session=dbrows.safe_params(self.session),
            run=dbrows.safe_params(self.run),
            messages=dbrows.safe_params(self.messages),
            events=dbrows.safe_params(self.events),
        )


def turn_rows(
    session: SessionInfo,
    run: RunInfo | None,
    messages: list[Message],
    events: list[RunEvent],
    at: float,
    *,
    where: str,
    fence: RunFence | None = None,
) -> TurnRows:
    """The rows of a turn; `UsageError` for a message without id or a value JSON cannot hold."""
    if any(not m.id for m in messages):
        raise UsageError("every committed message needs an id")
    updated_at = max(session.updated_at, at)
    created = at or updated_at
    try:
        message_rows = dbrows.message_params(session.id, messages, created)
        event_rows = dbrows.event_params(events)
    except PydanticSerializationError:
        # text no UTF-8 can hold is written by the rule of `ports.text` rather than the turn
        # lost; any other value JSON cannot take fails the commit, nothing written
        try:
            message_rows = dbrows.message_params(session.id, messages, created, safe=True)
            event_rows = dbrows.event_params(events, safe=True)
        except (PydanticSerializationError, TypeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[-1].strip()
            raise UsageError(
                f"cannot commit the turn in the {where}: a message or event holds a value that"
                f" cannot be stored ({first})"
            ) from exc
    return TurnRows(
        session=dbrows.session_params(session, updated_at),
        run=dbrows.run_params(run) if run is not None else None,
        messages=message_rows,
        events=event_rows,
        fence=None if fence is None else (fence.run_id, fence.fence),
    )


async def write_turn(conn: AsyncConnection[Any], rows: TurnRows, retrying: bool) -> None:
    """Write the turn in one transaction (unless `retrying` finds it written already)."""
    import psycopg

    if retrying and await _written(conn, rows):
        return
    try:
        await _transaction(conn, rows)
    except (UnicodeEncodeError, psycopg.DataError) as exc:
        if isinstance(exc, psycopg.DataError) and "NUL" not in str(exc):
            raise
        # a header (title, reason, ...) holds a lone surrogate or a NUL: nothing was written
        await _transaction(conn, rows.safe())


async def _transaction(conn: AsyncConnection[Any], rows: TurnRows) -> None:
    pipelined = len(rows.events) <= PIPELINED_EVENTS
    if pipelined and rows.fence is None:
        async with conn.pipeline(), conn.transaction():
            await _headers_and_messages(conn, rows)
            if rows.events:
                async with conn.cursor() as cur:
                    await cur.executemany(sql.INSERT_EVENT, rows.events)
        return
    async with conn.transaction():
        if rows.fence is not None:
            # the run's queue row, locked FOR SHARE until the commit: a takeover (which
            # updates the row) waits for this turn, or this turn finds the fence moved on
            cur = await conn.execute(FENCE_HELD, rows.fence)
            if await cur.fetchone() is None:
                raise LeaseLost(*rows.fence)
        async with conn.pipeline():
            await _headers_and_messages(conn, rows)
            if pipelined and rows.events:
                async with conn.cursor() as cur:
                    await cur.executemany(sql.INSERT_EVENT, rows.events)
        if not pipelined:
            async with conn.cursor() as cur, cur.copy(sql.COPY_EVENTS) as copy:
                for row in rows.events:
                    await copy.write_row(row)


async def _headers_and_messages(conn: AsyncConnection[Any], rows: TurnRows) -> None:
    await conn.execute(sql.UPSERT_SESSION, rows.session)
    if rows.run is not None:
        await conn.execute(sql.UPSERT_RUN, rows.run)
    if rows.messages:
        async with conn.cursor() as cur:
            await cur.executemany(sql.INSERT_MESSAGE, rows.messages)


async def _written(conn: AsyncConnection[Any], rows: TurnRows) -> bool:
    """Whether the turn's first message (or, without messages, its first event) is stored as
    this turn writes it: the turn went through before its connection was lost."""
    if rows.messages:
        first = rows.messages[0]
        cur = await conn.execute(sql.MESSAGE_CONTENT, (first[1], first[0]))
        expected = first[7]
    elif rows.events:
        first = rows.events[0]
        cur = await conn.execute(sql.EVENT_PAYLOAD, (first[0], first[2]))
        expected = first[4]
    else:
        return False  # only the upserts, which may be written again
    found = await cur.fetchone()
    return found is not None and found[0] == expected


async def write_session(
    conn: AsyncConnection[Any],
    header: tuple[Any, ...],
    runs: list[tuple[Any, ...]],
    rows: TurnRows,
    marks: list[tuple[Any, ...]],
) -> bool:
    """Write a whole session (its header, runs, messages, events and marks) in one
    transaction; False, writing nothing, when a session with its id is there already."""
    async with conn.transaction():
        cur = await conn.execute(sql.INSERT_NEW_SESSION, header)
        if await cur.fetchone() is None:
            return False
        async with conn.pipeline(), conn.cursor() as many:
            for statement, params in (
                (sql.INSERT_RUN, runs),
                (sql.INSERT_MESSAGE, rows.messages),
                (sql.INSERT_MARK_ROW, marks),
            ):
                if params:
                    await many.executemany(statement, params)
        if rows.events:
            async with conn.cursor() as cur, cur.copy(sql.COPY_EVENTS) as copy:
                for row in rows.events:
                    await copy.write_row(row)
    return True
