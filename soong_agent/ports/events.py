"""Run events (LOOP-3): what a run reports, persisted in order with a per-run sequence number."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from soong_agent.ports.approval import Decision
from soong_agent.ports.defaults import no_items
from soong_agent.ports.streaming import Usage

RunStatus = Literal[
    "running",
    "completed",
    "cancelled",
    "failed",
    "max_turns",
    "stuck",
    "budget_exhausted",
    "blocked",
    "interrupted",
]
"""`blocked`: a pre_sampling hook stopped the run before a model call (HOOK-1).
`interrupted`: the process running it ended before the run's end was saved (killed, or the
store refused the last write); a store reports it so once no live process holds the run. The
session resumes as after any other end."""


# Default factories are plain functions (see `soong_agent.ports.defaults`): pydantic reads a
# factory's signature when it builds a model, and that of a model class costs far more.
def _no_usage() -> Usage:
    return Usage()


class _Event(BaseModel):
    # built at first use, not at import: a run uses a handful of the event types
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    seq: int
    run_id: str
    session_id: str
    at: float


class RunStarted(_Event):
    """A run began."""

    type: Literal["run_started"] = "run_started"
    project_dir: str
    model: str
    agent: str | None = None
    agent_hash: str | None = None
    """The sha256 of the agent definition's text (a preset, AGT-3)."""
    resumed: bool = False
    message: str


class ModelCallStarted(_Event):
    """The loop sent a request to the model."""

    type: Literal["model_call_started"] = "model_call_started"
    turn: int
    messages: int


class ModelRetry(_Event):
    """A model call failed and is sent again after `delay_s`. `restarted`: it failed after
    part of the answer had arrived (a stream cut); the text and thinking deltas since the
    call's `model_call_started` are void, and the answer starts again."""

    type: Literal["model_retry"] = "model_retry"
    kind: str
    reason: str
    attempt: int
    max_attempts: int
    delay_s: float
    restarted: bool = False


class TextDeltaEvent(_Event):
    """A piece of answer text arrived."""

    type: Literal["text_delta"] = "text_delta"
    text: str


class ThinkingDeltaEvent(_Event):
    """A piece of model reasoning arrived."""

    type: Literal["thinking_delta"] = "thinking_delta"
    text: str


class ToolCallRequested(_Event):
    """The model asked for a tool call."""

    type: Literal["tool_call_requested"] = "tool_call_requested"
    call_id: str
    name: str
    arguments: str


class PermissionAsked(_Event):
    """The user was asked to approve a tool call."""

    type: Literal["permission_asked"] = "permission_asked"
    call_id: str
    tool: str
    summary: str
    session_scope: str


class PermissionDecided(_Event):
    """A tool call was allowed or denied; `reason` says which rule, mode, grant or answer."""

    type: Literal["permission_decided"] = "permission_decided"
    call_id: str
    tool: str
    decision: Decision
    reason: str


class PermissionSuggestion(_Event):
    """The user keeps approving calls one rule would allow: `rule` is that rule's exact text,
    to copy into `permissions.allow` (nothing is written anywhere by the runtime). Once per
    rule and session, after `approvals` answers of "allow once"."""

    type: Literal["permission_suggestion"] = "permission_suggestion"
    tool: str
    rule: str
    approvals: int


class ToolResultEvent(_Event):
    """A tool call produced its result (also synthesised ones, on error or cancel)."""

    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str
    is_error: bool = False
    duration_ms: float = 0.0


class SandboxDenied(_Event):
    """The OS sandbox refused a command something (SBX-3): read from the command's output, one
    event per refusal, published before the call's `ToolResultEvent` (whose text has the same
    note). `rule` names the policy that applied."""

    type: Literal["sandbox_denied"] = "sandbox_denied"
    call_id: str
    name: str
    kind: Literal["read", "write", "network"]
    mechanism: str
    error: str
    path: str | None = None
    rule: str


class McpServerEvent(_Event):
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


class ContextMeasured(_Event):
    """The size of the context before a model call, against the budget (CTX-4)."""

    type: Literal["context"] = "context"
    system_tokens: int
    non_system_tokens: int
    non_system_budget: int
    compact_trigger: int
    window: int
    exact: bool = True


class CompactionEvent(_Event):
    """The context was compacted; `dropped` names the message ranges replaced or stubbed."""

    type: Literal["compaction"] = "compaction"
    strategy: str
    tokens_before: int
    tokens_after: int
    dropped: list[str] = Field(default_factory=no_items)
    trigger: str = "budget"
    rungs_failed: list[str] = Field(default_factory=no_items)


class StuckDetected(_Event):
    """The run looked stuck; `action` says what the runtime did: reminded the model, pruned the
    looping turns from the context (`pruned` message ids, still stored), or stopped the run."""

    type: Literal["stuck_detected"] = "stuck_detected"
    kind: str
    detail: str
    action: Literal["reminder", "prune", "stop"]
    first_turn: int
    last_turn: int
    pruned: list[str] = Field(default_factory=no_items)


class BudgetExhausted(_Event):
    """A run budget was used up; the run ends at this turn boundary."""

    type: Literal["budget_exhausted"] = "budget_exhausted"
    budget: Literal["max_cost_usd", "max_tokens", "max_wall_ms"]
    reason: str


class HookRan(_Event):
    """A hook command ran (or, `async`, was started in the background); `decision` is what it
    decided: none, block, allow, deny, update or continue."""

    type: Literal["hook_ran"] = "hook_ran"
    hook: str
    command: str
    exit_code: int | None = None
    duration_ms: float = 0.0
    decision: str = "none"


