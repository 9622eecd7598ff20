"""The one interception pipeline every hook goes through (HOOK-1), for every kind of run.

`HookPipeline.fire` runs the commands registered for one hook type (and, for the tool types,
whose matcher accepts the tool): synchronous ones in registration order, each to its end
(fail-open: a crash, a timeout or garbage on stdout is a `hook_failed` event and changes
nothing), asynchronous ones in the background, never delaying the run and ended (their process
group killed) when the runtime closes. Each run of a hook is a `hook_ran` event with its exit
code, duration and decision. Commands run through the same `ProcessRunner` as `run_command`:
their own process group, a time limit, capped output, and only the allow-listed environment, so
a hook never sees an API key.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.domain.hooks import (
    HookEntry,
    HookSet,
    HookType,
    HookVerdict,
    hook_env,
    json_object,
    verdict,
)
from soong_agent.ports.events import HookFailed, HookRan
from soong_agent.ports.process import ProcessRunner

OUTPUT_LIMIT = 64 * 1024
"""Bytes of a hook's stdout (and of its stderr) that are kept; the rest is dropped."""


@dataclass(frozen=True, slots=True)
class HookContext:
    """Who fires: the session, run and agent, and how deep that agent is (0: the root)."""

    session_id: str
    run_id: str
    agent_id: str = "root"
    depth: int = 0


class HookPipeline:
    """Runs the hooks of one runtime; shared by all its runs (and, later, their children)."""

    def __init__(
        self,
        hooks: HookSet,
        runner: ProcessRunner,
        *,
        base_env: Mapping[str, str],
        cwd: str,
        default_timeout_s: float,
        shell: str = "/bin/sh",
    ) -> None:
        self._hooks = hooks
        self._runner = runner
        self._base_env = dict(base_env)
        self._cwd = cwd
        self._default_timeout_s = default_timeout_s
        self._shell = shell
        self._background: set[asyncio.Task[Any]] = set()

    def __bool__(self) -> bool:
        return bool(self._hooks)

    def registered(self, hook: HookType, tool: str | None = None) -> bool:
        """Whether any command would run for `hook` (and `tool`): callers skip building data."""
        return bool(self._hooks.entries(hook, tool))

    async def fire(
        self,
        hook: HookType,
        data: Mapping[str, Any],
        rec: RunRecorder,
        context: HookContext,
        *,
        tool: str | None = None,
    ) -> list[HookVerdict]:
        """Run the hooks of `hook`; the decisions of the synchronous ones, in order."""
        entries = self._hooks.entries(hook, tool)
        if not entries:
            return []
        payload = {  # who fires comes last: a type's data never passes for it
            "hook": hook,
            **data,
            "session_id": context.session_id,
            "run_id": context.run_id,
            "agent_id": context.agent_id,
            "depth": context.depth,
        }
        stdin = json.dumps(payload, ensure_ascii=False, default=str).encode()
        env = hook_env(hook, dict(data), self._base_env)
        verdicts: list[HookVerdict] = []
        for entry in entries:
            if entry.run_async:
                rec.event(
                    HookRan,
                    hook=hook,
                    command=entry.command,
                    exit_code=None,
                    duration_ms=0.0,
                    decision="started in the background",
                )
                task = asyncio.ensure_future(self._run(hook, entry, stdin, env))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
                continue
            result = await self._run(hook, entry, stdin, env)
            if result is None:
                continue
            outcome, exit_code, duration_ms, problem = result
            if problem is not None:
                rec.event(
                    HookFailed,
                    hook=hook,
                    command=entry.command,
                    reason=problem,
                    exit_code=exit_code,
                )
            rec.event(
                HookRan,
                hook=hook,
                command=entry.command,
                exit_code=exit_code,
                duration_ms=duration_ms,
                decision=outcome.decision,
            )
            verdicts.append(outcome)
        return verdicts

    async def _run(
        self, hook: HookType, entry: HookEntry, stdin: bytes, env: dict[str, str]
    ) -> tuple[HookVerdict, int | None, float, str | None] | None:
        timeout = entry.timeout if entry.timeout is not None else self._default_timeout_s
        try:
            result = await self._runner.run(
                [self._shell, "-c", entry.command],
                cwd=self._cwd,
                env=env,
                timeout_s=timeout,
                stdout_limit=OUTPUT_LIMIT,
                stderr_limit=OUTPUT_LIMIT,
                stdin=stdin,
            )
        except OSError as exc:  # the shell itself could not start: fail open
            return HookVerdict("none"), None, 0.0, f"could not start: {exc}"
        outcome = verdict(hook, result.exit_code, result.stdout, result.stderr)
        problem: str | None = None
        if result.timed_out:
            problem = f"timed out after {timeout:g} s"
        elif result.exit_code is None:
            problem = "it was killed"
        elif result.exit_code != 0 and outcome.decision == "none":
            problem = f"exited with {result.exit_code}: {_first_line(result.stderr)}"
        elif hook == "permission_request" and result.stdout.strip() and not _is_json(result.stdout):
            problem = "its output is not a JSON object; the user is asked as usual"
        return outcome, result.exit_code, result.duration_s * 1000, problem

    async def close(self, *, wait: bool = True) -> None:
        """End the hooks still running in the background: with `wait`, each may finish first
        (it is bounded by its own timeout, so closing waits no longer than the slowest of
        them); whatever still runs then, or when the close itself is cancelled, has its
        process group killed. No hook outlives the runtime."""
        tasks = list(self._background)
        if not tasks:
            return
        try:
            if wait:
                await asyncio.wait(tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:200] if lines else ""


