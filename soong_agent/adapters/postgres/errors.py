"""Database failures said in one line: the caller's mistakes as `UsageError`, the rest as
`RunError`; a lost connection told apart, so that it can be retried once.

A message names what was being done and where, and the server's primary message (which names
a constraint, never a row's content).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from soong_agent.ports.errors import RunError, SoongAgentError, UsageError

if TYPE_CHECKING:
    import psycopg

_LOST_STATES = ("57P01", "57P02", "57P03")
"""admin_shutdown (`pg_terminate_backend`, a fast shutdown), crash_shutdown, cannot_connect_now."""


def primary(exc: BaseException) -> str:
    """The server's (or the driver's) message of `exc`, on one line."""
    diag = getattr(exc, "diag", None)
    said = getattr(diag, "message_primary", None) if diag is not None else None
    text = said or str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


def is_lost(exc: BaseException, conn: Any = None) -> bool:
    """Whether `exc` says the connection went away (the server ended it, the network broke):
    the work may be tried again on a new connection."""
    import psycopg
    from psycopg_pool import PoolTimeout

    if isinstance(exc, PoolTimeout) or not isinstance(exc, psycopg.OperationalError):
        return False
    if conn is not None and (conn.closed or conn.broken):
        return True
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _LOST_STATES


def database_error(exc: psycopg.Error, *, what: str, where: str) -> SoongAgentError:
    """`exc`, raised while doing `what` in `where`, as the error the caller gets."""
    import psycopg

    said = primary(exc)
    constraint = getattr(exc.diag, "constraint_name", None)
    if constraint:
        said += f" ({constraint})"
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return RunError(f"cannot {what} in {where}: it took longer than the statement timeout")
    if isinstance(
        exc, psycopg.IntegrityError | psycopg.DataError | psycopg.errors.InsufficientPrivilege
    ):
        return UsageError(f"cannot {what} in {where}: {said}")
    return RunError(f"cannot {what} in {where}: {said}")
