"""Task names, step ids and session ids as they may appear in a WAL path (TASK-1).

Names come from the model: the core only checks them. A name is a slug: lowercase ASCII letters,
digits and `-`, starting with a letter or digit, at most `MAX_NAME_LENGTH` characters; so it
never holds a separator, a dot or `..`. Session ids are the runtime's own (``ses_…``) and may
also hold `_`.
"""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 64
NAME_RULE = (
    f"lowercase letters, digits and '-', starting with a letter or digit, "
    f"at most {MAX_NAME_LENGTH} characters"
)
_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
_SESSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
WAL_SUFFIX = ".wal.jsonl"


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a task name or step id, or None when it can."""
    if not name:
        return "it is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"it is longer than {MAX_NAME_LENGTH} characters"
    if _NAME.fullmatch(name) is None:
        return f"it must be {NAME_RULE}"
    return None


def session_problem(session_id: str) -> str | None:
    """Why `session_id` cannot name a session folder, or None when it can."""
    if not session_id or len(session_id) > 128 or _SESSION.fullmatch(session_id) is None:
        return "a session id is letters, digits, '_' and '-' (at most 128)"
    return None
