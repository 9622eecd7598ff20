"""`tools.disabled` and `tools.overrides` (TOOL-3): applied to every tool, built-in or not."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable
from typing import Any

from soong_agent.application.tools.base import Tool
from soong_agent.domain.config.schema import ToolsConfig


def effective_timeout_ms(name: str, own_ms: int | None, config: ToolsConfig) -> int:
    """The timeout a tool that takes one uses: `tools.overrides[name].timeout_ms`, else the
    tool's own, else `tools.default_timeout_ms`; never more than `tools.max_timeout_ms`."""
    override = config.overrides.get(name)
    chosen = (override.timeout_ms if override is not None else None) or own_ms
    return min(chosen or config.default_timeout_ms, config.max_timeout_ms)


ADDED_LATER: frozenset[str] = frozenset(
    {
        "compact",  # every run's own (the assembler adds it)
        "tool_search",  # when a run defers tools
        "dispatch_worker",  # orchestrator runs
        "spawn_teammate",  # orchestrator runs with a team: the lead's tools …
        "send_message",  # … (and every teammate's)
        "team_status",
        "team_wait",
        "review_worktree",
        "accept_worktree",
        "reject_worktree",
    }
)
"""Tools some runs get after the catalog is built: `tools.disabled` / `tools.overrides` may
name them (they are applied where each is added, through `apply_tool_config`), so naming
one is no mistake. None of them takes a timeout."""


def _unknown(key: str, name: str, known: Iterable[str]) -> str:
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f" (tools: {', '.join(names) or 'none'})"
    return f"{key}: no tool is named {name!r}{hint}"


def apply_tool_config(
    tools: list[Tool], config: ToolsConfig, *, added_later: Iterable[str] = ADDED_LATER
) -> tuple[list[Tool], list[str]]:
    """The tools left after `tools.disabled`, with `tools.overrides` applied, and warnings.

    An override replaces the description and the permission class. Its `timeout_ms` is used by
    the tools that take a timeout when they are built (`effective_timeout_ms`); for a tool that
    takes none it is reported and ignored. Names that match neither a tool of `tools` nor one
    of `added_later` (tools that runs get later, `ADDED_LATER`) are reported as warnings (one
    line each, naming the config key); they never stop anything.

    Tools added to a run later go through this function too, where they are added; their
    warnings are dropped there (the catalog's call reported the names already).
    """
    present = {t.name for t in tools}
    later = set(added_later) - present
    known = present | later
    warnings = [
        _unknown("tools.disabled", name, known) for name in config.disabled if name not in known
    ]
    warnings.extend(
        f"tools.overrides.{name}.timeout_ms: {name} takes no timeout; ignored"
        for name, override in config.overrides.items()
        if name in later and override.timeout_ms is not None
    )
    disabled = set(config.disabled)
    kept: list[Tool] = []
    for tool in tools:
        if tool.name in disabled:
            continue
        override = config.overrides.get(tool.name)
        if override is None:
            kept.append(tool)
            continue
        changes: dict[str, Any] = {}
        if override.description is not None:
            changes["description"] = override.description
        if override.permission_class is not None:
            changes["permission_class"] = override.permission_class
        if override.timeout_ms is not None and tool.timeout_ms is None:
            warnings.append(
                f"tools.overrides.{tool.name}.timeout_ms: {tool.name} takes no timeout; ignored"
            )
        kept.append(dataclasses.replace(tool, **changes) if changes else tool)
    warnings.extend(
        _unknown(f"tools.overrides.{name}", name, known)
        for name in config.overrides
        if name not in known
    )
    return kept, warnings
