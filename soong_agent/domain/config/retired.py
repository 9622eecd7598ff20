"""Keys that are not settings, and why: what a config error says instead of "unknown key".

A key here was listed by a design note but would do nothing (or nothing different), so it is
refused rather than accepted and ignored (CFG-5, issue 31): a user who sets it learns at start
where the setting lives or why there is none. A key whose only accepted value is its default
(`context.active_path_only = true`) stays in the schema; `FIXED_VALUE_REASONS` says why no
other value is accepted.
"""

from __future__ import annotations

_TASK_KEY = (
    "not a key of [context]: the task board's settings live in [task]; write "
    "`{key} = …` under [task] instead"
)

RETIRED_KEYS: dict[str, str] = {
    "context.task_board_token_budget": _TASK_KEY.format(key="task_board_token_budget"),
    "context.task_recent_changes_limit": _TASK_KEY.format(key="task_recent_changes_limit"),
    "context.task_recent_changes_window_minutes": _TASK_KEY.format(
        key="task_recent_changes_window_minutes"
    ),
    "agents.default_fork_agent_definition": (
        "not a setting: a fork (`fork_agent`) always keeps its parent's system prompt and "
        "tools, so the provider's prompt cache still hits; no agent definition shapes it. "
        "Remove the key (`agents.default_sub_agent_definition` chooses the definition of "
        "`create_sub_agent`)"
    ),
}
"""Key path → why it is refused (the message after `<file>: <key>: `)."""

FIXED_VALUE_REASONS: dict[str, str] = {
    "context.active_path_only": (
        "only the active branch of a session (root to the current message) is ever sent to "
        "the model; the other branches stay in the session store"
    ),
    "context.allow_branch_from": "a session branches only from one of its user messages",
    "context.branch_summary": "summaries of abandoned branches are not supported",
    "permissions.remember_scope": (
        '"allow for session" answers last for the session, in memory, and are never saved'
    ),
}
"""Key path → why its default is the only value accepted (added to the type error)."""
