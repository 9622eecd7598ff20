"""`[storage]` (STORE-1): where sessions, runs, messages, events and artifacts are kept — the
embedded SQLite file (the default) or a PostgreSQL database shared by many processes and hosts.
The Task WAL and the teams' mailboxes follow the same choice."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from soong_agent.domain.config.section import Section

StorageKind = Literal["sqlite", "postgresql"]

_SQLITE = "sqlite:///"


class StorageConfig(Section):
    """Which store keeps the state of sessions."""

    url: str | None = None
    """`sqlite:///<path>` or `postgresql://user@host:port/database?sslmode=…`; unset: the SQLite
    file `context.session_db_path`."""
    password_env: str | None = None
    """The name of the environment variable holding the PostgreSQL password (never the
    password itself)."""
    pool_size: int = Field(default=5, ge=1, le=100)
    """Connections a process keeps open to PostgreSQL."""
    statement_timeout_ms: int = Field(default=30_000, gt=0)
    """The longest one PostgreSQL statement may take."""

    @field_validator("url")
    @classmethod
    def _known_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        kind = storage_kind(url)
        if kind == "sqlite" and not url.removeprefix(_SQLITE):
            raise ValueError(f"a SQLite URL names its file: sqlite:///<path>, found {url!r}")
        if kind == "postgresql":
            parts = urlsplit(url)
            if parts.password is not None:
                raise ValueError(
                    "the URL holds a password; put it in an environment variable and name "
                    "that variable in storage.password_env"
                )
            if not parts.hostname and "host=" not in parts.query:
                raise ValueError(f"a PostgreSQL URL names its host, found {url!r}")
        return url

    @model_validator(mode="after")
    def _password_for_postgres_only(self) -> StorageConfig:
        if self.password_env is not None and storage_kind(self.url) != "postgresql":
            raise ValueError("storage.password_env is only for a postgresql:// url")
        return self


def storage_kind(url: str | None) -> StorageKind:
    """The kind of store `url` names (None: the default SQLite file); ValueError for any
    other scheme."""
    if url is None or url.startswith(_SQLITE):
        return "sqlite"
    scheme = url.split(":", 1)[0].lower()
    if scheme in ("postgresql", "postgres"):
        return "postgresql"
    raise ValueError(
        f"expected a sqlite:///<path> or postgresql://… URL, found {url.split('://')[0]!r}://…"
    )


@dataclass(frozen=True, slots=True)
class StorageTarget:
    """The store a runtime uses, resolved from `[storage]` and `context.session_db_path`."""

    kind: StorageKind
    sqlite_path: str
    """The SQLite file (the default store, and where a SQLite URL points)."""
    postgres_url: str | None = None
    password_env: str | None = None
    pool_size: int = 5
    statement_timeout_ms: int = 30_000

    @property
    def label(self) -> str:
        """The store as shown to people: a file's path, or the URL (no password in it)."""
        return self.sqlite_path if self.kind == "sqlite" else (self.postgres_url or "")


def storage_target(storage: StorageConfig, session_db_path: str) -> StorageTarget:
    """Where the state lives (placeholders already expanded)."""
    url = storage.url
    if storage_kind(url) == "sqlite":
        path = url.removeprefix(_SQLITE) if url is not None else session_db_path
        if url is not None and not path.startswith("/"):
            path = "/" + path  # sqlite:////abs and sqlite:///abs both name /abs
        return StorageTarget("sqlite", path)
    return StorageTarget(
        "postgresql",
        session_db_path,
        postgres_url=url,
        password_env=storage.password_env,
        pool_size=storage.pool_size,
        statement_timeout_ms=storage.statement_timeout_ms,
    )


class WorkersConfig(Section):
    """How `soong-agent worker` holds queued runs and waits for approvals (WORK-2, WORK-3)."""

    heartbeat_ms: int = Field(default=5_000, gt=0)
    """How often a worker renews the lease of each run it holds."""
    lease_timeout_ms: int = Field(default=30_000, gt=0)
    """A lease not renewed for this long is taken over by another worker."""
    max_attempts: int = Field(default=3, ge=1)
    """How many times a run is claimed (takeovers included) before it fails."""
    approval_timeout_ms: int | None = Field(default=None, gt=0)
    """How long a worker's run waits for an answer to a pending approval before it is denied
    (unset: it waits)."""

    @model_validator(mode="after")
    def _heartbeat_within_lease(self) -> WorkersConfig:
        if self.heartbeat_ms >= self.lease_timeout_ms:
            raise ValueError(
                f"workers.heartbeat_ms ({self.heartbeat_ms}) must be shorter than "
                f"workers.lease_timeout_ms ({self.lease_timeout_ms}): a lease would end "
                "before it is renewed"
            )
        return self