def _is_json(text: str) -> bool:
    return json_object(text) is not None


@dataclass(frozen=True, slots=True)
class ToolHookOutcome:
    """What the `pre_tool_use` hooks decided for one call: block it (`blocked` is the reason
    the model gets), replace its arguments (`updated_input`), or nothing."""

    blocked: str | None = None
    updated_input: dict[str, Any] | None = None


class RunHooks:
    """The hooks of one run: `HookPipeline` bound to the run's `HookContext`, one method per
    fire point, each a no-op costing one lookup when no command is registered for it.

    The loop, the tool pipeline, the permission gate and compaction call these; what a hook
    may decide is applied here (per `domain.hooks.verdict`) and handed back in plain terms.
    """

    def __init__(
        self,
        pipeline: HookPipeline,
        context: HookContext,
        *,
        model: str,
        max_stop_continuations: int,
    ) -> None:
        self._pipeline = pipeline
        self._context = context
        self._model = model
        self._stops_left = max_stop_continuations

    @property
    def context(self) -> HookContext:
        return self._context

    def _on(self, hook: HookType, tool: str | None = None) -> bool:
        return self._pipeline.registered(hook, tool)

    async def _fire(
        self, hook: HookType, data: Mapping[str, Any], rec: RunRecorder, tool: str | None = None
    ) -> list[HookVerdict]:
        return await self._pipeline.fire(hook, data, rec, self._context, tool=tool)

    # --- the session and the run ----------------------------------------------------------------
    async def session_start(self, rec: RunRecorder, *, resumed: bool) -> None:
        if self._on("session_start"):
            data = {"session_id": self._context.session_id, "resumed": resumed}
            await self._fire("session_start", data, rec)

    async def session_end(
        self, rec: RunRecorder, *, status: str, turns: int, cost_usd: float | None
    ) -> None:
        if self._on("session_end"):
            data = {
                "session_id": self._context.session_id,
                "status": status,
                "turn_count": turns,
                "cost_usd": cost_usd,
            }
            await self._fire("session_end", data, rec)

    async def stop(self, rec: RunRecorder, *, reason: str) -> str | None:
        """The reminder to go on with, when a `stop` hook asks the agent to continue and the
        run has `hooks.max_stop_continuations` left; None: the run ends."""
        if not self._on("stop"):
            return None
        verdicts = await self._fire("stop", {"reason": reason}, rec)
        goes_on = [v.reason for v in verdicts if v.decision == "continue"]
        if not goes_on or self._stops_left <= 0:
            return None
        self._stops_left -= 1
        return "\n\n".join(goes_on)

    async def subagent_stop(
        self, rec: RunRecorder, *, agent_id: str, reason: str, session: str
    ) -> None:
        """A child agent of this run ended (AGT-2): fired in the parent's run, whose identity
        the payload's `agent_id` and `depth` keep; the child is `child_agent_id` and
        `child_session_id` on stdin, and `AGENT_ID` in the environment."""
        if self._on("subagent_stop"):
            data = {
                "agent_id": agent_id,  # the environment's AGENT_ID (domain.hooks.ENV_OF)
                "child_agent_id": agent_id,
                "reason": reason,
                "child_session_id": session,
            }
            await self._fire("subagent_stop", data, rec)

    async def notification(self, rec: RunRecorder, message: str) -> None:
        if self._on("notification"):
            await self._fire("notification", {"message": message}, rec)

    # --- model calls ---------------------------------------------------------------------------
    async def pre_sampling(self, rec: RunRecorder, *, turn: int, messages: int) -> str | None:
        """The reason a `pre_sampling` hook blocks this model call, or None."""
        if not self._on("pre_sampling"):
            return None
        data = {"model": self._model, "turn": turn, "message_count": messages}
        for v in await self._fire("pre_sampling", data, rec):
            if v.decision == "block":
                return v.reason or "a pre_sampling hook exited non-zero"
        return None

    async def post_sampling(
        self,
        rec: RunRecorder,
        *,
        turn: int,
        input_tokens: int,
        output_tokens: int,
        stop_reason: str | None,
        text: str,
    ) -> None:
        if self._on("post_sampling"):
            data = {
                "model": self._model,
                "turn": turn,
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "stop_reason": stop_reason,
                "response_preview": text,
            }
            await self._fire("post_sampling", data, rec)

    async def pre_compact(self, rec: RunRecorder, *, trigger: str, tokens: int) -> None:
        if self._on("pre_compact"):
            await self._fire("pre_compact", {"trigger": trigger, "tokens": tokens}, rec)

    # --- tool calls ---------------------------------------------------------------------------
    async def pre_tool_use(
        self, rec: RunRecorder, *, tool: str, call_id: str, arguments: dict[str, Any]
    ) -> ToolHookOutcome:
        if not self._on("pre_tool_use", tool):
            return NO_OUTCOME
        data = {"tool_name": tool, "call_id": call_id, "tool_input": arguments}
        updated: dict[str, Any] | None = None
        for v in await self._fire("pre_tool_use", data, rec, tool):
            if v.decision == "block":
                return ToolHookOutcome(blocked=v.reason or "blocked by a pre_tool_use hook")
            if v.decision == "update" and v.updated_input is not None:
                updated = v.updated_input
        return ToolHookOutcome(updated_input=updated) if updated is not None else NO_OUTCOME

    async def post_tool_use(
        self, rec: RunRecorder, *, tool: str, call_id: str, output: str, is_error: bool
    ) -> None:
        hook: HookType = "post_tool_use_failure" if is_error else "post_tool_use"
        if self._on(hook, tool):
            key = "tool_error" if is_error else "tool_output"
            await self._fire(hook, {"tool_name": tool, "call_id": call_id, key: output}, rec, tool)

    async def permission_request(
        self,
        rec: RunRecorder,
        *,
        tool: str,
        call_id: str,
        arguments: dict[str, Any],
        message: str,
    ) -> tuple[str, str] | None:
        """``("allow" | "deny", reason)`` when a `permission_request` hook answered; None: ask
        as usual. The first hook that answers decides."""
        if not self._on("permission_request", tool):
            return None
        data = {"tool_name": tool, "call_id": call_id, "tool_input": arguments, "message": message}
        for v in await self._fire("permission_request", data, rec, tool):
            if v.decision in ("allow", "deny"):
                return v.decision, v.reason
        return None

    async def task_changed(
        self, rec: RunRecorder, *, tool: str, arguments: dict[str, Any], result: str
    ) -> None:
        """The one call site of `task_created` / `task_completed` (TASK-1): after a
        `task_create` / `task_complete` call that succeeded."""
        hook: HookType | None = TASK_HOOKS.get(tool)
        if hook is None or not self._on(hook):
            return
        task = arguments.get("name") or arguments.get("task")
        if hook == "task_created":
            data = {"task_id": task, "task_title": arguments.get("title", ""), "result": result}
        else:
            step = arguments.get("step_id")
            data = {"task_id": f"{task}/{step}", "task_status": "done", "result": result}
        await self._fire(hook, data, rec)

    async def permission_denied(
        self, rec: RunRecorder, *, tool: str, call_id: str, reason: str
    ) -> None:
        if self._on("permission_denied", tool):
            data = {"tool_name": tool, "call_id": call_id, "reason": reason}
            await self._fire("permission_denied", data, rec, tool)


NO_OUTCOME = ToolHookOutcome()
TASK_HOOKS: dict[str, HookType] = {"task_create": "task_created", "task_complete": "task_completed"}
"""The task tools whose success fires a hook, and which."""
