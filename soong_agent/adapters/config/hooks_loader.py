"""Reads `${SOONG_AGENT_HOME}/hooks.json` (HOOK-1); a project's hooks.json is never read."""

from __future__ import annotations

import json
from pathlib import Path

from soong_agent.domain.hooks import HookSet, HooksFileError, parse_hooks
from soong_agent.ports.errors import ConfigError


def load_hooks(home: Path, *, enabled: bool = True) -> HookSet:
    """The hooks of `home/hooks.json`; none when it is absent or `hooks.enabled` is false.

    Raises ConfigError (one line naming the file, the entry and what was expected) for a file
    that is not valid JSON or not valid hooks.
    """
    if not enabled:
        return HookSet.empty()
    path = home / "hooks.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return HookSet.empty()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc
    try:
        return parse_hooks(raw)
    except HooksFileError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
