"""What an agent definition allows its runs (AGT-1): the tools it names (a ceiling, never a
grant) and a permission mode that can only tighten the configured one."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from typing import cast

from soong_agent.domain.permissions.decision import PermissionMode
from soong_agent.ports.agents import AgentDefinition

_GLOB_CHARS = frozenset("*?[")


def is_pattern(entry: str) -> bool:
    """Whether a `tools` entry is an fnmatch pattern rather than one tool's name."""
    return bool(_GLOB_CHARS & set(entry))


def allowed_tools(
    definition: AgentDefinition,
    available_names: Sequence[str],
    disabled: Iterable[str],
    *,
    warnings: list[str] | None = None,
) -> list[str]:
    """The tools a run of `definition` gets: those of `available_names` (in that order) that
    its `tools` name or match, less those `disabled` names or matches (`tools.disabled`).

    The definition is a ceiling: it never grants a disabled tool nor one the run lacks. A plain
    name it lists that is not available (or is disabled) is ignored; when `warnings` is given,
    one line per such name is appended to it (a pattern that matches nothing is no mistake:
    `mcp__*` without MCP servers).
    """
    off = list(disabled)

    def listed(name: str, entries: Iterable[str]) -> bool:
        return any(name == e or (is_pattern(e) and fnmatch.fnmatchcase(name, e)) for e in entries)

    if warnings is not None:
        known = set(available_names)
        for entry in definition.tools:
            if is_pattern(entry) or (entry in known and not listed(entry, off)):
                continue
            why = "is disabled (tools.disabled)" if listed(entry, off) else "does not exist"
            warnings.append(
                f"agent {definition.id!r} ({definition.source}): tool {entry!r} {why}; ignored"
            )
    return [
        name for name in available_names if listed(name, definition.tools) and not listed(name, off)
    ]


def tool_listed(name: str, entries: Iterable[str]) -> bool:
    """Whether `entries` (tool names and fnmatch patterns) name or match the tool `name`."""
    return any(name == e or (is_pattern(e) and fnmatch.fnmatchcase(name, e)) for e in entries)


_MODE_STRICTNESS: dict[str, int] = {"bypass": 0, "accept_edits": 1, "default": 2, "plan": 3}


def stricter_mode(configured: PermissionMode, definition: str | None) -> PermissionMode:
    """The permission mode a child of a definition runs in: the definition's
    `permission_mode` when it is at least as strict as the configured `permissions.mode`,
    else the configured one (a definition can tighten permissions, never loosen them)."""
    if definition is None or definition not in _MODE_STRICTNESS:
        return configured
    if _MODE_STRICTNESS[definition] <= _MODE_STRICTNESS[configured]:
        return configured
    return cast(PermissionMode, definition)
