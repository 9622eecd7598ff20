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


def _unknown(key: str, name: str, known: Iterable[str]) -> str:
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f" (tools: {', '.join(names) or 'none'})"
    return f"{key}: no tool is named {name!r}{hint}"


def apply_tool_config(tools: list[Tool], config: ToolsConfig) -> tuple[list[Tool], list[str]]:
    """The tools left after `tools.disabled`, with `tools.overrides` applied, and warnings.

    An override replaces the description and the permission class. Its `timeout_ms` is used by
    the tools that take a timeout when they are built (`effective_timeout_ms`); for a tool that
    takes none it is reported and ignored. Names that match no tool are reported as warnings
    (one line each, naming the config key); they never stop anything.
    """
    known = {t.name for t in tools}
    warnings = [
        _unknown("tools.disabled", name, known) for name in config.disabled if name not in known
    ]
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
