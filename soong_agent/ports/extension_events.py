"""Run events of what extends a run (LOOP-3): MCP servers, hooks, memory, instruction files
and plan mode. Part of `soong_agent.ports.events.RunEvent`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from soong_agent.ports.defaults import no_items
from soong_agent.ports.event_base import EventBase


class McpServerEvent(EventBase):
    """An MCP server's state changed (or, at a run's start, what it is): starting, ready (tool
    count, version), failed (reason), crashed (exit code, last stderr lines), restarting
    (attempt, backoff), stopped. `from_cache`: its tools come from the discovery cache while
    the live list is awaited."""

    type: Literal["mcp_server"] = "mcp_server"
    server: str
    state: Literal["starting", "ready", "failed", "crashed", "restarting", "stopped"]
    transport: str
    detail: str = ""
    tool_count: int | None = None
    version: str | None = None
    exit_code: int | None = None
    stderr_tail: list[str] = Field(default_factory=no_items)
    attempt: int | None = None
    backoff_s: float | None = None
    startup_ms: float | None = None
    from_cache: bool = False


class McpElicitationEvent(EventBase):
    """An MCP server asked the user a question (`elicitation/create`, MCP-4) and what came of
    it: `action` is ``accept``, ``decline`` or ``cancel`` (``decline`` too when nobody could be
    asked: `reason` says so). `fields` names the form's fields (`url` in URL mode); the
    answer's values are never recorded."""

    type: Literal["mcp_elicitation"] = "mcp_elicitation"
    server: str
    mode: Literal["form", "url"]
    message: str
    fields: list[str] = Field(default_factory=no_items)
    url: str | None = None
    action: Literal["accept", "decline", "cancel"]
    reason: str = ""


class McpSamplingEvent(EventBase):
    """An MCP server asked the run's model for a completion (`sampling/createMessage`,
    MCP-4): ``answered`` (by `model`, its usage a `usage` event of the run) or ``declined``
    (`reason`: a deny rule, the user, nobody to ask, no run). `prompt` is the start of the
    last message the server sent (secrets scrubbed)."""

    type: Literal["mcp_sampling"] = "mcp_sampling"
    server: str
    outcome: Literal["answered", "declined", "failed"]
    messages: int
    prompt: str = ""
    model: str | None = None
    reason: str = ""


class HookRan(EventBase):
    """A hook command ran (or, `async`, was started in the background); `decision` is what it
    decided: none, block, allow, deny, update or continue."""

    type: Literal["hook_ran"] = "hook_ran"
    hook: str
    command: str
    exit_code: int | None = None
    duration_ms: float = 0.0
    decision: str = "none"


class HookFailed(EventBase):
    """A hook crashed, timed out or answered garbage; the run went on without its decision."""

    type: Literal["hook_failed"] = "hook_failed"
    hook: str
    command: str
    reason: str
    exit_code: int | None = None


class MemoryRejected(EventBase):
    """A memory was not stored: the memory policy refused it (what is never kept: file
    structure, code signatures, task progress, branch or PR names, fix details, secrets).
    `source` says who wanted it stored (``save_memory``, ``extraction``); `codes` and `reasons`
    say why, one of each per rule it broke (a secret is named by its kind, never quoted)."""

    type: Literal["memory_rejected"] = "memory_rejected"
    source: str
    name: str
    category: str | None = None
    codes: list[str] = Field(default_factory=no_items)
    reasons: list[str] = Field(default_factory=no_items)


class MemoryRecalled(EventBase):
    """Memories were recalled into this run's system prompt (MEM-4). It comes before
    `run_started`: recall happens before the run begins. `names` are the memories whose text
    the prompt holds, in order; `method` says who chose them: ``model`` (the recall model),
    ``lexical`` (BM25 over the catalogue, because the recall model failed, timed out or
    answered garbage) or ``none`` (nothing was chosen: `recall_top_k` or the memory budget is
    0, or the memory folder could not be read); `reason` says why, on one line."""

    type: Literal["memory_recalled"] = "memory_recalled"
    method: Literal["model", "lexical", "none"]
    names: list[str] = Field(default_factory=no_items)
    reason: str = ""


class InstructionsLoaded(EventBase):
    """The instruction file of a folder inside the project joined the system prompt (PROMPT-2):
    the agent read, wrote or listed something under `folder` for the first time. `path` is the
    file, relative to the project; `bytes` the size of its text."""

    type: Literal["instructions_loaded"] = "instructions_loaded"
    path: str
    folder: str
    bytes: int


class PlanModeChanged(EventBase):
    """The run entered or left plan mode (PLAN-1, seed 002): in plan mode only read-only tools
    and the plan tools run. `source` says what changed it: ``run_start`` (`run --plan`, SDK
    `plan_mode=True`), ``resume`` (restored from the session's messages), ``enter_plan_mode``,
    ``exit_plan_mode`` (the user approved `plan`); `plan` is the approved plan's name, if any."""

    type: Literal["plan_mode_changed"] = "plan_mode_changed"
    active: bool
    source: str
    plan: str | None = None
    reason: str = ""
