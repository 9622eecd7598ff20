"""Reaching PostgreSQL: a URL plus a password from the environment made into a libpq connection
string, one connection or a pool of them, and a failure to connect said in one line.

The URL never holds the password (a config file is not a place for one): it comes from the
environment variable the settings name (`password_env`), or from libpq's own sources
(``PGPASSWORD``, ``~/.pgpass``). Every other libpq parameter (``sslmode``,
``host=/socket/dir``, ...) passes through from the URL's query. Messages name the host, port,
database and user, never the password.

psycopg is imported inside the functions that need it (see `driver`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from soong_agent.adapters.postgres.driver import require_driver
from soong_agent.ports.errors import ConfigError, MissingSecretError, UsageError

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow
    from psycopg_pool import AsyncConnectionPool

SCHEMES = ("postgresql://", "postgres://")
APPLICATION_NAME = "soong-agent"
URL_KEY = "[storage] url"
PASSWORD_KEY = "[storage] password_env"


def is_postgres_url(url: str) -> bool:
    """Whether `url` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return url.strip().lower().startswith(SCHEMES)


@dataclass(frozen=True, slots=True)
class PostgresSettings:
    """How to reach the database and how to use it.

    Attributes:
        url: ``postgresql://user@host:port/db?sslmode=...``, without a password.
        password_env: the environment variable holding the password (None: libpq's own
            sources, or none at all).
        pool_size: the most connections the pool opens (one more is used for the locks of
            the runs and sessions a store holds).
        statement_timeout_ms: the longest a statement may run (0: no limit).
        connect_timeout_s: the longest a connection attempt may take.
    """

    url: str
    password_env: str | None = None
    pool_size: int = 5
    statement_timeout_ms: int = 30_000
    connect_timeout_s: int = 10

    def __post_init__(self) -> None:
        if self.pool_size < 1:
            raise ConfigError(f"the storage pool size must be at least 1, not {self.pool_size}")
        if self.statement_timeout_ms < 0:
            raise ConfigError(
                f"the statement timeout must not be negative, not {self.statement_timeout_ms}"
            )
        if self.connect_timeout_s < 1:
            raise ConfigError(
                f"the connect timeout must be at least 1 s, not {self.connect_timeout_s}"
            )


def url_params(url: str) -> dict[str, str]:
    """The libpq parameters of `url`; `ConfigError` for a URL that is not a PostgreSQL one,
    cannot be read, or holds a password (the message never repeats the URL's password)."""
    if not is_postgres_url(url):
        raise ConfigError(f"{URL_KEY} must start with postgresql:// to use PostgreSQL")
    require_driver()
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(url.strip())
    except ProgrammingError as exc:
        raise ConfigError(f"{URL_KEY} is not a PostgreSQL URL libpq can read: {exc}") from None
    if params.get("password"):
        raise ConfigError(
            f"{URL_KEY} holds a password: remove it from the URL, put it in an environment"
            f" variable and name that variable in {PASSWORD_KEY}"
        )
    params.pop("password", None)
    return {k: str(v) for k, v in params.items() if v is not None}


def describe(params: Mapping[str, str]) -> str:
    """The database `params` reach, for messages: host, port, database and user."""
    host = params.get("host") or params.get("hostaddr") or "the default socket"
    if host.startswith("/"):
        host = f"socket {host}"
    port = params.get("port")
    place = f"{host}:{port}" if port and not host.startswith(("socket", "the default")) else host
    user = params.get("user")
    dbname = params.get("dbname") or user
    what = f"PostgreSQL database {dbname!r}" if dbname else "PostgreSQL"
    return f"{what} on {place}" + (f" (user {user})" if user else "")


def conninfo(settings: PostgresSettings, environ: Mapping[str, str] | None = None) -> str:
    """The libpq connection string for `settings`, the password read from `password_env`."""
    params: dict[str, Any] = dict(url_params(settings.url))
    if settings.password_env:
        env = os.environ if environ is None else environ
        password = env.get(settings.password_env)
        if password is None:
            raise MissingSecretError(
                var=settings.password_env, user="the PostgreSQL storage", source=PASSWORD_KEY
            )
        params["password"] = password
    params.setdefault("application_name", APPLICATION_NAME)
    params.setdefault("connect_timeout", str(settings.connect_timeout_s))
    from psycopg.conninfo import make_conninfo

    return make_conninfo(**params)


# --- failures to connect --------------------------------------------------------------------------

_SERVER_SAYS = re.compile(r"(?:FATAL|ERROR):\s+(.*)")


