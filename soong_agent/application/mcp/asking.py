"""What an MCP server may ask while a run works (MCP-4), answered for that run.

The hub is the runtime's, servers outlive runs; `McpAsks` is the one answerer the hub is given
(its `sample` and `elicit`), and each run with MCP servers enters it for as long as it lasts
(`RunAsking`, through the run's `McpRunLink`). A request is answered for the run that entered
last and is still under way (a child run's while the child works).

- **Sampling** (`sampling/createMessage`): declined (`SamplingDeclined`, the reason given to the
  server) when no run is under way. Otherwise the permission policy decides, as for a tool
  call named ``mcp_sampling__<server>`` of class ``network``: a deny rule declines, mode
  ``bypass`` or an allow rule allows, else the run's approver is asked (the request names the
  server and shows the messages; ``allow_for_session`` covers that server's later requests);
  with nobody to ask it is declined (whatever `write_without_callback` says). Approved, it is
  answered by `[tools.mcp] sampling_profile`'s model, else the run's own (or an SDK program's
  `sampling` callable), with no tools, and its usage is a `usage` event of the run and counts
  in the run's budgets. Each request is an `mcp_sampling` event.
- **Elicitation** (`elicitation/create`): put to the `Elicitor` the entrypoint gave (the
  terminal, an SDK callback); with none, declined. Each is an `mcp_elicitation` event of the
  run under way (names of the fields only, never the answer's values).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.runs.settings import LoopSettings
from soong_agent.domain import permissions
from soong_agent.domain.compaction.structure import approx_tokens
from soong_agent.domain.config.schema import PermissionsConfig, PriceConfig
from soong_agent.domain.usage import cost_usd
from soong_agent.ports.approval import ApprovalRequest, Approver, printable
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.events import (
    McpElicitationEvent,
    McpSamplingEvent,
    PermissionAsked,
    PermissionDecided,
    UsageEvent,
)
from soong_agent.ports.mcp import (
    ElicitationAnswer,
    ElicitationRequest,
    Elicitor,
    Sampler,
    SamplingAnswer,
    SamplingDeclined,
    SamplingRequest,
)
from soong_agent.ports.messages import Message, TextBlock
from soong_agent.ports.model import ModelProvider, ModelRequest, SystemPart
from soong_agent.ports.streaming import StreamFinished, TextDelta, Usage, UsageReported

__all__ = ["McpAsks", "RunAsking", "SamplingModel", "sampling_tool"]

log = logging.getLogger(__name__)

PROMPT_CHARS = 200
"""How much of a sampling request's last message its event keeps."""


def sampling_tool(server: str) -> str:
    """The name permission rules match a server's sampling requests by."""
    return f"mcp_sampling__{server}"


class _RunModel(Protocol):
    """What `McpAsks.for_run` reads of a run's ports (`RunPorts`)."""

    @property
    def provider(self) -> ModelProvider: ...

    @property
    def approver(self) -> Approver | None: ...


@dataclass(frozen=True, slots=True)
class SamplingModel:
    """A model that answers sampling requests, and what its answers cost."""

    provider: ModelProvider
    label: str
    price: PriceConfig | None = None
    max_output_tokens: int | None = None


@dataclass(slots=True)
class RunAsking:
    """One run as the answerer of what servers ask while it lasts: its events, who approves
    for it and under which policy, its model, and `spend`, which counts usage in its budgets."""

    recorder: RunRecorder
    approver: Approver | None
    policy: PermissionsConfig
    grants: permissions.SessionGrants
    model: SamplingModel
    spend: Callable[[Usage], None]
    asks: McpAsks | None = None

    def enter(self) -> Callable[[], None]:
        """Answer for this run from now on; returns the function that stops it."""
        if self.asks is None:
            return lambda: None
        return self.asks.enter(self)


