"""`soong-agent storage status|migrate|copy` (STORE-2): the store `[storage]` names, for
operators.

- `status` prints the store (its URL or file; a password is never in either) and, for
  PostgreSQL, the server's version and the schema's (the database's against this code's:
  current, needs migrate, or newer and refused); for SQLite, the file and whether it is there.
  It creates nothing. A database that cannot be reached is one line on stderr, exit 2.
- `migrate` brings a PostgreSQL schema to this code's version (SQLite migrates itself when it
  is opened: nothing to do).
- `copy --from URL [--to URL]` copies every session and artifact of one store into a PostgreSQL
  one (`adapters.storage_copy`); run it again to resume: what the target holds is skipped.

`config check` prints the same one-line view of the store (`storage_line`).
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from soong_agent.entrypoints.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, fail, guarded
from soong_agent.ports.errors import SoongAgentError, UsageError

if TYPE_CHECKING:
    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.adapters.postgres import PostgresSettings, SchemaStatus
    from soong_agent.adapters.storage_copy import CopySource
    from soong_agent.domain.config.storage_section import StorageTarget


# --- what the store is ----------------------------------------------------------------------------


def _settings(target: StorageTarget) -> PostgresSettings:
    from soong_agent.adapters.postgres import PostgresSettings

    return PostgresSettings(
        target.postgres_url or "",
        password_env=target.password_env,
        pool_size=target.pool_size,
        statement_timeout_ms=target.statement_timeout_ms,
    )


async def _postgres_status(settings: PostgresSettings) -> SchemaStatus:
    """The server's and the schema's versions; creates nothing."""
    from soong_agent.adapters.postgres import PostgresDatabase, schema_status

    database = PostgresDatabase(settings)
    try:
        return await schema_status(await database.pool())
    finally:
        await database.close()


def _schema_words(status: SchemaStatus) -> str:
    found, known = status.db_version, status.code_version
    if found == known:
        return f"schema v{found} (current)"
    if found == 0:
        return f"no schema yet (needs migrate to v{known}; the first write makes it too)"
    if found < known:
        return f"schema v{found}, this soong-agent's is v{known} (needs migrate)"
    return f"schema v{found}, newer than this soong-agent's v{known} (refused)"


def _newer(status: SchemaStatus, label: str) -> str | None:
    if status.db_version <= status.code_version:
        return None
    return (
        f"{label} holds storage schema v{status.db_version}, newer than this soong-agent knows"
        f" (v{status.code_version}): upgrade soong-agent to use it"
    )


def _sqlite_words(path: Path) -> tuple[str, str | None]:
    """The SQLite file's state, and a problem when this code cannot use it."""
    from soong_agent.adapters.storage.export import sqlite_schema_version
    from soong_agent.adapters.storage.sql import SCHEMA_VERSION

    if path.is_dir():
        return "a directory, not a file", f"the session database path {path} is a directory"
    version = sqlite_schema_version(path)
    if version is None:
        return "not there yet (made at the first write)", None
    if version == SCHEMA_VERSION:
        return f"exists, schema v{version} (current)", None
    if version < SCHEMA_VERSION:
        return f"exists, schema v{version} (migrated to v{SCHEMA_VERSION} when next opened)", None
    return (
        f"exists, schema v{version}, newer than this soong-agent's v{SCHEMA_VERSION} (refused)",
        f"the session database {path} has schema version {version}, newer than this"
        f" soong-agent understands ({SCHEMA_VERSION})",
    )


def storage_line(loaded: LoadedConfig) -> tuple[str, str | None]:
    """`storage: <where> — <state>` for `config check`, and the problem if the store cannot be
    used (an unreachable database, bad credentials, a newer schema); creates nothing."""
    from soong_agent.entrypoints.factories.stores import storage_target

    target = storage_target(loaded)
    if target.kind == "sqlite":
        words, problem = _sqlite_words(Path(target.sqlite_path))
        return f"storage: SQLite file {target.sqlite_path} — {words}", problem
    try:
        status = asyncio.run(_postgres_status(_settings(target)))
    except SoongAgentError as exc:
        return f"storage: {target.label} — unusable", f"storage: {exc}"
    line = f"storage: {target.label} — PostgreSQL {status.server_version}, {_schema_words(status)}"
    return line, _newer(status, target.label)


# --- status and migrate ---------------------------------------------------------------------------


def _load(path: str | None) -> LoadedConfig:
    from soong_agent.entrypoints.sdk import load

    return load(path, None)


def storage_status(path: str | None) -> int:
    def go() -> int:
        from soong_agent.entrypoints.factories.stores import storage_target

        target = storage_target(_load(path))
        if target.kind == "sqlite":
            words, problem = _sqlite_words(Path(target.sqlite_path))
            sys.stdout.write(f"storage: {target.sqlite_path} (SQLite)\nfile:    {words}\n")
            return fail(problem, EXIT_USAGE) if problem else EXIT_OK
        status = asyncio.run(_postgres_status(_settings(target)))
        sys.stdout.write(
            f"storage: {target.label} (PostgreSQL)\n"
            f"server:  PostgreSQL {status.server_version}\n"
            f"schema:  {_schema_words(status)}\n"
        )
        problem = _newer(status, target.label)
        return fail(problem, EXIT_USAGE) if problem else EXIT_OK

    return guarded(go)


async def _migrate(settings: PostgresSettings) -> tuple[int, int]:
    from soong_agent.adapters.postgres import PostgresDatabase, migrate, schema_status

    database = PostgresDatabase(settings)
    try:
        pool = await database.pool()
        before = (await schema_status(pool)).db_version
        return before, await migrate(pool)
    finally:
        await database.close()


