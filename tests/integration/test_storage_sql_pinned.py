"""The SQL text the SQLite stores run (`storage/sql.py`) against the sqlmodel tables (`tables.py`).

The stores execute pinned SQL on plain `sqlite3` so that opening a database imports no SQLAlchemy;
these tests keep the pins honest: they must equal what SQLAlchemy compiles from the declarations,
and they must run on a database created by `tables.create_schema`.
"""

from __future__ import annotations

import difflib
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from soong_agent.adapters import state_rows
from soong_agent.adapters.storage import approval_sql, sql, tables
from soong_agent.adapters.storage import rows as dbrows
from soong_agent.ports.artifacts import ArtifactInfo
from soong_agent.ports.events import TextDeltaEvent
from soong_agent.ports.messages import MESSAGE_LIST, user_text
from soong_agent.ports.storage import RunInfo, SessionInfo

T0 = 1_700_000_000.0
_PARAM = re.compile(r"(?<!:):([A-Za-z_]\w*)")


def _params(statement: str) -> set[str]:
    return set(_PARAM.findall(statement))


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(tmp_path / "schema.sqlite", isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("BEGIN IMMEDIATE")
    tables.create_schema(conn)
    conn.execute("COMMIT")
    yield conn
    conn.close()


def test_pinned_sql_is_what_sqlalchemy_compiles() -> None:
    compiled = tables.compiled_statements()
    assert set(sql.PINNED) == set(compiled)
    for name in sql.PINNED:
        pinned = getattr(sql, name)
        diff = "\n".join(difflib.ndiff([pinned], [compiled[name]]))
        assert pinned == compiled[name], f"sql.{name} differs from the tables:\n{diff}"


def test_the_pinned_ddl_is_what_sqlalchemy_compiles() -> None:
    compiled = tables.schema_ddl()
    diff = "\n".join(difflib.unified_diff(list(sql.SCHEMA_DDL), compiled, lineterm=""))
    assert list(sql.SCHEMA_DDL) == compiled, f"sql.SCHEMA_DDL differs from the tables:\n{diff}"


def test_the_schema_version_is_the_one_the_stores_check() -> None:
    assert tables.SCHEMA_VERSION == sql.SCHEMA_VERSION >= 1


def test_create_schema_sets_the_version_and_every_declared_column(
    db: sqlite3.Connection,
) -> None:
    assert db.execute("PRAGMA user_version").fetchall() == [(sql.SCHEMA_VERSION,)]
    for table in tables.METADATA.sorted_tables:
        created = [r[1] for r in db.execute(f"PRAGMA table_info({table.name})").fetchall()]
        assert created == [c.name for c in table.columns]
        indexes = {r[1] for r in db.execute(f"PRAGMA index_list({table.name})").fetchall()}
        assert {str(i.name) for i in table.indexes} <= indexes
    # Creating again (a second process, an interrupted first run) changes nothing.
    master = "SELECT type, name, sql FROM sqlite_master ORDER BY name"
    before = db.execute(master).fetchall()
    db.execute("BEGIN IMMEDIATE")
    tables.create_schema(db)
    db.execute("COMMIT")
    assert db.execute(master).fetchall() == before


def test_the_row_helpers_carry_exactly_the_parameters_of_their_statements() -> None:
    session = SessionInfo(id="s", project_dir="/p", created_at=T0, updated_at=T0)
    run = RunInfo(id="r", session_id="s", started_at=T0)
    event = TextDeltaEvent(seq=0, run_id="r", session_id="s", at=T0, text="x")
    info = ArtifactInfo(id="art_1", session_id="s", filename="f", size=1, sha256="0", preview="")
    assert set(dbrows.session_row(session, T0)) == _params(sql.UPSERT_SESSION)
    assert set(dbrows.run_row(run)) == _params(sql.UPSERT_RUN)
    assert set(dbrows.message_rows("s", [user_text("x", id="m")], T0)[0]) == _params(
        sql.INSERT_MESSAGE
    )
    assert set(dbrows.event_rows([event])[0]) == _params(sql.INSERT_EVENT)
    assert set(dbrows.artifact_row(info, "r", T0)) == _params(sql.INSERT_ARTIFACT)
    assert set(tables.MESSAGE_PARAMS.values()) == _params(sql.INSERT_MESSAGE)
    assert set(dbrows.mark_row("s", "k", "v", T0)) == _params(sql.UPSERT_MARK)


def test_every_statement_runs_on_a_created_schema(db: sqlite3.Connection) -> None:
    session = SessionInfo(
        id="s", project_dir="/p", created_at=T0, updated_at=T0, active_leaf_id="m1"
    )
    run = RunInfo(id="r", session_id="s", started_at=T0, model="m")
    messages = [user_text("a", id="m0"), user_text("b", id="m1", parent_id="m0")]
    event = TextDeltaEvent(seq=0, run_id="r", session_id="s", at=T0, text="x")
    info = ArtifactInfo(id="art_1", session_id="s", filename="f", size=1, sha256="0", preview="p")

    db.execute("BEGIN IMMEDIATE")
    db.execute(sql.UPSERT_SESSION, dbrows.session_row(session, T0 + 1))
    db.execute(sql.UPSERT_RUN, dbrows.run_row(run))
    db.executemany(sql.INSERT_MESSAGE, dbrows.message_rows("s", messages, T0))
    db.executemany(sql.INSERT_EVENT, dbrows.event_rows([event]))
    db.execute(sql.INSERT_ARTIFACT, dbrows.artifact_row(info, "r", T0))
    db.execute(sql.UPSERT_MARK, dbrows.mark_row("s", "k", "m0", T0))
    db.execute(sql.UPSERT_MARK, dbrows.mark_row("s", "k", "m1", T0 + 1))
    db.execute("COMMIT")

    rows = db.execute(sql.GET_SESSION, {"sid": "s"}).fetchall()
    assert state_rows.session_info(rows[0]).active_leaf_id == "m1"
    assert [state_rows.session_info(r).id for r in db.execute(sql.LIST_SESSIONS, {"limit": 5})] == [
        "s"
    ]
    assert [state_rows.run_info(r) for r in db.execute(sql.LIST_RUNS, {"sid": "s"})] == [run]
    contents = [r[0] for r in db.execute(sql.ALL_MESSAGES, {"sid": "s"})]
    assert MESSAGE_LIST.validate_json("[" + ",".join(contents) + "]") == messages
    assert [r[0] for r in db.execute(sql.RUN_EVENTS, {"rid": "r"})] == [event.model_dump_json()]
    found = db.execute(sql.GET_ARTIFACT, {"aid": "art_1", "sid": "s"}).fetchall()
    assert state_rows.artifact_info(found[0]) == info
    assert db.execute(sql.GET_MARK, {"sid": "s", "key": "k"}).fetchall() == [("m1",)]
    # parent_ordinal resolved within the batch: the walk goes leaf -> root
    for limit, ids in ((-1, ["m1", "m0"]), (10, ["m1", "m0"]), (1, ["m1"])):
        path = db.execute(sql.PATH_SQL, {"sid": "s", "limit": limit}).fetchall()
        assert [MESSAGE_LIST.validate_json(f"[{r[0]}]")[0].id for r in path] == ids
    path_to = db.execute(sql.PATH_TO_SQL, {"sid": "s", "mid": "m0", "limit": -1}).fetchall()
    assert path_to == [(messages[0].model_dump_json(),)]


@pytest.mark.parametrize(
    ("statement", "params"),
    [
        (sql.PATH_SQL, {"sid": "s", "limit": 10}),
        (sql.PATH_TO_SQL, {"sid": "s", "mid": "m", "limit": 10}),
        (sql.TAIL_SQL, {"sid": "s", "limit": 10}),
        (sql.TAIL_TO_SQL, {"sid": "s", "mid": "m", "limit": 10}),
        (sql.ALL_MESSAGES, {"sid": "s"}),
        (sql.GET_SESSION, {"sid": "s"}),
        (sql.LIST_RUNS, {"sid": "s"}),
        (sql.RUN_EVENTS, {"rid": "r"}),
        (sql.GET_ARTIFACT, {"aid": "a", "sid": "s"}),
        (sql.GET_MARK, {"sid": "s", "key": "k"}),
        (approval_sql.GET, {"id": "a"}),
        (approval_sql.LIST_STATUS, {"status": "pending", "limit": 10}),
        (approval_sql.LIST_RUN, {"run_id": "r", "limit": 10}),
        (approval_sql.LIST_RUN_STATUS, {"run_id": "r", "status": "pending", "limit": 10}),
    ],
)
def test_reads_never_scan_a_table(
    db: sqlite3.Connection, statement: str, params: dict[str, object]
) -> None:
    plan = [r[3] for r in db.execute("EXPLAIN QUERY PLAN " + statement, params).fetchall()]
    scans = [d for d in plan if d.startswith("SCAN") and d not in ("SCAN p", "SCAN path")]
    assert not scans, plan


def test_a_version_1_database_gains_the_marks_table_when_opened(tmp_path: Path) -> None:
    from soong_agent.adapters.storage import transactions

    path = tmp_path / "v1.sqlite"
    conn = transactions.connect(path, 1000)
    conn.execute("BEGIN IMMEDIATE")
    tables.create_schema(conn)
    conn.execute("DROP TABLE session_marks")
    conn.execute("PRAGMA user_version = 1")
    conn.execute("COMMIT")
    conn.close()
    opened = transactions.open_database(path, lambda: transactions.connect(path, 1000))
    try:
        assert transactions.user_version(opened) == sql.SCHEMA_VERSION == 4
        assert opened.execute(sql.GET_MARK, {"sid": "s", "key": "k"}).fetchall() == []
    finally:
        opened.close()


def test_a_version_2_database_gains_the_run_queue_when_opened(tmp_path: Path) -> None:
    from soong_agent.adapters.storage import transactions

    path = tmp_path / "v2.sqlite"
    conn = transactions.connect(path, 1000)
    conn.execute("BEGIN IMMEDIATE")
    tables.create_schema(conn)
    conn.execute("DROP TABLE run_queue")
    conn.execute("PRAGMA user_version = 2")
    conn.execute("COMMIT")
    conn.close()
    opened = transactions.open_database(path, lambda: transactions.connect(path, 1000))
    try:
        assert transactions.user_version(opened) == sql.SCHEMA_VERSION == 4
        assert opened.execute("SELECT count(*) FROM run_queue").fetchall() == [(0,)]
    finally:
        opened.close()


def test_a_version_3_database_gains_the_approvals_when_opened(tmp_path: Path) -> None:
    from soong_agent.adapters.storage import transactions

    path = tmp_path / "v3.sqlite"
    conn = transactions.connect(path, 1000)
    conn.execute("BEGIN IMMEDIATE")
    tables.create_schema(conn)
    conn.execute("DROP TABLE approvals")
    conn.execute("PRAGMA user_version = 3")
    conn.execute("COMMIT")
    conn.close()
    opened = transactions.open_database(path, lambda: transactions.connect(path, 1000))
    try:
        assert transactions.user_version(opened) == sql.SCHEMA_VERSION == 4
        assert opened.execute("SELECT count(*) FROM approvals").fetchall() == [(0,)]
    finally:
        opened.close()
