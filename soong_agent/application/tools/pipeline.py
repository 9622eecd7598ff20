"""Runs the tool calls of one model turn: validate, ask permission, execute, one result each."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, assert_never

from pydantic import BaseModel, ValidationError

from soong_agent.application.checkpoints.keeper import TurnCheckpoints
from soong_agent.application.hooks import TASK_HOOKS, RunHooks
from soong_agent.application.permissions.gate import PermissionGate
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.tools.base import Tool, ToolContext, ToolOutput, ToolRegistry
from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.events import ErrorEvent, NetworkDenied, SandboxDenied, ToolResultEvent
from soong_agent.ports.messages import ToolCallBlock, ToolResultBlock
from soong_agent.ports.system import Clock
from soong_agent.ports.text import safe_text

RESULT_MAX_CHARS = 30_000
PREVIEW_HEAD_CHARS = 2_000
PREVIEW_TAIL_CHARS = 500
NAME_SHOWN = 100
"""How much of an unknown tool's name the model is told back."""


class _Prepared(NamedTuple):
    call: ToolCallBlock
    tool: Tool | None
    args: BaseModel | None
    problem: str | None


def _validation_problem(tool: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
    return f"invalid arguments for {tool}: " + "; ".join(parts)


def _cut(text: str, limit: int) -> str:
    """`text` cut at `limit` characters, the cut marked (used when no artifact store exists)."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


def artifact_preview(text: str, *, artifact_id: str, size: int) -> str:
    """What the model sees of a result stored as an artifact (CTX-5)."""
    head = text[:PREVIEW_HEAD_CHARS]
    tail = text[-PREVIEW_TAIL_CHARS:] if len(text) > PREVIEW_HEAD_CHARS + PREVIEW_TAIL_CHARS else ""
    parts = [
        f"[This result is {len(text)} characters ({size} bytes); it was stored whole as artifact "
        f"{artifact_id}. Read any part with read_artifact(artifact_id={artifact_id!r}, offset=…, "
        "length=…).]",
        head,
    ]
    if tail:
        parts += [f"[... {len(text) - len(head) - len(tail)} characters not shown ...]", tail]
    return "\n".join(parts)


class ToolPipeline:
    """Turns tool calls into tool results; never raises for a tool's failure."""

    def __init__(
        self,
        *,
        registry: ToolRegistry,
        gate: PermissionGate,
        clock: Clock,
        artifacts: ArtifactStore | None = None,
        max_result_chars: int = RESULT_MAX_CHARS,
        hooks: RunHooks | None = None,
        checkpoints: TurnCheckpoints | None = None,
    ) -> None:
        self._hooks = hooks
        self._checkpoints = checkpoints
        self._registry = registry
        self._gate = gate
        self._clock = clock
        self._artifacts = artifacts
        self._max_result_chars = max_result_chars
        self.completed: dict[str, ToolResultBlock] = {}

    def _prepare(self, call: ToolCallBlock, refused: Mapping[str, str] | None) -> _Prepared:
        tool = self._registry.get(call.name)
        if tool is None:
            known = ", ".join(self._registry.names()) or "none"
            shown = call.name if len(call.name) <= NAME_SHOWN else call.name[:NAME_SHOWN] + "…"
            return _Prepared(call, None, None, f"unknown tool {shown!r}; tools: {known}")
        if refused and call.arguments in refused:
            return _Prepared(call, tool, None, refused[call.arguments])
        try:
            return self._parsed(call, tool)
        except RecursionError:
            problem = (
                "arguments are nested too deeply to read (objects or arrays inside each other)"
            )
            return _Prepared(call, tool, None, problem)
        except Exception as exc:  # whatever the model sent, the call fails and the run goes on
            why = safe_text(f"{type(exc).__name__}: {exc}")[:400]
            return _Prepared(call, tool, None, f"arguments could not be read ({why})")

    def _parsed(self, call: ToolCallBlock, tool: Tool) -> _Prepared:
        if call.arguments.startswith("{"):  # the usual call: parsed and validated in one go
            try:
                return _Prepared(
                    call, tool, tool.args_model.model_validate_json(call.arguments), None
                )
            except ValidationError:
                pass  # told the way the steps below tell it (not valid JSON, or which argument)
        try:
            raw: Any = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as exc:
            return _Prepared(call, tool, None, f"arguments are not valid JSON ({exc.msg})")
        if not isinstance(raw, dict):
            return _Prepared(call, tool, None, "arguments must be a JSON object")
        try:
            return _Prepared(call, tool, tool.args_model.model_validate(raw), None)
        except ValidationError as exc:
            return _Prepared(call, tool, None, _validation_problem(call.name, exc))

    async def run_all(
        self,
        calls: Sequence[ToolCallBlock],
        rec: RunRecorder,
        ctx: ToolContext,
        *,
        refused: Mapping[str, str] | None = None,
    ) -> list[ToolResultBlock]:
        """One result per call, in call order; read-only batches run concurrently (LOOP-5).

        `refused`: why a call is not run, by its arguments text (they held a lone surrogate)."""
        self.completed = {}
        prepared = [self._prepare(c, refused) for c in calls]
        parallel = (
            len(prepared) > 1
            and self._gate.read_only_unasked
            and all(p.tool is not None and p.tool.permission_class == "read_only" for p in prepared)
        )
        if parallel:
            running = [asyncio.ensure_future(self._one(p, rec, ctx)) for p in prepared]
            try:
                await asyncio.gather(*running)
            except asyncio.CancelledError:
                # gather has cancelled every call and returned at the first one that ended:
                # wait for the others too (a child agent reports its end), without cancelling
                # their clean-up again
                await asyncio.wait(running)
                raise
        else:
            for p in prepared:
                await self._one(p, rec, ctx)
        return [self.completed[c.id] for c in calls]

    async def _one(self, p: _Prepared, rec: RunRecorder, ctx: ToolContext) -> None:
        started = self._clock.monotonic()
        output, ran = await self._guarded(p, rec, ctx)
        if ran and self._hooks is not None:
            await self._after_tool(p, rec, output)
        content = output.content
        if not content.isascii():  # (the one boundary for what tools return: `ports.text`)
            content = safe_text(content)
        if len(content) > self._max_result_chars:
            content = await self._fit(content, p.call.name, ctx)
        block = ToolResultBlock(
            call_id=p.call.id,
            name=p.call.name,
            content=content,
            is_error=output.is_error,
            images=output.images,
        )
        self.completed[p.call.id] = block
        for event_class, fields in output.events:
            rec.event(event_class, **fields)
        for denial in output.denials:
            if denial.host is not None and denial.port is not None:  # the proxy's (SBX-4)
                rec.event(
                    NetworkDenied,
                    call_id=block.call_id,
                    name=block.name,
                    host=denial.host,
                    port=denial.port,
                    command=denial.command or "",
                    reason=denial.rule,
                    mechanism=denial.mechanism,
                )
                continue
            rec.event(
                SandboxDenied,
                call_id=block.call_id,
                name=block.name,
                kind=denial.kind,
                mechanism=denial.mechanism,
                error=denial.error,
                path=denial.path,
                rule=denial.rule,
            )
        rec.event(
            ToolResultEvent,
            call_id=block.call_id,
            name=block.name,
            content=block.content,
            is_error=block.is_error,
            duration_ms=(self._clock.monotonic() - started) * 1000,
        )

    async def _fit(self, content: str, tool: str, ctx: ToolContext) -> str:
        """A result longer than `max_result_chars` within it: stored whole as an artifact, the
        model shown a preview (cut, without an artifact store)."""
        if self._artifacts is None:
            return _cut(content, self._max_result_chars)
        try:
            info = await self._artifacts.save(
                session_id=ctx.session_id,
                run_id=ctx.run_id,
                filename=f"{tool}-output.txt",
                data=content.encode("utf-8"),
                preview_chars=PREVIEW_HEAD_CHARS,
            )
        except (OSError, SoongAgentError) as exc:  # the result still reaches the model, cut
            cut = _cut(content, self._max_result_chars)
            return f"{cut}\n[the whole result could not be stored as an artifact: {exc}]"
        return artifact_preview(content, artifact_id=info.id, size=info.size)

    async def _after_tool(self, p: _Prepared, rec: RunRecorder, output: ToolOutput) -> None:
        """The task_changed and post_tool_use hooks of a call whose tool ran."""
        assert self._hooks is not None
        tasks = p.tool is not None and p.tool.name in TASK_HOOKS and p.args is not None
        if tasks and not output.is_error:
            assert p.tool is not None and p.args is not None
            await self._hooks.task_changed(
                rec,
                tool=p.tool.name,
                arguments=p.args.model_dump(mode="json"),
                result=output.content,
            )
        if p.tool is not None:
            await self._hooks.post_tool_use(
                rec,
                tool=p.tool.name,
                call_id=p.call.id,
                output=output.content,
                is_error=output.is_error,
            )

    async def _pre_tool_use(
        self, p: _Prepared, rec: RunRecorder
    ) -> tuple[ToolCallBlock, BaseModel] | ToolOutput:
        """The call after the pre_tool_use hooks: blocked (the reason as an error result), with
        the arguments a hook replaced (validated again; the permission check follows), or as
        it was."""
        assert self._hooks is not None and p.tool is not None and p.args is not None
        tool, call = p.tool, p.call
        outcome = await self._hooks.pre_tool_use(
            rec, tool=tool.name, call_id=call.id, arguments=p.args.model_dump(mode="json")
        )
        if outcome.blocked is not None:
            return ToolOutput(
                f"Blocked by a pre_tool_use hook: {outcome.blocked}. This {tool.name} call did "
                "not run.",
                is_error=True,
            )
        if outcome.updated_input is None:
            return call, p.args
        try:
            args = tool.args_model.model_validate(outcome.updated_input)
        except ValidationError as exc:
            problem = _validation_problem(tool.name, exc)
            return ToolOutput(
                f"A pre_tool_use hook replaced the arguments with invalid ones ({problem}); "
                "the call did not run.",
                is_error=True,
            )
        updated = ToolCallBlock(
            id=call.id, name=call.name, arguments=json.dumps(outcome.updated_input)
        )
        return updated, args

    async def _guarded(
        self, p: _Prepared, rec: RunRecorder, ctx: ToolContext
    ) -> tuple[ToolOutput, bool]:
        """The call's output, and whether the tool itself ran (post_tool_use hooks fire only
        then: not for a call that was invalid, blocked or denied)."""
        if p.problem is not None or p.tool is None or p.args is None:
            return ToolOutput(p.problem or "invalid tool call", is_error=True), False
        tool, args, call = p.tool, p.args, p.call
        if self._hooks is not None:
            hooked = await self._pre_tool_use(p, rec)
            if isinstance(hooked, ToolOutput):
                return hooked, False
            call, args = hooked
        ran = False
        try:
            ruling = self._gate.allowed_unseen(
                call, tool, args, ctx, rec
            ) or await self._gate.check(call, tool, args, ctx, rec)
            decision = ruling.decision
            match decision:
                case "deny":
                    denied = ToolOutput(
                        f"Permission denied ({ruling.reason}): this {tool.name} call "
                        f"({ruling.summary}) did not run. Do not retry it unchanged.",
                        is_error=True,
                    )
                    return denied, False
                case "allow_once" | "allow_for_session":
                    ran = True
                    return await self._run(tool, args, _for_call(ctx, call.id), rec), True
                case _:
                    assert_never(decision)
        except SoongAgentError as exc:
            return ToolOutput(str(exc), is_error=True), ran
        except UnicodeEncodeError as exc:  # a text argument no file system or program can take
            return ToolOutput(
                f"invalid arguments for {tool.name}: a text argument holds "
                f"{exc.object[exc.start : exc.end]!a}, which is not valid Unicode text; the call "
                "did not run",
                is_error=True,
            ), ran
        except ValueError as exc:
            if "null byte" not in str(exc) and "null character" not in str(exc):
                return self._crashed(tool, exc, rec), ran
            return ToolOutput(
                f"invalid arguments for {tool.name}: a text argument holds a NUL character "
                "(\\x00), which no path, pattern or command can; the call did not run",
                is_error=True,
            ), ran
        except FileNotFoundError as exc:
            return ToolOutput(f"not found: {exc.filename or exc}", is_error=True), ran
        except OSError as exc:
            return ToolOutput(f"{type(exc).__name__}: {exc}", is_error=True), ran
        except Exception as exc:  # a tool's bug must not end the run; the model and events learn it
            return self._crashed(tool, exc, rec), ran

    async def _run(
        self, tool: Tool, args: BaseModel, ctx: ToolContext, rec: RunRecorder
    ) -> ToolOutput:
        """The permitted call run, what it may change kept before it runs (RWD-1)."""
        keeper = self._checkpoints
        pending = await keeper.before(tool, args, ctx, rec) if keeper is not None else None
        if not pending:
            return await tool.handler(args, ctx)
        assert keeper is not None
        try:
            output = await tool.handler(args, ctx)
        except asyncio.CancelledError:
            await keeper.after(pending, ctx, rec, cancelled=True)
            raise
        except BaseException:
            await keeper.after(pending, ctx, rec, cancelled=False)
            raise
        await keeper.after(pending, ctx, rec, cancelled=False)
        return output

    @staticmethod
    def _crashed(tool: Tool, exc: Exception, rec: RunRecorder) -> ToolOutput:
        message = safe_text(f"tool {tool.name} failed: {type(exc).__name__}: {exc}")
        rec.event(ErrorEvent, kind="tool_crash", message=message, fatal=False)
        return ToolOutput(message, is_error=True)


def _for_call(ctx: ToolContext, call_id: str) -> ToolContext:
    """`ctx` for one call: written out, as `dataclasses.replace` costs as much again per call."""
    return ToolContext(
        fs=ctx.fs,
        session_id=ctx.session_id,
        run_id=ctx.run_id,
        call_id=call_id,
        children=ctx.children,
        task_session_id=ctx.task_session_id,
        actor=ctx.actor,
        team=ctx.team,
    )
