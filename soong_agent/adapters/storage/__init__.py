"""Session storage in SQLite (CTX-1): plain `sqlite3` at run time, the schema declared in sqlmodel.

Importing this package is cheap, and so is opening an existing database: sqlalchemy/sqlmodel load
only when a database has to be created (`tables.py`).
"""

from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore

__all__ = ["SqliteSessionStore"]
