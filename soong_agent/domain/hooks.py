"""Hooks (HOOK-1): the `hooks.json` schema, what each hook type receives, and what it may decide.

`${SOONG_AGENT_HOME}/hooks.json` (never a project's) lists commands per hook type:
``{"hooks": {"pre_tool_use": [{"command": "…", "timeout": 30, "async": false,
"matcher": "write_.*"}]}}``. A command gets the event's data as environment variables (each
type's own, plus PROJECT_ROOT, PLATFORM, ARCH, CWD) and as one JSON object on stdin; its exit
code and (when it is a JSON object) its stdout decide, for the types that may decide:

- `pre_sampling`: any non-zero exit blocks the model call and ends the run;
- `pre_tool_use`: exit 2 or ``{"decision": "block", "reason": …}`` blocks the call (the model
  gets the reason as the result); ``{"updated_input": {…}}`` replaces the arguments (validated
  and permission-checked again);
- `permission_request`: ``{"decision": "allow" | "deny"}`` answers without asking the user;
- `stop`: a non-zero exit makes the agent go on, with the hook's stdout as a reminder.

Every other outcome of every hook is ignored (fail-open): a crash, a timeout or garbage on
stdout never takes a run down.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from soong_agent.ports.defaults import no_entries

HookType = Literal[
    "pre_sampling",
    "post_sampling",
    "pre_tool_use",
    "post_tool_use",
    "post_tool_use_failure",
    "session_start",
    "session_end",
    "permission_request",
    "permission_denied",
    "stop",
    "notification",
    "task_created",
    "task_completed",
    "pre_compact",
    "subagent_stop",
]
HOOK_TYPES: tuple[HookType, ...] = get_args(HookType)
ALIASES: dict[str, HookType] = {
    "pre_model_request": "pre_sampling",
    "post_model_response": "post_sampling",
}
NOT_HOOK_TYPES: dict[str, str] = {
    "config_change": (
        "config.toml is read once, when the runtime starts, and never reloaded, so nothing "
        "could fire it"
    ),
}
"""Types a design note lists that no fire point exists for: refused, saying why."""
TOOL_TYPES: frozenset[HookType] = frozenset(
    {
        "pre_tool_use",
        "post_tool_use",
        "post_tool_use_failure",
        "permission_request",
        "permission_denied",
    }
)
"""The types fired for one tool call: their `matcher` is matched against the tool's name."""

ENV_OF: dict[HookType, tuple[str, ...]] = {
    "pre_sampling": ("MODEL", "TURN", "MESSAGE_COUNT"),
    "post_sampling": (
        "MODEL",
        "TURN",
        "INPUT_TOKENS",
        "OUTPUT_TOKENS",
        "STOP_REASON",
        "RESPONSE_PREVIEW",
    ),
    "pre_tool_use": ("TOOL_NAME", "TOOL_INPUT"),
    "post_tool_use": ("TOOL_NAME", "TOOL_OUTPUT"),
    "post_tool_use_failure": ("TOOL_NAME", "TOOL_ERROR"),
    "session_start": ("SESSION_ID",),
    "session_end": ("SESSION_ID", "TURN_COUNT", "COST_USD"),
    "permission_request": ("TOOL_NAME", "TOOL_INPUT", "MESSAGE"),
    "permission_denied": ("TOOL_NAME", "REASON"),
    "stop": ("REASON",),
    "notification": ("MESSAGE",),
    "task_created": ("TASK_ID", "TASK_TITLE"),
    "task_completed": ("TASK_ID", "TASK_STATUS"),
    "pre_compact": ("TRIGGER", "TOKENS"),
    "subagent_stop": ("AGENT_ID", "REASON"),
}
"""The seed's variables per type (the base ones are added to every type)."""

ENV_VALUE_MAX = 8_192
"""Longer values are cut in the environment (the whole data is on stdin)."""
PREVIEW_MAX = 500


class HookEntry(BaseModel):
    """One command of one hook type."""

    # built when a hooks.json is first read, not at import (most homes have none)
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, populate_by_name=True, defer_build=True
    )

    command: str = Field(min_length=1)
    timeout: float | None = Field(default=None, gt=0)
    """Seconds; unset: `hooks.default_timeout_ms`."""
    run_async: bool = Field(default=False, alias="async")
    matcher: str | None = None
    """A regular expression the tool's name must match (tool types only)."""

    @field_validator("command")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the command is empty")
        return value

    @field_validator("matcher")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression ({exc})") from exc
        return value

    def matches(self, tool: str | None) -> bool:
        """Whether this entry fires for `tool` (an entry without matcher fires for all)."""
        if self.matcher is None or tool is None:
            return True
        return re.fullmatch(self.matcher, tool) is not None


