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

from soong_agent.application.recorder import RunRecorder
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
        payload = {
            "hook": hook,
            "session_id": context.session_id,
            "run_id": context.run_id,
            "agent_id": context.agent_id,
            "depth": context.depth,
            **data,
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

    async def close(self) -> None:
        """End the hooks still running in the background (their process groups are killed)."""
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:200] if lines else ""


def _is_json(text: str) -> bool:
    return json_object(text) is not None