class HookFailed(_Event):
    """A hook crashed, timed out or answered garbage; the run went on without its decision."""

    type: Literal["hook_failed"] = "hook_failed"
    hook: str
    command: str
    reason: str
    exit_code: int | None = None


class MemoryRejected(_Event):
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


class MemoryRecalled(_Event):
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


class InstructionsLoaded(_Event):
    """The instruction file of a folder inside the project joined the system prompt (PROMPT-2):
    the agent read, wrote or listed something under `folder` for the first time. `path` is the
    file, relative to the project; `bytes` the size of its text."""

    type: Literal["instructions_loaded"] = "instructions_loaded"
    path: str
    folder: str
    bytes: int


class PlanModeChanged(_Event):
    """The run entered or left plan mode (PLAN-1, seed 002): in plan mode only read-only tools
    and the plan tools run. `source` says what changed it: ``run_start`` (`run --plan`, SDK
    `plan_mode=True`), ``resume`` (restored from the session's messages), ``enter_plan_mode``,
    ``exit_plan_mode`` (the user approved `plan`); `plan` is the approved plan's name, if any."""

    type: Literal["plan_mode_changed"] = "plan_mode_changed"
    active: bool
    source: str
    plan: str | None = None
    reason: str = ""


class AgentSwitched(_Event):
    """A session that had no messages yet was given another agent (preset, AGT-3)."""

    type: Literal["agent_switched"] = "agent_switched"
    previous: str | None
    agent: str


ChildKind = Literal["sub_agent", "fork", "worker", "teammate"]
"""How a child run was started: `create_sub_agent`, `fork_agent`, `dispatch_worker` or
`spawn_teammate` (a long-lived teammate: one session, many runs)."""


class ChildStarted(_Event):
    """A child agent's run began (AGT-2, AGT-4). Recorded in the parent's run and, as the
    first event, in the child's own run: the link between the two sessions."""

    type: Literal["child_started"] = "child_started"
    kind: ChildKind
    agent: str
    child_session_id: str
    child_run_id: str
    parent_session_id: str
    parent_run_id: str
    parent_call_id: str
    task: str
    model: str = ""
    pool: str | None = None
    worker: str | None = None
    depth: int = 1
    """How deep the child is: one more than its parent (a root run's children are 1)."""


class ChildFinished(_Event):
    """A child agent's run ended; its usage and cost are the child's own (the parent's
    budgets count them too)."""

    type: Literal["child_finished"] = "child_finished"
    kind: ChildKind
    agent: str
    child_session_id: str
    child_run_id: str
    parent_call_id: str
    status: RunStatus
    reason: str | None = None
    turns: int = 0
    usage: Usage = Field(default_factory=_no_usage)
    cost_usd: float | None = None
    pool: str | None = None
    worker: str | None = None


MemberStatus = Literal["idle", "working", "waiting_approval", "stopped"]
"""A teammate's status label: what the lead and autonomous claiming go by."""


class TeamChanged(_Event):
    """A teammate joined, changed status or took up a step (recorded in the lead's run while
    one is running, and in the teammate's own runs)."""

    type: Literal["team_changed"] = "team_changed"
    team: str
    member: str
    role: str
    status: MemberStatus
    step: str | None = None
    reason: str = ""


class ErrorEvent(_Event):
    """Something went wrong; `fatal` errors end the run."""

    type: Literal["error"] = "error"
    kind: str
    message: str
    fatal: bool = False


class UsageEvent(_Event):
    """Token usage of one model call."""

    type: Literal["usage"] = "usage"
    model: str
    usage: Usage
    cost_usd: float | None = None


class RunFinished(_Event):
    """The run reached a terminal state."""

    type: Literal["run_finished"] = "run_finished"
    status: RunStatus
    reason: str | None = None
    usage: Usage = Field(default_factory=_no_usage)
    cost_usd: float | None = None


RunEvent = Annotated[
    RunStarted
    | ModelCallStarted
    | ModelRetry
    | TextDeltaEvent
    | ThinkingDeltaEvent
    | ToolCallRequested
    | PermissionAsked
    | PermissionDecided
    | PermissionSuggestion
    | ToolResultEvent
    | SandboxDenied
    | McpServerEvent
    | ContextMeasured
    | CompactionEvent
    | StuckDetected
    | BudgetExhausted
    | HookRan
    | HookFailed
    | MemoryRejected
    | MemoryRecalled
    | InstructionsLoaded
    | PlanModeChanged
    | AgentSwitched
    | ChildStarted
    | ChildFinished
    | TeamChanged
    | ErrorEvent
    | UsageEvent
    | RunFinished,
    Field(discriminator="type"),
]

_adapters: dict[str, TypeAdapter[RunEvent]] = {}


def __getattr__(name: str) -> TypeAdapter[RunEvent]:
    """`RUN_EVENT`, the validator of any run event, built at first use (building it builds
    every event type's schema, which a run's start does not need)."""
    if name != "RUN_EVENT":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _adapters:
        _adapters[name] = TypeAdapter(RunEvent)
    return _adapters[name]


if TYPE_CHECKING:
    RUN_EVENT: TypeAdapter[RunEvent]


@runtime_checkable
class EventSink(Protocol):
    """Receives every event of a run as it happens."""

    def emit(self, event: RunEvent) -> None:
        """Take one event; must not block."""
        ...
