"""Reaching PostgreSQL: the URL and the password, and the one-line errors a user gets when the
database cannot be reached (refused, bad credentials, no such database), naming where and never
the password."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from soong_agent.adapters.postgres import PostgresDatabase, PostgresSettings, is_postgres_url
from soong_agent.adapters.postgres.connect import conninfo
from soong_agent.ports.errors import ConfigError, MissingSecretError, UsageError
from tests.support.postgres import PASSWORD, TestServer, session_store

ROOT = Path(__file__).resolve().parents[2]


def test_postgres_urls_are_told_from_sqlite_ones() -> None:
    assert is_postgres_url("postgresql://u@h/db")
    assert is_postgres_url("postgres://u@h/db")
    assert not is_postgres_url("sqlite:///home/u/.soong-agent/sessions.sqlite")
    with pytest.raises(ConfigError, match="postgresql://"):
        PostgresDatabase(PostgresSettings("sqlite:///x.sqlite"))


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://bob:hunter2-secret@db.example:5432/app",
        "postgresql://bob@db.example/app?password=hunter2-secret",
    ],
)
def test_a_password_in_the_url_is_refused_without_repeating_it(url: str) -> None:
    with pytest.raises(ConfigError) as refused:
        PostgresDatabase(PostgresSettings(url, password_env="APP_DB_PASSWORD"))
    message = str(refused.value)
    assert "hunter2-secret" not in message
    assert "[storage] url" in message
    assert "[storage] password_env" in message


def test_the_password_comes_from_the_named_variable() -> None:
    settings = PostgresSettings("postgresql://bob@db.example/app", password_env="APP_DB_PW")
    with pytest.raises(MissingSecretError, match="APP_DB_PW"):
        conninfo(settings, {})
    info = conninfo(settings, {"APP_DB_PW": "s3cret"})
    assert "password=s3cret" in info
    assert "application_name=soong-agent" in info
    assert "sslmode" not in info
    kept = conninfo(PostgresSettings("postgresql://bob@h/app?sslmode=require&connect_timeout=3"))
    assert "sslmode=require" in kept
    assert "connect_timeout=3" in kept


@pytest.mark.parametrize(
    ("field", "value"),
    [("pool_size", 0), ("statement_timeout_ms", -1), ("connect_timeout_s", 0)],
)
def test_bad_settings_are_refused(field: str, value: int) -> None:
    with pytest.raises(ConfigError, match=str(value)):
        PostgresSettings("postgresql://h/db", **{field: value})  # type: ignore[arg-type]


async def _first_use_error(url: str, **settings: object) -> str:
    store = session_store(url, **settings)
    try:
        with pytest.raises(UsageError) as failed:
            await store.get_session("s1")
    finally:
        await store.close()
    message = str(failed.value)
    assert "\n" not in message
    return message


async def test_a_refused_connection_is_said_in_one_line_naming_the_server() -> None:
    message = await _first_use_error("postgresql://bob@127.0.0.1:1/app")
    assert "127.0.0.1:1" in message
    assert "'app'" in message
    assert "connection refused" in message


async def test_a_missing_database_is_said_in_one_line(postgres_server: TestServer) -> None:
    message = await _first_use_error(postgres_server.url("no_such_db"))
    assert "'no_such_db'" in message
    assert "does not exist" in message


async def test_bad_credentials_are_said_without_the_password(
    postgres_server: TestServer, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    role = postgres_server.password_role()
    dbname = str(conninfo_to_dict(postgres_url)["dbname"])
    with postgres_server.admin() as conn:
        conn.execute(f"GRANT ALL ON DATABASE {dbname} TO {role}")
    url = postgres_server.url(dbname, user=role)
    monkeypatch.setenv("SOONG_TEST_PG_PASSWORD", "wrong-" + PASSWORD)
    message = await _first_use_error(url, password_env="SOONG_TEST_PG_PASSWORD")
    assert f"credentials of user {role!r}" in message
    assert "$SOONG_TEST_PG_PASSWORD" in message
    assert PASSWORD not in message
    monkeypatch.setenv("SOONG_TEST_PG_PASSWORD", PASSWORD)  # the right one lets it in
    store = session_store(url, password_env="SOONG_TEST_PG_PASSWORD")
    try:
        assert await store.list_sessions() == []
    finally:
        await store.close()


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_importing_the_family_imports_no_driver() -> None:
    done = _python(
        "import json, sys\n"
        "import soong_agent.adapters.postgres\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('psycopg'))))\n"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_a_missing_driver_says_what_to_install() -> None:
    done = _python(
        "import sys\n"
        "sys.modules['psycopg'] = None  # not installed\n"
        "from soong_agent.adapters.postgres import PostgresDatabase, PostgresSettings\n"
        "from soong_agent.ports.errors import ConfigError\n"
        "try:\n"
        "    PostgresDatabase(PostgresSettings('postgresql://u@h/db'))\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'soong-agent[postgres]'" in done.stdout
