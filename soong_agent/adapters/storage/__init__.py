"""Session storage in SQLite (CTX-1): plain `sqlite3` at run time, the schema declared in sqlmodel.

Importing this package is cheap, and so are opening and creating a database: the stores run
pinned SQL (`sql.py`), which tests keep equal to what sqlalchemy compiles from `tables.py`.
"""

from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore

__all__ = ["SqliteSessionStore"]