class HooksFile(BaseModel):
    """The whole `hooks.json`."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)

    hooks: dict[str, list[HookEntry]] = Field(default_factory=no_entries)

    @field_validator("hooks")
    @classmethod
    def _known_types(cls, value: dict[str, list[HookEntry]]) -> dict[str, list[HookEntry]]:
        for name in value:
            if name in NOT_HOOK_TYPES:
                raise ValueError(f"hook type {name!r} is not supported: {NOT_HOOK_TYPES[name]}")
            if name not in HOOK_TYPES and name not in ALIASES:
                known = ", ".join(HOOK_TYPES)
                raise ValueError(f"unknown hook type {name!r} (known: {known})")
        return value


@dataclass(frozen=True, slots=True)
class HookSet:
    """The hooks of a runtime, by type (aliases folded in)."""

    by_type: dict[HookType, tuple[HookEntry, ...]]

    @classmethod
    def empty(cls) -> HookSet:
        return cls({})

    def entries(self, hook: HookType, tool: str | None = None) -> tuple[HookEntry, ...]:
        return tuple(
            e for e in self.by_type.get(hook, ()) if hook not in TOOL_TYPES or e.matches(tool)
        )

    def __bool__(self) -> bool:
        return any(self.by_type.values())


def parse_hooks(raw: Any) -> HookSet:
    """A `HookSet` from the parsed JSON of `hooks.json`; raises `HooksFileError`."""
    try:
        parsed = HooksFile.model_validate(raw)
    except ValidationError as exc:
        raise HooksFileError.from_validation(exc) from None
    by_type: dict[HookType, list[HookEntry]] = {}
    for name, entries in parsed.hooks.items():
        hook = cast(HookType, ALIASES.get(name, name))
        by_type.setdefault(hook, []).extend(entries)
    return HookSet({k: tuple(v) for k, v in by_type.items()})


class HooksFileError(ValueError):
    """What is wrong in `hooks.json`, at which entry (``hooks.pre_tool_use[1].timeout``)."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")

    @classmethod
    def from_validation(cls, exc: ValidationError) -> HooksFileError:
        error = exc.errors()[0]
        where = ""
        for part in error["loc"]:
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
        message = error["msg"].removeprefix("Value error, ")
        found = error.get("input")
        if error["type"] == "extra_forbidden":
            known = "hooks" if len(error["loc"]) == 1 else "command, timeout, async, matcher"
            message = f"unknown key (known: {known})"
        elif error["type"] not in ("missing",) and not isinstance(found, dict | list):
            message = f"{message}, found {json.dumps(found, default=str)[:80]}"
        return cls(where or "hooks", message)


# --- what a hook decides ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HookVerdict:
    """What one hook run decided (`none` for everything that decides nothing)."""

    decision: Literal["none", "block", "allow", "deny", "update", "continue"]
    reason: str = ""
    updated_input: dict[str, Any] | None = None


def verdict(hook: HookType, exit_code: int | None, stdout: str, stderr: str) -> HookVerdict:
    """The decision of a finished hook run of type `hook`, per the rules of the module.

    `exit_code` None (killed, timed out) decides nothing: hooks fail open.
    """
    data = json_object(stdout)
    said = _first_line(str(data.get("reason", ""))) if data else ""
    if exit_code is None:
        return HookVerdict("none")
    if hook == "pre_sampling" and exit_code != 0:
        return HookVerdict("block", said or _first_line(stderr) or _first_line(stdout))
    if hook == "pre_tool_use":
        if exit_code == 2 or (data is not None and data.get("decision") == "block"):
            return HookVerdict(
                "block", said or _first_line(stderr) or _first_line(stdout) or "blocked by a hook"
            )
        if data is not None and isinstance(data.get("updated_input"), dict):
            return HookVerdict("update", said, updated_input=data["updated_input"])
    if hook == "permission_request" and data is not None:
        answer = data.get("decision")
        if answer in ("allow", "deny"):
            return HookVerdict(answer, said)
    if hook == "stop" and exit_code != 0:
        return HookVerdict("continue", stdout.strip()[:ENV_VALUE_MAX] or "continue the work")
    return HookVerdict("none")


def json_object(text: str) -> dict[str, Any] | None:
    """`text` as a JSON object, or None (garbage is not an error: hooks fail open)."""
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:300] if lines else ""


def hook_env(hook: HookType, data: dict[str, Any], base: dict[str, str]) -> dict[str, str]:
    """The environment of one hook run: `base` (allow-listed variables and PROJECT_ROOT,
    PLATFORM, ARCH, CWD) plus the type's own variables from `data` (long values cut)."""
    env = dict(base)
    for name in ENV_OF[hook]:
        value = data.get(name.lower())
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        limit = PREVIEW_MAX if name == "RESPONSE_PREVIEW" else ENV_VALUE_MAX
        env[name] = text[:limit]
    return env
