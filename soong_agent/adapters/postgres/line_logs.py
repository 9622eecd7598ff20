"""Append-only logs of lines in two tables, as the task log and the mailbox keep them.

A log is one row of its `logs` table (the row a writer locks) and its lines, one row each in
the `lines` table, numbered `seq` 1, 2, … in the transaction that writes them. A row holds its
line exactly as the file adapter writes it, the newline included, so the log's content is its
rows joined in `seq` order and is read by the same parser as a file: a row is written whole in
its transaction, so only a hand edit (or a log copied from a file as it was) can leave a torn
last line or a corrupt one, and each is treated as in a file.

A writer locks the log's row (`SELECT … FOR UPDATE`, the row made first when the log is new)
for the rest of its transaction: every other writer of that log, in any process on any host,
waits for it, then reads what it wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from soong_agent.adapters.postgres.ddl import SCHEMA

if TYPE_CHECKING:
    from psycopg import Connection


class Line(NamedTuple):
    """One stored line: its number and its text (newline included)."""

    seq: int
    text: str


@dataclass(frozen=True, slots=True)
class LineTables:
    """The tables of one kind of log and the two columns naming a log in both."""

    logs: str
    lines: str
    keys: tuple[str, str]

    def create(self) -> tuple[str, ...]:
        """The statements making both tables (for a schema `Step`)."""
        a, b = self.keys
        return (
            f"""CREATE TABLE {SCHEMA}.{self.logs} (
                {a} text NOT NULL,
                {b} text NOT NULL,
                created_at double precision NOT NULL,
                PRIMARY KEY ({a}, {b})
            )""",
            f"""CREATE TABLE {SCHEMA}.{self.lines} (
                {a} text NOT NULL,
                {b} text NOT NULL,
                seq integer NOT NULL,
                line text NOT NULL,
                PRIMARY KEY ({a}, {b}, seq),
                FOREIGN KEY ({a}, {b}) REFERENCES {SCHEMA}.{self.logs} ({a}, {b})
                    ON DELETE CASCADE
            )""",
        )

    @property
    def _where(self) -> str:
        a, b = self.keys
        return f"{a} = %s AND {b} = %s"

    def lock(self, conn: Connection[Any], key: tuple[str, str], *, create: bool, at: float) -> bool:
        """Lock the log's row until the transaction ends (made first when `create`); False
        when the log does not exist and is not to be made."""
        locked = f"SELECT 1 FROM {SCHEMA}.{self.logs} WHERE {self._where} FOR UPDATE"
        if conn.execute(locked, key).fetchone() is not None:
            return True
        if not create:
            return False
        a, b = self.keys
        conn.execute(
            f"INSERT INTO {SCHEMA}.{self.logs} ({a}, {b}, created_at) VALUES (%s, %s, %s)"
            " ON CONFLICT DO NOTHING",
            (*key, at),
        )
        return conn.execute(locked, key).fetchone() is not None

    def read(self, conn: Connection[Any], key: tuple[str, str]) -> list[Line]:
        """The log's lines in order (none when it does not exist)."""
        cur = conn.execute(
            f"SELECT seq, line FROM {SCHEMA}.{self.lines} WHERE {self._where} ORDER BY seq", key
        )
        return [Line(int(seq), str(text)) for seq, text in cur.fetchall()]

    def keys_of(self, conn: Connection[Any], first: str | None) -> list[tuple[str, str]]:
        """The keys of every log (whose first key is `first`, when given), unsorted."""
        a, b = self.keys
        statement = f"SELECT {a}, {b} FROM {SCHEMA}.{self.logs}"
        if first is None:
            rows = conn.execute(statement).fetchall()
        else:
            rows = conn.execute(statement + f" WHERE {a} = %s", (first,)).fetchall()
        return [(str(x), str(y)) for x, y in rows]

    def append(
        self, conn: Connection[Any], key: tuple[str, str], lines: list[Line], whole: int, text: str
    ) -> int:
        """Add `text` (one line, newline included) after the first `whole` bytes of the log
        whose rows are `lines` (the log locked): what follows them, a torn tail, is cut off
        first. Returns the new line's `seq`."""
        last = lines[-1].seq if lines else 0
        kept = 0
        for number, line in enumerate(lines):
            size = len(line.text.encode("utf-8"))
            if kept + size > whole:
                keep = whole - kept  # the whole lines of a row that also holds the torn part
                last = line.seq if keep else (lines[number - 1].seq if number else 0)
                self._cut(conn, key, line, keep)
                break
            kept += size
        a, b = self.keys
        conn.execute(
            f"INSERT INTO {SCHEMA}.{self.lines} ({a}, {b}, seq, line) VALUES (%s, %s, %s, %s)",
            (*key, last + 1, text),
        )
        return last + 1

    def _cut(self, conn: Connection[Any], key: tuple[str, str], first: Line, keep: int) -> None:
        """Drop the rows from `first` on, but the first `keep` bytes of `first`."""
        conn.execute(
            f"DELETE FROM {SCHEMA}.{self.lines} WHERE {self._where} AND seq > %s",
            (*key, first.seq if keep else first.seq - 1),
        )
        if keep:
            text = first.text.encode("utf-8")[:keep].decode("utf-8")
            conn.execute(
                f"UPDATE {SCHEMA}.{self.lines} SET line = %s WHERE {self._where} AND seq = %s",
                (text, *key, first.seq),
            )


def content(lines: list[Line]) -> bytes:
    """The log's bytes: its lines joined, as its file would hold them."""
    return "".join(line.text for line in lines).encode("utf-8")
