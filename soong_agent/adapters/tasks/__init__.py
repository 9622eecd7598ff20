"""The task WAL on disk (TASK-1): ``<wal_dir>/<session_id>/<name>.wal.jsonl``."""

from soong_agent.adapters.tasks.file_log import FileTaskLog

__all__ = ["FileTaskLog"]
