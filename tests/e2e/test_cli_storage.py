"""`soong-agent storage status|migrate|copy` and `config check` against a real PostgreSQL
(STORE-2, issue 33 items 1, 3 and 6), through the installed CLI.

A user starts on SQLite (two sessions made by real runs against the loopback model: a tool
output cut into an artifact, a resume, a branch), points `[storage] url` at PostgreSQL, looks at
the store (nothing created by looking), migrates, copies the history over (the same transcripts
come back from PostgreSQL, the SQLite file untouched), and copies again (everything skipped).
A database that cannot be used is one line on stderr, exit 2, the password never shown."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response, tool_call_response
from tests.support.postgres import PASSWORD, TestServer

pytestmark = pytest.mark.e2e

MODEL = (
    "[model]\n"
    'provider = "openai"\n'
    'base_url = "{base}"\n'
    'api_key_env = "SOONG_TEST_KEY"\n'
    'name = "fake-model"\n'
    "[model.retry]\n"
    "initial_backoff_ms = 10\n"
    '[permissions]\nmode = "bypass"\n'
    "[tools]\nmax_result_chars = 2000\n"
)


def configure(world: CliWorld, storage: str = "") -> None:
    world.write_config(MODEL.format(base=world.server.base_url) + storage)


def postgres(url: str, password_env: str | None = None) -> str:
    extra = f'password_env = "{password_env}"\n' if password_env else ""
    return f'[storage]\nurl = "{url}"\n{extra}'


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result


def one_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("soong-agent: error: ")
    return lines[0]


def session_id_of(output: str) -> str:
    match = re.search(r"session:? (ses_\w+)", output)
    assert match, output
    return match.group(1)


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return list(conn.execute(sql).fetchall())


def has_schema(url: str) -> bool:
    return rows(url, "SELECT 1 FROM pg_namespace WHERE nspname = 'soong_agent'") != []


def sqlite_count(path: Path, table: str) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def make_sqlite_history(world: CliWorld) -> tuple[str, str]:
    """Two sessions in the home's sessions.sqlite: one with an artifact, a resume and a
    branch, one plain."""
    configure(world)
    (world.project / "big.log").write_text(
        "".join(f"line {i}: the quick brown fox\n" for i in range(400)), encoding="utf-8"
    )
    world.server.enqueue(
        tool_call_response([("c1", "read_file", json.dumps({"path": "big.log"}))]),
        text_response("it is long"),
    )
    first = ok(world.run("run", "read big.log"))
    sid = session_id_of(first.stdout + first.stderr)
    world.server.enqueue(text_response("second answer"))
    ok(world.run("run", "--session-id", sid, "and beta"))
    shown = ok(world.run("sessions", "show", sid)).stdout
    users = re.findall(r"── user ── (msg_\w+)", shown)
    world.server.enqueue(text_response("branch answer"))
    ok(world.run("run", "--session-id", sid, "--from-message", users[1], "gamma instead"))
    world.server.enqueue(text_response("other answer"))
    other = ok(world.run("run", "a second session"))
    return sid, session_id_of(other.stdout + other.stderr)


def test_status_migrate_and_copy_from_sqlite_then_again(world: CliWorld, postgres_url: str) -> None:
    sid, other = make_sqlite_history(world)
    source = world.home / "sessions.sqlite"
    transcripts = {s: ok(world.run("sessions", "show", s)).stdout for s in (sid, other)}
    assert "branch answer" in transcripts[sid] and re.search(r"art_[0-9a-f]{8}", transcripts[sid])
    before = hashlib.sha256(source.read_bytes()).hexdigest()

    configure(world, postgres(postgres_url))
    status = ok(world.run("storage", "status"))
    assert f"storage: {postgres_url} (PostgreSQL)" in status.stdout
    assert re.search(r"server:  PostgreSQL 1\d", status.stdout)
    assert "no schema yet (needs migrate" in status.stdout
    assert not has_schema(postgres_url)  # looking creates nothing

    migrated = ok(world.run("storage", "migrate"))
    version = re.search(r"migrated v0 → v(\d+)", migrated.stdout)
    assert version, migrated.stdout
    assert f"schema v{version[1]} (current)" in ok(world.run("storage", "status")).stdout
    checked = ok(world.run("config", "check")).stdout
    assert re.search(
        rf"^storage: {re.escape(postgres_url)} — PostgreSQL 1\d\.\d+, schema v{version[1]}"
        r" \(current\)$",
        checked,
        re.MULTILINE,
    ), checked

    copied = ok(world.run("storage", "copy", "--from", f"sqlite://{source}"))
    counts = rows(
        postgres_url,
        "SELECT (SELECT count(*) FROM soong_agent.runs), (SELECT count(*) FROM"
        " soong_agent.messages), (SELECT count(*) FROM soong_agent.events)",
    )[0]
    assert counts == tuple(sqlite_count(source, t) for t in ("runs", "messages", "events"))
    assert (
        f"copied 2 sessions ({counts[0]} runs, {counts[1]} messages, {counts[2]} events),"
        " 1 artifact; skipped 0 sessions and 0 artifacts already there"
    ) in copied.stdout
    assert hashlib.sha256(source.read_bytes()).hexdigest() == before  # only read

    # PostgreSQL now tells the same story, the branch and the artifact's bytes included
    for s, text in transcripts.items():
        assert ok(world.run("sessions", "show", s)).stdout == text
    [(aid, size)] = rows(postgres_url, "SELECT id, size FROM soong_agent.artifacts")
    stored = b"".join(
        bytes(r[0])
        for r in rows(
            postgres_url,
            f"SELECT data FROM soong_agent.artifact_chunks WHERE artifact_id = '{aid}' ORDER BY n",
        )
    )
    [on_disk] = [p for p in (world.home / "sessions").rglob("*") if p.is_file()]
    assert on_disk.parent.name == aid and stored == on_disk.read_bytes() and len(stored) == size

    again = ok(world.run("storage", "copy", "--from", f"sqlite://{source}"))
    assert (
        "copied 0 sessions (0 runs, 0 messages, 0 events), 0 artifacts;"
        " skipped 2 sessions and 1 artifact already there"
    ) in again.stdout
    assert rows(postgres_url, "SELECT count(*) FROM soong_agent.messages") == [(counts[1],)]


def test_a_store_that_cannot_be_used_is_one_line_exit_2(
    world: CliWorld, postgres_server: TestServer, postgres_url: str
) -> None:
    role = postgres_server.password_role()
    dbname = postgres_url.rsplit("/", maxsplit=1)[-1].split("?", maxsplit=1)[0]
    configure(world, postgres(postgres_server.url(dbname, user=role), "SOONG_TEST_PG_PW"))
    world.env["SOONG_TEST_PG_PW"] = "not-the-" + PASSWORD
    for args in (("storage", "status"), ("config", "check")):
        result = world.run(*args)
        line = one_error(result)
        assert "refused the credentials" in line and "SOONG_TEST_PG_PW" in line, line
        assert PASSWORD not in result.stdout + result.stderr
    del world.env["SOONG_TEST_PG_PW"]
    assert "SOONG_TEST_PG_PW is not set" in one_error(world.run("storage", "status"))

    missing = postgres_server.url("no_such_db")
    configure(world, postgres(missing))
    for args in (("storage", "status"), ("config", "check")):
        assert "does not exist" in one_error(world.run(*args))
    nowhere = world.home / "old" / "sessions.sqlite"
    result = world.run("storage", "copy", "--from", f"sqlite://{nowhere}", "--to", postgres_url)
    assert str(nowhere) in one_error(result)
    assert not nowhere.parent.exists()
    assert not has_schema(postgres_url)
