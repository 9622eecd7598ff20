"""Session storage in SQLite (CTX-1), via sqlmodel tables and SQLAlchemy Core.

Importing this package is cheap: sqlalchemy/sqlmodel load on the store's first database call.
"""

from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore

__all__ = ["SqliteSessionStore"]
