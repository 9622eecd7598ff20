"""The artifact store (CTX-5): whole tool outputs on disk, their metadata in the session database.

An artifact's bytes live at `<home>/sessions/<session_id>/artifacts/<artifact_id>/<filename>`;
its row (size, sha256, preview, ...) is in the `artifacts` table of the session database (the
same SQLite file and schema as `SqliteSessionStore`). An artifact is only visible to its own
session: looking it up with another session id finds nothing.

Like the session store, all work (database and files) runs on one worker thread of the store,
the database is opened by the first call (WAL, busy timeout) and statements run on a plain
`sqlite3` connection with the SQL pinned in `sql.py` (no SQLAlchemy unless the database has to be
created). This store's connection does not enforce foreign keys: a tool result may be stored
before the turn that creates the session row is committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from soong_agent.adapters import state_rows
from soong_agent.adapters.storage import rows as dbrows
from soong_agent.adapters.storage import sql, transactions
from soong_agent.ports.artifacts import (
    ArtifactInfo,
    check_session_id,
    is_artifact_id,
    safe_filename,
)
from soong_agent.ports.errors import RunError, UsageError

_T = TypeVar("_T")


class _Artifacts:
    """The connection, the files and every operation; used only on the store's worker thread."""

    def __init__(self, db_path: Path, home: Path, busy_timeout_ms: int) -> None:
        self.db_path = db_path
        self.home = home
        self.busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None

    # --- connection ------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        return transactions.connect(self.db_path, self.busy_timeout_ms)

    def connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = transactions.open_database(self.db_path, self._connect)
        return self._conn

    def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run one operation; database failures become `RunError`s naming the file."""
        try:
            return fn(*args)
        except sqlite3.Error as exc:
            raise RunError(f"session database {self.db_path}: {exc}") from exc

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    # --- operations ------------------------------------------------------------------------

    def folder(self, session_id: str, artifact_id: str) -> Path:
        return self.home / "sessions" / session_id / "artifacts" / artifact_id

    def save(
        self, session_id: str, run_id: str, filename: str, data: bytes, preview_chars: int
    ) -> ArtifactInfo:
        check_session_id(session_id)
        conn = self.connection()
        artifact_id = "art_" + secrets.token_hex(12)
        name = safe_filename(filename)
        folder = self.folder(session_id, artifact_id)
        folder.mkdir(parents=True, exist_ok=False)
        path = folder / name
        partial = folder / f".{name}.partial"
        info = ArtifactInfo(
            id=artifact_id,
            session_id=session_id,
            filename=name,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            preview=data.decode("utf-8", errors="replace")[: max(0, preview_chars)],
        )
        row = dbrows.artifact_row(info, run_id or None, time.time())

        def record(c: sqlite3.Connection) -> None:
            c.execute(sql.INSERT_ARTIFACT, row)

        try:
            partial.write_bytes(data)
            os.replace(partial, path)
            transactions.write(conn, record)
        except BaseException:
            for leftover in (partial, path):
                with contextlib.suppress(OSError):
                    leftover.unlink()
            with contextlib.suppress(OSError):
                folder.rmdir()
            raise
        return info

    def get(self, session_id: str, artifact_id: str) -> ArtifactInfo | None:
        if not is_artifact_id(artifact_id):
            return None
        params = {"aid": artifact_id, "sid": session_id}
        rows = self.connection().execute(sql.GET_ARTIFACT, params).fetchall()
        return state_rows.artifact_info(rows[0]) if rows else None

    def read(self, session_id: str, artifact_id: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError("offset and length must not be negative")
        info = self.get(session_id, artifact_id)
        if info is None:
            raise FileNotFoundError(2, "no such artifact in this session", artifact_id)
        with (self.folder(session_id, artifact_id) / info.filename).open("rb") as f:
            f.seek(offset)
            return f.read(length)


class SqliteArtifactStore:
    """An `ArtifactStore` with files under `home` and metadata in the session database `db_path`.

    Ids are ``art_`` + 24 random hex digits; file names are reduced to a safe base name. `save`
    raises `UsageError` for a session id that is not a plain name and OSError when the file
    cannot be written; `read` raises FileNotFoundError for an artifact unknown to the session.
    Database failures raise `RunError` (or `UsageError` when the file cannot be opened at all).
    """

    def __init__(self, db_path: Path, home: Path, *, busy_timeout_ms: int = 5000) -> None:
        self._impl = _Artifacts(Path(db_path), Path(home), busy_timeout_ms)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="soong-artifacts")
        self._closed = False

    def __repr__(self) -> str:
        return f"SqliteArtifactStore({str(self._impl.db_path)!r}, {str(self._impl.home)!r})"

    def path_of(self, info: ArtifactInfo) -> Path:
        """Where the bytes of an artifact are stored."""
        return self._impl.folder(info.session_id, info.id) / info.filename

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        if self._closed:
            raise UsageError(f"the artifact store of {self._impl.db_path} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._impl.call, fn, *args)

    async def save(
        self, *, session_id: str, run_id: str, filename: str, data: bytes, preview_chars: int
    ) -> ArtifactInfo:
        """Write `data` whole and record its metadata; returns the new artifact."""
        return await self._run(self._impl.save, session_id, run_id, filename, data, preview_chars)

    async def get(self, session_id: str, artifact_id: str) -> ArtifactInfo | None:
        """Metadata of an artifact of this session, or None."""
        return await self._run(self._impl.get, session_id, artifact_id)

    async def read(self, session_id: str, artifact_id: str, *, offset: int, length: int) -> bytes:
        """Bytes `offset … offset+length` of an artifact; FileNotFoundError when unknown."""
        return await self._run(self._impl.read, session_id, artifact_id, offset, length)

    async def close(self) -> None:
        """Finish pending work, then close the connection and stop the worker thread."""
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(self._executor, self._impl.close)
        self._executor.shutdown(wait=True)
