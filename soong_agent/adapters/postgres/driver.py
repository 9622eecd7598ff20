"""The PostgreSQL driver (psycopg 3 and its pool), imported only when a postgresql URL is used.

soong-agent installs without it (SQLite is the default); `require_driver` turns its absence
into a `ConfigError` that says what to install, at the start, not in the middle of a run.
"""

from __future__ import annotations

from soong_agent.ports.errors import ConfigError

INSTALL_HINT = "pip install 'soong-agent[postgres]'"


def require_driver() -> None:
    """Import psycopg and psycopg_pool, or raise `ConfigError` naming the extra to install."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "a postgresql:// storage URL needs the PostgreSQL driver (psycopg 3 and"
            f" psycopg-pool), which is not installed: {INSTALL_HINT} ({exc})"
        ) from exc