def storage_migrate(path: str | None) -> int:
    def go() -> int:
        from soong_agent.entrypoints.factories.stores import storage_target

        target = storage_target(_load(path))
        if target.kind == "sqlite":
            sys.stdout.write(
                f"storage: {target.sqlite_path} (SQLite): nothing to migrate (a SQLite file"
                " is brought to this soong-agent's schema when it is opened)\n"
            )
            return EXIT_OK
        before, after = asyncio.run(_migrate(_settings(target)))
        sys.stdout.write(f"storage: {target.label} (PostgreSQL)\n")
        if before == after:
            sys.stdout.write(f"schema:  v{after} already (current); nothing to do\n")
        else:
            sys.stdout.write(f"schema:  migrated v{before} → v{after}\n")
        return EXIT_OK

    return guarded(go)


# --- copy -----------------------------------------------------------------------------------------


def _parse_url(url: str, flag: str) -> StorageTarget:
    """`sqlite:///<path>` or `postgresql://…`; `UsageError` naming `flag` otherwise (the
    message never repeats the URL: it might hold a password)."""
    from pydantic import ValidationError

    from soong_agent.domain.config.storage_section import StorageConfig, storage_target

    try:
        config = StorageConfig(url=url)
    except ValidationError as exc:
        said = str(exc.errors()[0].get("msg", "not a storage URL")).removeprefix("Value error, ")
        if "password" in said:
            said = (
                f"the URL holds a password: put it in a variable and name it in {flag}-password-env"
            )
        raise UsageError(f"{flag}: {said}") from None
    return storage_target(config, "")


def _copy_target(loaded: LoadedConfig, to: str | None, password_env: str | None) -> StorageTarget:
    from soong_agent.entrypoints.factories.stores import storage_target

    configured = storage_target(loaded)
    target = _parse_url(to, "--to") if to is not None else configured
    if target.kind != "postgresql":
        where = "--to" if to is not None else f"[storage] of {loaded.path} (no --to given)"
        raise UsageError(
            f"{where} names a SQLite file; storage copy writes into PostgreSQL only:"
            " give --to postgresql://…"
        )
    same = to is None or target.postgres_url == configured.postgres_url
    return replace(
        target,
        password_env=password_env or (configured.password_env if same else None),
        pool_size=configured.pool_size,
        statement_timeout_ms=configured.statement_timeout_ms,
    )


def _source(
    loaded: LoadedConfig, parsed: StorageTarget, password_env: str | None, home: str | None
) -> CopySource:
    """The store `--from` names, opened for reading (nothing made yet)."""
    from soong_agent.entrypoints.factories.stores import storage_target

    if parsed.kind == "postgresql":
        from soong_agent.adapters.postgres import PostgresDatabase
        from soong_agent.adapters.postgres.export import PostgresExport

        settings = _settings(replace(parsed, password_env=password_env))
        return PostgresExport(PostgresDatabase(settings))
    from soong_agent.adapters.storage.export import SqliteExport

    file = Path(parsed.sqlite_path)
    if not file.is_file():
        raise UsageError(f"--from: there is no SQLite session database at {file}")
    if home is not None:
        folder = Path(home).expanduser()
    elif file.resolve() == Path(storage_target(loaded).sqlite_path).resolve():
        folder = loaded.home  # the configured file: its artifacts are under the home
    else:
        folder = file.parent
    return SqliteExport(file, folder)


def _same_database(a: StorageTarget, b: StorageTarget) -> bool:
    from soong_agent.adapters.postgres.connect import url_params

    if a.kind != "postgresql" or b.kind != "postgresql":
        return False
    keys = ("host", "hostaddr", "port", "dbname")
    first, second = url_params(a.postgres_url or ""), url_params(b.postgres_url or "")
    return all(first.get(k) == second.get(k) for k in keys)


async def _copy(source: CopySource, settings: PostgresSettings) -> list[str]:
    from soong_agent.adapters.postgres import (
        PostgresArtifactStore,
        PostgresDatabase,
        PostgresSessionStore,
    )
    from soong_agent.adapters.storage_copy import copy_store

    try:
        database = PostgresDatabase(settings)
        sessions = PostgresSessionStore(database)
        artifacts = PostgresArtifactStore(database)
        try:
            report = await copy_store(source, sessions, artifacts)
        finally:
            await sessions.close()
            await artifacts.close()
    finally:
        await source.close()
    return [report.summary(), *report.lost_artifacts]


def storage_copy(
    *,
    source_url: str,
    target_url: str | None,
    from_password_env: str | None,
    to_password_env: str | None,
    from_home: str | None,
    path: str | None,
) -> int:
    def go() -> int:
        loaded = _load(path)
        target = _copy_target(loaded, target_url, to_password_env)
        parsed = _parse_url(source_url, "--from")
        if _same_database(parsed, target):
            raise UsageError(f"--from and --to name the same database ({target.label})")
        source = _source(loaded, parsed, from_password_env, from_home)
        sys.stdout.write(f"from: {source.where}\nto:   {target.label}\n")
        sys.stdout.flush()
        summary, *lost = asyncio.run(_copy(source, _settings(target)))
        sys.stdout.write(summary + "\n")
        for line in lost:
            fail(f"artifact {line}: not copied", EXIT_FAILED)
        return EXIT_FAILED if lost else EXIT_OK

    return guarded(go)