def _server_line(text: str) -> str:
    """The part of a libpq failure that says what went wrong, on one line."""
    for line in text.splitlines():
        found = _SERVER_SAYS.search(line)
        if found:
            return found.group(1).strip()
    first = text.strip().splitlines()[0] if text.strip() else "unknown failure"
    return re.sub(r"^connection failed:\s*", "", first).strip()


def connection_error(exc: BaseException, settings: PostgresSettings) -> UsageError:
    """A one-line `UsageError` for a failure to connect: refused, bad credentials, no such
    database, unknown host, no answer; each names where (never the password)."""
    params = _safe_params(settings)
    where = describe(params)
    text = str(exc)
    lower = text.lower()
    said = _server_line(text)
    user = params.get("user", "")
    if "password authentication failed" in lower or "no password supplied" in lower:
        hint = (
            f"check the user and the password in ${settings.password_env}"
            if settings.password_env
            else f"name the variable that holds the password in {PASSWORD_KEY}"
        )
        message = f"{where} refused the credentials of user {user!r} ({hint})"
    elif "role" in lower and "does not exist" in lower:
        message = f"{where} refused the credentials: {said}"
    elif "database" in lower and "does not exist" in lower:
        dbname = params.get("dbname") or user
        message = f"{where} does not exist: create the database {dbname!r} first ({said})"
    elif "connection refused" in lower or "no such file or directory" in lower:
        message = (
            f"cannot connect to {where}: connection refused (is the server running and"
            " accepting connections there?)"
        )
    elif "timeout expired" in lower or "timed out" in lower:
        message = f"cannot connect to {where}: no answer within {settings.connect_timeout_s} s"
    elif "resolve host" in lower or "translate host name" in lower:
        message = f"cannot connect to {where}: unknown host"
    else:
        message = f"cannot connect to {where}: {said}"
    return UsageError(message)


def _safe_params(settings: PostgresSettings) -> dict[str, str]:
    try:
        return url_params(settings.url)
    except ConfigError:
        return {}


# --- connections ----------------------------------------------------------------------------------


CONFIGURE = (
    "SELECT set_config('statement_timeout', %(ms)s, false),"
    " set_config('idle_in_transaction_session_timeout', %(ms)s, false)"
)
"""Settings every connection gets when it is opened: the statement timeout, and the same limit
on a transaction left open by a client that stopped answering (a frozen process): the server
ends such a session, so its row locks cannot hold up another worker's takeover for ever."""


async def configure(conn: AsyncConnection[Any], settings: PostgresSettings) -> None:
    """Give a connection just opened the `CONFIGURE` settings."""
    await conn.execute(CONFIGURE, {"ms": str(settings.statement_timeout_ms)})


async def connect(settings: PostgresSettings, info: str) -> AsyncConnection[TupleRow]:
    """One autocommit connection of its own (not from a pool), configured; a failure to
    connect raises `connection_error`'s `UsageError`."""
    import psycopg

    try:
        conn = await psycopg.AsyncConnection.connect(info, autocommit=True)
    except psycopg.OperationalError as exc:
        raise connection_error(exc, settings) from None
    try:
        await configure(conn, settings)
    except BaseException:
        await conn.close()
        raise
    return conn


async def open_pool(
    settings: PostgresSettings, info: str
) -> AsyncConnectionPool[AsyncConnection[TupleRow]]:
    """An open pool of autocommit connections (at most `pool_size`, statement timeout set).

    One connection is made first on its own, so that a server that cannot be reached is said
    plainly (a pool only says that it timed out)."""
    from psycopg_pool import AsyncConnectionPool, PoolTimeout

    probe = await connect(settings, info)
    await probe.close()

    async def setup(conn: AsyncConnection[Any]) -> None:
        await configure(conn, settings)

    pool: AsyncConnectionPool[AsyncConnection[TupleRow]] = AsyncConnectionPool(
        info,
        min_size=1,
        max_size=settings.pool_size,
        kwargs={"autocommit": True},
        configure=setup,
        open=False,
        name=APPLICATION_NAME,
        timeout=pool_timeout(settings),
    )
    try:
        await pool.open(wait=True, timeout=float(settings.connect_timeout_s))
    except PoolTimeout as exc:
        await pool.close()
        raise connection_error(exc, settings) from None
    except BaseException:
        await pool.close()
        raise
    return pool


def pool_timeout(settings: PostgresSettings) -> float:
    """How long a call waits for a pooled connection to come free."""
    return settings.connect_timeout_s + settings.statement_timeout_ms / 1000


def server_version(conn: AsyncConnection[Any]) -> str:
    """The server's version as it says it (``18.6``)."""
    return conn.info.parameter_status("server_version") or str(conn.info.server_version)