class McpAsks:
    """The runtime's answerer of MCP servers' sampling and elicitation requests.

    `elicitor` puts questions to the user (None: every question is declined). `sampler`, when
    given, answers approved sampling requests instead of a model (an SDK program's own).
    `sampling_model` is `[tools.mcp] sampling_profile`'s model, made at the first request
    (None, or a factory returning None: each run's own model answers)."""

    def __init__(
        self,
        *,
        elicitor: Elicitor | None = None,
        sampler: Sampler | None = None,
        sampling_model: Callable[[], SamplingModel | None] | None = None,
    ) -> None:
        self._elicitor = elicitor
        self._sampler = sampler
        self._sampling_model = sampling_model
        self._profile: SamplingModel | None = None
        self._profile_made = False
        self._runs: list[RunAsking] = []
        self._ids = itertools.count(1)

    def for_run(
        self,
        recorder: RunRecorder,
        ports: _RunModel,
        policy: PermissionsConfig,
        grants: permissions.SessionGrants,
        settings: LoopSettings,
        spend: Callable[[Usage], None],
    ) -> RunAsking:
        """What one run answers with (it starts answering when its link enters it): its
        approver and model (`ports`), permission policy and grants, the model's label, price
        and output cap (`settings`), and `spend`, which counts usage in its budgets."""
        model = SamplingModel(
            ports.provider, settings.model_label, settings.price, settings.max_output_tokens
        )
        return RunAsking(recorder, ports.approver, policy, grants, model, spend, asks=self)

    def enter(self, run: RunAsking) -> Callable[[], None]:
        """Answer for `run` until the returned function is called."""
        self._runs.append(run)

        def leave() -> None:
            if run in self._runs:
                self._runs.remove(run)

        return leave

    @property
    def active(self) -> RunAsking | None:
        """The run requests are answered for now (the last one entered), if any."""
        return self._runs[-1] if self._runs else None

    # --- elicitation ---------------------------------------------------------------------------

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer:
        """The user's answer (declined when nobody can be asked), recorded on the run."""
        run = self.active
        if self._elicitor is None:
            answer = ElicitationAnswer("decline")
            reason = "nobody to ask: not an interactive session"
        else:
            answer = await self._elicitor(request)
            reason = ""
        if run is not None:
            fields = []
            if request.schema is not None and isinstance(request.schema.get("properties"), dict):
                fields = [str(name) for name in request.schema["properties"]]
            run.recorder.event(
                McpElicitationEvent,
                server=request.server,
                mode=request.mode,
                message=request.message,
                fields=fields,
                url=request.url,
                action=answer.action,
                reason=reason,
            )
        else:
            log.info("mcp server %r asked a question outside a run", request.server)
        return answer

    # --- sampling ------------------------------------------------------------------------------

    async def sample(self, request: SamplingRequest) -> SamplingAnswer:
        """The answer of the model, once the permission policy (or the user) allowed it;
        `SamplingDeclined` with the reason otherwise."""
        run = self.active
        if run is None:
            raise SamplingDeclined("no run is under way to answer it")
        prompt = request.messages[-1][1][:PROMPT_CHARS] if request.messages else ""
        try:
            await self._allowed(run, request)
            answer = await self._answer(run, request)
        except SamplingDeclined as exc:
            self._record(run, request, prompt, "declined", reason=str(exc))
            raise
        except ProviderError as exc:
            self._record(run, request, prompt, "failed", reason=str(exc))
            raise SamplingDeclined(f"the model failed: {exc}") from None
        self._record(run, request, prompt, "answered", model=answer.model)
        return answer

    def _record(
        self,
        run: RunAsking,
        request: SamplingRequest,
        prompt: str,
        outcome: str,
        *,
        model: str | None = None,
        reason: str = "",
    ) -> None:
        run.recorder.event(
            McpSamplingEvent,
            server=request.server,
            outcome=outcome,
            messages=len(request.messages),
            prompt=prompt,
            model=model,
            reason=reason,
        )

    async def _allowed(self, run: RunAsking, request: SamplingRequest) -> None:
        """Return when the request may be answered; `SamplingDeclined` otherwise."""
        tool = sampling_tool(request.server)
        wanted = permissions.PermissionRequest(tool, "network", "*")
        verdict = permissions.decide(wanted, policy=run.policy, grants=run.grants)
        call_id = f"mcp-sampling-{next(self._ids)}"
        rec = run.recorder
        if verdict.outcome == "deny":
            rec.event(
                PermissionDecided,
                call_id=call_id,
                tool=tool,
                decision="deny",
                reason=verdict.reason,
            )
            raise SamplingDeclined(f"not allowed ({verdict.reason})")
        if verdict.outcome == "allow":
            rec.event(
                PermissionDecided,
                call_id=call_id,
                tool=tool,
                decision="allow_once",
                reason=verdict.reason,
            )
            return
        if run.approver is None:
            reason = "nobody to approve it (no approval callback)"
            rec.event(PermissionDecided, call_id=call_id, tool=tool, decision="deny", reason=reason)
            raise SamplingDeclined(reason)
        scopes = permissions.session_scopes(wanted) if run.policy.allow_for_session_enabled else ()
        covers = (
            f"every sampling request of MCP server {request.server!r} for the rest of this session"
            if scopes
            else "nothing (allow for session is disabled in permissions)"
        )
        summary = (
            f"let MCP server {request.server!r} ask the model "
            f"({len(request.messages)} message{'s' if len(request.messages) != 1 else ''}, "
            f"at most {request.max_tokens} tokens)"
        )
        rec.event(
            PermissionAsked, call_id=call_id, tool=tool, summary=summary, session_scope=covers
        )
        decision = await run.approver.decide(
            ApprovalRequest(
                tool=tool,
                call_id=call_id,
                permission_class="network",
                summary=summary,
                session_scope=covers,
                detail=_transcript(request),
            )
        )
        if decision == "deny":
            rec.event(
                PermissionDecided,
                call_id=call_id,
                tool=tool,
                decision="deny",
                reason="user denied it",
            )
            raise SamplingDeclined("the user declined it")
        reason = "user allowed it once"
        if decision == "allow_for_session" and scopes:
            run.grants.grant(wanted)
            reason = f"user allowed it for this session ({covers})"
        rec.event(PermissionDecided, call_id=call_id, tool=tool, decision=decision, reason=reason)

    async def _answer(self, run: RunAsking, request: SamplingRequest) -> SamplingAnswer:
        if self._sampler is not None:
            given = await self._sampler(request)
            if given is None:
                raise SamplingDeclined("the application's sampling callback declined it")
            return given
        model = self._profile_model() or run.model
        wanted = request.max_tokens
        if model.max_output_tokens is not None:
            wanted = min(wanted, model.max_output_tokens)
        system = (
            [SystemPart("mcp_sampling", request.system_prompt)] if request.system_prompt else []
        )
        messages = [
            Message(
                role="assistant" if role == "assistant" else "user",
                content=[TextBlock(text=text)],
            )
            for role, text in request.messages
        ]
        text: list[str] = []
        usage: Usage | None = None
        stop = "endTurn"
        async for item in model.provider.stream(
            ModelRequest(
                system=system,
                messages=messages,
                max_output_tokens=wanted,
                temperature=request.temperature,
            )
        ):
            match item:
                case TextDelta():
                    text.append(item.text)
                case UsageReported():
                    usage = item.usage if usage is None else usage + item.usage
                case StreamFinished():
                    if item.stop_reason == "max_tokens":
                        stop = "maxTokens"
                case _:
                    pass
        answer = "".join(text)
        if usage is None:
            prompt_text = "\n".join(t for _, t in request.messages) + (request.system_prompt or "")
            usage = Usage(
                input_tokens=approx_tokens(prompt_text),
                output_tokens=approx_tokens(answer),
                estimated=True,
            )
        run.spend(usage)
        run.recorder.event(
            UsageEvent, model=model.label, usage=usage, cost_usd=cost_usd(usage, model.price)
        )
        return SamplingAnswer(text=answer, model=model.label, stop_reason=stop)

    def _profile_model(self) -> SamplingModel | None:
        if not self._profile_made:
            self._profile_made = True
            if self._sampling_model is not None:
                self._profile = self._sampling_model()
        return self._profile


def _transcript(request: SamplingRequest) -> str:
    """What the approver shows: the system prompt and each message, role first."""
    lines: list[str] = []
    if request.system_prompt:
        lines.append(f"system: {printable(request.system_prompt)}")
    for role, text in request.messages:
        lines.append(f"{role}: {printable(text)}")
    return "\n".join(lines)
