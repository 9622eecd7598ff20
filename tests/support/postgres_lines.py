"""A log of the PostgreSQL task log or mailbox seen as the bytes its file would hold, and written
behind the store's back, as a hand edit (or a copy of a file as it was) would write it."""

from __future__ import annotations

import psycopg

from soong_agent.adapters.postgres.ddl import SCHEMA
from soong_agent.adapters.postgres.line_logs import LineTables


class LinesInDatabase:
    """`raw` and `put` of one kind of log (`tables`) in the database at `url`."""

    def __init__(self, url: str, tables: LineTables) -> None:
        self.url = url
        self.tables = tables

    def raw(self, first: str, second: str) -> bytes:
        """The log's rows joined in order (empty when it does not exist or no table yet)."""
        a, b = self.tables.keys
        with psycopg.connect(self.url, autocommit=True) as conn:
            found = conn.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.{self.tables.lines}",))
            if found.fetchone() == (None,):
                return b""
            rows = conn.execute(
                f"SELECT line FROM {SCHEMA}.{self.tables.lines} WHERE {a} = %s AND {b} = %s"
                " ORDER BY seq",
                (first, second),
            ).fetchall()
        return "".join(r[0] for r in rows).encode("utf-8")

    def put(self, first: str, second: str, data: bytes) -> None:
        """Replace the log by `data`, one row per line (a last line without its newline, torn,
        in a row of its own)."""
        a, b = self.tables.keys
        lines = data.decode("utf-8").splitlines(keepends=True)
        with psycopg.connect(self.url, autocommit=True) as conn, conn.transaction():
            conn.execute(
                f"DELETE FROM {SCHEMA}.{self.tables.logs} WHERE {a} = %s AND {b} = %s",
                (first, second),
            )
            conn.execute(
                f"INSERT INTO {SCHEMA}.{self.tables.logs} ({a}, {b}, created_at)"
                " VALUES (%s, %s, 0)",
                (first, second),
            )
            for seq, line in enumerate(lines, start=1):
                conn.execute(
                    f"INSERT INTO {SCHEMA}.{self.tables.lines} ({a}, {b}, seq, line)"
                    " VALUES (%s, %s, %s, %s)",
                    (first, second, seq, line),
                )
