"""A SQLite session database read for `storage copy` (STORE-2): every session with its runs,
messages, events and marks, and every artifact with its bytes — read only.

The file is opened with ``mode=ro``: nothing in it is created, migrated or changed (a run left
`running` is read as it is; the store it is copied to says it is interrupted when nobody holds
it). A path that is not there, or a file that is not a soong-agent session database, is a
`UsageError` before anything is read. An artifact's bytes are the file
`<home>/sessions/<session>/artifacts/<id>/<filename>` (`SqliteArtifactStore`'s layout).

Calls are blocking and made on one worker thread of the export (the copy awaits them).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from soong_agent.adapters import state_rows
from soong_agent.adapters.storage import sql
from soong_agent.ports.artifacts import (
    ArtifactInfo,
    check_session_id,
    is_artifact_id,
    safe_filename,
)
from soong_agent.ports.errors import RunError, UsageError
from soong_agent.ports.events import RunEvent
from soong_agent.ports.messages import MESSAGE_LIST, Message
from soong_agent.ports.storage import RunInfo, SessionInfo

if TYPE_CHECKING:
    from pydantic import TypeAdapter

_T = TypeVar("_T")
StoredArtifact = tuple[ArtifactInfo, str | None, float]
"""An artifact's metadata, the run that made it (if known) and when it was stored."""

_ALL_SESSIONS = sql.LIST_SESSIONS
_ARTIFACTS = (
    "SELECT id, session_id, filename, size, sha256, preview, run_id, created_at"
    " FROM artifacts ORDER BY created_at, rowid"
)
_MARKS = 'SELECT "key", value FROM session_marks WHERE session_id = :sid ORDER BY "key"'
_CHUNK = 2000
"""Documents validated per pydantic call."""


def sqlite_schema_version(path: Path) -> int | None:
    """`PRAGMA user_version` of the database at `path`, read only; None when there is no file.
    `UsageError` for a file SQLite cannot read as a database."""
    if not path.is_file():
        return None
    try:
        conn = _open_read_only(path)
    except sqlite3.Error as exc:
        raise UsageError(f"cannot read the session database {path}: {exc}") from exc
    try:
        return int(conn.execute("PRAGMA user_version").fetchall()[0][0])
    except sqlite3.Error as exc:
        raise UsageError(f"cannot read the session database {path}: {exc}") from exc
    finally:
        conn.close()


def _open_read_only(path: Path) -> sqlite3.Connection:
    uri = path.resolve().as_uri() + "?mode=ro"
    return sqlite3.connect(uri, uri=True, check_same_thread=False)


class SqliteExport:
    """Everything a SQLite session database (and the artifact files under `home`) holds."""

    def __init__(self, db_path: Path, home: Path) -> None:
        self.path = Path(db_path)
        self.home = Path(home)
        self.where = f"SQLite file {self.path}"
        self._conn: sqlite3.Connection | None = None
        self._has_marks = False
        self._has_artifacts = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="soong-export")

    # --- the connection (on the worker) ----------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        if not self.path.is_file():
            raise UsageError(f"there is no SQLite session database at {self.path}")
        version = sqlite_schema_version(self.path)
        conn = _open_read_only(self.path)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not version or not {"sessions", "runs", "messages", "events"} <= tables:
            conn.close()
            raise UsageError(f"{self.path} is not a soong-agent session database")
        if version > sql.SCHEMA_VERSION:
            conn.close()
            raise UsageError(
                f"the session database {self.path} has schema version {version}, newer than"
                f" this soong-agent understands ({sql.SCHEMA_VERSION})"
            )
        self._has_marks = "session_marks" in tables
        self._has_artifacts = "artifacts" in tables
        self._conn = conn
        return conn

    def _rows(self, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
        return self._connection().execute(statement, params or {}).fetchall()

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, fn, *args)

    def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        try:
            return fn(*args)
        except sqlite3.Error as exc:
            raise RunError(f"cannot read the session database {self.path}: {exc}") from exc

    # --- what the copy reads ---------------------------------------------------------------

    async def open(self) -> None:
        """Check that the file is a session database this code reads (`UsageError` if not)."""
        await self._run(self._connection)

    async def sessions(self) -> list[SessionInfo]:
        """Every session."""
        found = await self._run(self._rows, _ALL_SESSIONS, {"limit": -1})
        return [state_rows.session_info(r) for r in found]

    async def runs(self, session_id: str) -> list[RunInfo]:
        """The session's runs, oldest first, as stored."""
        found = await self._run(self._rows, sql.LIST_RUNS, {"sid": session_id})
        return [state_rows.run_info(r) for r in found]

    async def messages(self, session_id: str) -> list[Message]:
        """Every message of the session, all branches, in the order they were written."""
        found = await self._run(self._rows, sql.ALL_MESSAGES, {"sid": session_id})
        return _validated([r[0] for r in found], MESSAGE_LIST.validate_json)

    async def events(self, run_id: str) -> list[RunEvent]:
        """A run's events in sequence order."""
        found = await self._run(self._rows, sql.RUN_EVENTS, {"rid": run_id})
        return _validated([r[0] for r in found], _event_list().validate_json)

    async def marks(self, session_id: str) -> dict[str, str]:
        """The session's marks (none in a database older than marks)."""
        await self.open()
        if not self._has_marks:
            return {}
        found = await self._run(self._rows, _MARKS, {"sid": session_id})
        return {str(k): str(v) for k, v in found}

    async def artifacts(self) -> list[StoredArtifact]:
        """Every artifact's metadata, oldest first."""
        await self.open()
        if not self._has_artifacts:
            return []
        found = await self._run(self._rows, _ARTIFACTS)
        return [(state_rows.artifact_info(r), r[6], float(r[7])) for r in found]

    async def artifact_bytes(self, info: ArtifactInfo) -> bytes | None:
        """The artifact's bytes; None when its file is gone (or it is not a plain name)."""
        return await self._run(self._read_file, info)

    def file_of(self, info: ArtifactInfo) -> Path:
        """Where the artifact's bytes are kept."""
        return self.home / "sessions" / info.session_id / "artifacts" / info.id / info.filename

    def _read_file(self, info: ArtifactInfo) -> bytes | None:
        if not is_artifact_id(info.id) or safe_filename(info.filename) != info.filename:
            return None
        try:
            check_session_id(info.session_id)
        except UsageError:
            return None
        try:
            return self.file_of(info).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RunError(
                f"cannot read artifact {info.id} at {self.file_of(info)}: {exc}"
            ) from exc

    async def close(self) -> None:
        """Close the connection and the worker."""

        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
            self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._executor, shut)
        self._executor.shutdown(wait=True)


@cache
def _event_list() -> TypeAdapter[list[RunEvent]]:
    from pydantic import TypeAdapter

    return TypeAdapter(list[RunEvent])


def _validated(docs: list[str], validate: Callable[[str], list[_T]]) -> list[_T]:
    out: list[_T] = []
    for start in range(0, len(docs), _CHUNK):
        out.extend(validate("[" + ",".join(docs[start : start + _CHUNK]) + "]"))
    return out
