"""Reading a session's path (the active one, or the one to a message) from PostgreSQL.

The path's messages are usually its session's last rows, each the parent of the one after it
(a path written in one go; compaction starts a new root, which ends the path). So the rows are
read from the leaf backwards in write order (as many as the limit asks for, or in slices
growing fourfold), following their `parent_ordinal` links; at the first row that is not the
previous row's parent (the path branches off within what was read) the recursive `WALK` takes
over, one key lookup per message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from soong_agent.adapters.postgres import session_sql as sql

if TYPE_CHECKING:
    from psycopg import AsyncConnection

_FIRST_SLICE = 512
_ALL = 2**62
"""The walk's bound when the caller wants the whole path."""


async def path_docs(
    conn: AsyncConnection[Any], session_id: str, limit: int | None, message_id: str | None
) -> list[str]:
    """The JSON of the path's messages, root first (its last `limit` when given), ending at the
    active leaf or at `message_id`; empty when the session has no such message."""
    if limit is not None and limit <= 0:
        return []
    first = limit if limit is not None else _FIRST_SLICE  # a limit bounds the rows read
    if message_id is None:
        cur = await conn.execute(sql.TAIL_ACTIVE, (session_id, session_id, session_id, first))
    else:
        cur = await conn.execute(sql.TAIL_TO, (session_id, session_id, message_id, first))
    rows = await cur.fetchall()
    if not rows:
        return []
    leaf = rows[0][0]
    docs = await _linear(conn, session_id, rows, first, limit)
    if docs is None:
        bound = _ALL if limit is None else limit
        cur = await conn.execute(sql.WALK, (leaf, bound))
        docs = [r[0] for r in await cur.fetchall()]
    docs.reverse()
    return docs


async def _linear(
    conn: AsyncConnection[Any],
    session_id: str,
    rows: list[tuple[Any, ...]],
    asked: int,
    limit: int | None,
) -> list[str] | None:
    """The path, leaf first, when the rows from the leaf backwards are exactly its messages
    (down to the root, or `limit` of them); None as soon as one is not."""
    docs: list[str] = []
    expected = rows[0][0]
    size = asked
    while True:
        for ordinal, parent, content in rows:
            if ordinal != expected:
                return None
            docs.append(content)
            if parent is None:
                return docs  # the root
            expected = parent
        if limit is not None and len(docs) >= limit:
            return docs
        if len(rows) < asked:
            return None  # no row is left where the parent should be
        size *= 4
        asked = size if limit is None else min(size, limit - len(docs))
        cur = await conn.execute(sql.TAIL, (session_id, expected, asked))
        rows = await cur.fetchall()
