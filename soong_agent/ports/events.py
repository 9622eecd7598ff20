"""Run events (LOOP-3): what a run reports, persisted in order with a per-run sequence number.

The events of the run, its model calls, tools and context live here; those of agents
(`agent_events`), of what extends a run (`extension_events`) and of checkpoints and rewinds
(`checkpoint_events`) have modules of their own, and are imported from here like the rest.
`RunEvent` is the union of them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Protocol, runtime_checkable

from pydantic import Field, TypeAdapter

from soong_agent.ports.agent_events import (
    AgentSwitched,
    ChildFinished,
    ChildKind,
    ChildStarted,
    MemberStatus,
    TeamChanged,
)
from soong_agent.ports.approval import Decision
from soong_agent.ports.checkpoint_events import (
    FileChanged,
    FileCheckpoint,
    SessionRewound,
    WorkTreeSnapshot,
)
from soong_agent.ports.defaults import no_items
from soong_agent.ports.event_base import EventBase, RunStatus, no_usage
from soong_agent.ports.extension_events import (
    HookFailed,
    HookRan,
    InstructionsLoaded,
    McpElicitationEvent,
    McpSamplingEvent,
    McpServerEvent,
    MemoryRecalled,
    MemoryRejected,
    PlanModeChanged,
)
from soong_agent.ports.streaming import Usage


class RunStarted(EventBase):
    """A run began."""

    type: Literal["run_started"] = "run_started"
    project_dir: str
    model: str
    agent: str | None = None
    agent_hash: str | None = None
    """The sha256 of the agent definition's text (a preset, AGT-3)."""
    resumed: bool = False
    message: str


class ModelCallStarted(EventBase):
    """The loop sent a request to the model."""

    type: Literal["model_call_started"] = "model_call_started"
    turn: int
    messages: int


class ModelRetry(EventBase):
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


class TextDeltaEvent(EventBase):
    """A piece of answer text arrived."""

    type: Literal["text_delta"] = "text_delta"
    text: str


class ThinkingDeltaEvent(EventBase):
    """A piece of model reasoning arrived."""

    type: Literal["thinking_delta"] = "thinking_delta"
    text: str


class ToolCallRequested(EventBase):
    """The model asked for a tool call."""

    type: Literal["tool_call_requested"] = "tool_call_requested"
    call_id: str
    name: str
    arguments: str


class PermissionAsked(EventBase):
    """The user was asked to approve a tool call."""

    type: Literal["permission_asked"] = "permission_asked"
    call_id: str
    tool: str
    summary: str
    session_scope: str


class PermissionDecided(EventBase):
    """A tool call was allowed or denied; `reason` says which rule, mode, grant or answer."""

    type: Literal["permission_decided"] = "permission_decided"
    call_id: str
    tool: str
    decision: Decision
    reason: str


class PermissionSuggestion(EventBase):
    """The user keeps approving calls one rule would allow: `rule` is that rule's exact text,
    to copy into `permissions.allow` (nothing is written anywhere by the runtime). Once per
    rule and session, after `approvals` answers of "allow once"."""

    type: Literal["permission_suggestion"] = "permission_suggestion"
    tool: str
    rule: str
    approvals: int


class ToolResultEvent(EventBase):
    """A tool call produced its result (also synthesised ones, on error or cancel)."""

    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str
    is_error: bool = False
    duration_ms: float = 0.0


class SandboxDenied(EventBase):
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


class NetworkDenied(EventBase):
    """The filtering proxy refused a command a connection (SBX-4, ``sandbox.network =
    "allowlist"``): `host` and `port` are what it asked for, `command` the command's text,
    `reason` why (not in ``tools.network``, a private address, …). Published before the call's
    `ToolResultEvent`, whose text notes it too."""

    type: Literal["network_denied"] = "network_denied"
    call_id: str
    name: str
    host: str
    port: int
    command: str
    reason: str
    mechanism: str


class ContextMeasured(EventBase):
    """The size of the context before a model call, against the budget (CTX-4)."""

    type: Literal["context"] = "context"
    system_tokens: int
    non_system_tokens: int
    non_system_budget: int
    compact_trigger: int
    window: int
    exact: bool = True


class CompactionEvent(EventBase):
    """The context was compacted; `dropped` names the message ranges replaced or stubbed."""

    type: Literal["compaction"] = "compaction"
    strategy: str
    tokens_before: int
    tokens_after: int
    dropped: list[str] = Field(default_factory=no_items)
    trigger: str = "budget"
    rungs_failed: list[str] = Field(default_factory=no_items)


class StuckDetected(EventBase):
    """The run looked stuck; `action` says what the runtime did: reminded the model, pruned the
    looping turns from the context (`pruned` message ids, still stored), or stopped the run."""

    type: Literal["stuck_detected"] = "stuck_detected"
    kind: str
    detail: str
    action: Literal["reminder", "prune", "stop"]
    first_turn: int
    last_turn: int
    pruned: list[str] = Field(default_factory=no_items)


class BudgetExhausted(EventBase):
    """A run budget was used up; the run ends at this turn boundary."""

    type: Literal["budget_exhausted"] = "budget_exhausted"
    budget: Literal["max_cost_usd", "max_tokens", "max_wall_ms"]
    reason: str


class ErrorEvent(EventBase):
    """Something went wrong; `fatal` errors end the run."""

    type: Literal["error"] = "error"
    kind: str
    message: str
    fatal: bool = False


class UsageEvent(EventBase):
    """Token usage of one model call."""

    type: Literal["usage"] = "usage"
    model: str
    usage: Usage
    cost_usd: float | None = None


class RunFinished(EventBase):
    """The run reached a terminal state."""

    type: Literal["run_finished"] = "run_finished"
    status: RunStatus
    reason: str | None = None
    usage: Usage = Field(default_factory=no_usage)
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
    | NetworkDenied
    | McpServerEvent
    | McpElicitationEvent
    | McpSamplingEvent
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
    | FileCheckpoint
    | FileChanged
    | WorkTreeSnapshot
    | SessionRewound
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


__all__ = [
    "RUN_EVENT",
    "AgentSwitched",
    "BudgetExhausted",
    "ChildFinished",
    "ChildKind",
    "ChildStarted",
    "CompactionEvent",
    "ContextMeasured",
    "ErrorEvent",
    "EventBase",
    "EventSink",
    "FileChanged",
    "FileCheckpoint",
    "HookFailed",
    "HookRan",
    "InstructionsLoaded",
    "McpElicitationEvent",
    "McpSamplingEvent",
    "McpServerEvent",
    "MemberStatus",
    "MemoryRecalled",
    "MemoryRejected",
    "ModelCallStarted",
    "ModelRetry",
    "NetworkDenied",
    "PermissionAsked",
    "PermissionDecided",
    "PermissionSuggestion",
    "PlanModeChanged",
    "RunEvent",
    "RunFinished",
    "RunStarted",
    "RunStatus",
    "SandboxDenied",
    "SessionRewound",
    "StuckDetected",
    "TeamChanged",
    "TextDeltaEvent",
    "ThinkingDeltaEvent",
    "ToolCallRequested",
    "ToolResultEvent",
    "UsageEvent",
    "WorkTreeSnapshot",
]
