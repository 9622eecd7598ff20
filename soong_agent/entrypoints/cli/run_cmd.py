"""`soong-agent run`: stream one run; Ctrl-C cancels it and leaves the session consistent."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from soong_agent.application.runs.handle import Run, RunResult
from soong_agent.entrypoints.cli.common import (
    EXIT_CANCELLED,
    EXIT_OK,
    exit_code_for,
    exit_now,
    fail,
    guarded,
    tolerant_streams,
)
from soong_agent.entrypoints.cli.elicitation import with_questions
from soong_agent.entrypoints.cli.overrides import Overrides
from soong_agent.entrypoints.cli.render import Renderer
from soong_agent.ports.errors import UsageError
from soong_agent.ports.text import safe_text

if TYPE_CHECKING:
    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.domain.run_limits import RunLimits
    from soong_agent.entrypoints.cli.json_output import JsonRenderer
    from soong_agent.entrypoints.containers import CliContainer
    from soong_agent.entrypoints.factories import CommandSandboxing


def run_command(
    message: str,
    *,
    path: str | None,
    session_id: str | None,
    from_message: str | None = None,
    orchestrator: bool,
    agent: str | None,
    tool_choice: str | None = None,
    max_cost: float | None = None,
    max_tokens: int | None = None,
    timeout: float | None = None,
    output: str = "text",
    approve: str = "ask",
    plan: bool = False,
    resume_latest: bool = False,
    overrides: Overrides | None = None,
    images: tuple[str, ...] = (),
) -> int:
    def go() -> int:
        from soong_agent.entrypoints.run_options import parse_limits

        tolerant_streams()
        if output not in ("text", "json"):
            raise UsageError(f"--output: expected text or json, found {output!r}")
        if resume_latest and session_id is not None:
            raise UsageError(
                "--continue resumes the latest session; --session-id names one: give one"
            )
        wall_ms = None if timeout is None else max(1, round(timeout * 1000))
        limits = parse_limits(max_cost, max_tokens, wall_ms)
        choices = RunChoices(
            tool_choice,
            limits,
            output,
            approve,
            plan,
            overrides or Overrides(),
            resume_latest,
            images,
        )
        return asyncio.run(
            _run(message, path, session_id, from_message, orchestrator, agent, choices)
        )

    return guarded(go)


def _exit_cancelled(signum: int, frame: object) -> None:
    exit_now(EXIT_CANCELLED)


def _on_interrupt(run: Run, renderer: Renderer | JsonRenderer, state: dict[str, object]) -> None:
    if state.get("cancelling"):
        renderer.status("interrupted again: exiting now")
        exit_now(EXIT_CANCELLED)
    state["cancelling"] = True
    renderer.status("cancelling… (Ctrl-C again to exit at once)")
    state["task"] = asyncio.ensure_future(run.cancel())


def _on_terminate(run: Run, renderer: Renderer | JsonRenderer, state: dict[str, object]) -> None:
    if state.get("cancelling"):
        exit_now(EXIT_TERMINATED)
    state["terminated"] = True
    _on_interrupt(run, renderer, state)


EXIT_TERMINATED = 143
"""128 + SIGTERM, what a shell reports for a process that SIGTERM ended."""


@dataclass(frozen=True)
class RunChoices:
    """What the command line chose for this run beyond the message and the session."""

    tool_choice: str | None
    limits: RunLimits | None
    output: str
    approve: str
    plan: bool = False
    overrides: Overrides = field(default_factory=Overrides)
    resume_latest: bool = False
    images: tuple[str, ...] = ()


async def _run(
    message: str,
    path: str | None,
    session_id: str | None,
    from_message: str | None,
    orchestrator: bool,
    agent: str | None,
    choices: RunChoices,
) -> int:
    from soong_agent.entrypoints.cli.approve_modes import approver_for
    from soong_agent.entrypoints.containers import CliContainer
    from soong_agent.entrypoints.sdk import load, parse_tool_choice, read_images

    choice = parse_tool_choice(choices.tool_choice)
    limits = choices.limits
    renderer: Renderer | JsonRenderer = Renderer()
    if choices.output == "text":
        from soong_agent.entrypoints.cli.live_render import LiveRenderer, wants_live

        if wants_live():
            renderer = LiveRenderer()
    if choices.output == "json":
        from soong_agent.entrypoints.cli.json_output import JsonRenderer as Json

        renderer = Json()
    approver = approver_for(choices.approve, write=renderer.prompt, clean=renderer.clean)
    loaded = choices.overrides.applied(load(path, None))
    blocks = read_images(choices.images, loaded)  # (before anything starts: a bad file, exit 2)
    container = with_questions(CliContainer(loaded=loaded, approver=approver), choices.output)
    _set_up_sandboxing_meanwhile(container, loaded)
    try:
        if choices.resume_latest:
            from soong_agent.entrypoints.cli.overrides import latest_session

            store = container.adapters.session_store()
            session_id = await latest_session(store, str(loaded.project))
        service = container.services.run_service()
        renderer.use_redactor(container.adapters.redactor())
        run = await service.start(
            message,
            session_id=session_id,
            from_message=from_message,
            tool_choice=choice,
            limits=limits,
            plan_mode=choices.plan,
            agent=agent,
            orchestrator=orchestrator,
            images=blocks,
        )
        for warning in container.services.catalog().warnings:
            renderer.status(f"warning: {warning}")
        renderer.status(f"session {run.session_id}{' (resumed)' if session_id else ''}")
        loop = asyncio.get_running_loop()
        state: dict[str, object] = {}
        loop.add_signal_handler(signal.SIGINT, _on_interrupt, run, renderer, state)
        # SIGTERM (a CI timeout, `docker stop`, kill): the same cancel, so the run is not left
        # "running" in the session for ever; then the conventional 143
        loop.add_signal_handler(signal.SIGTERM, _on_terminate, run, renderer, state)
        try:
            async for event in run.events():
                renderer.handle(event)
            result = await run.wait()
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
            # the run is over and saved: a Ctrl-C from here on (the user's second one, say)
            # exits at once with the cancelled code instead of a traceback or a signal death
            signal.signal(signal.SIGINT, _exit_cancelled)
        team = service.team_of(run.session_id)
        if team is not None:  # teammates go on after the lead's turn: let them finish
            renderer.status("waiting for the teammates to finish (Ctrl-C stops them)")
            await team.settle(run.session_id)
        renderer.finished(result)
        if state.get("terminated") and result.status == "cancelled":
            return fail("run terminated (SIGTERM); the session was saved", EXIT_TERMINATED)
        return _exit_code(result, renderer.clean)
    finally:
        from soong_agent.entrypoints.closing import close_all

        await close_all(container.adapters.closables())


def _set_up_sandboxing_meanwhile(container: CliContainer, loaded: LoadedConfig) -> None:
    """Probe the OS sandbox and build the commands' policy on a thread of their own while the
    rest of the run is built: the probe's trial command and the project scan for sensitive
    names (up to thousands of folder entries) mostly wait on the kernel. The container takes
    the result where it needed it (an error, a bad write root say, is raised there)."""
    import threading
    from concurrent.futures import Future

    from dependency_injector import providers

    from soong_agent.entrypoints import factories

    outcome: Future[CommandSandboxing] = Future()
    closables = container.adapters.closables()

    def work() -> None:
        try:
            outcome.set_result(factories.command_sandboxing(loaded, closables))
        except BaseException as exc:  # raised where the container takes it
            outcome.set_exception(exc)

    threading.Thread(target=work, name="soong-sandbox-setup", daemon=True).start()
    container.adapters.command_sandboxing.override(providers.Singleton(outcome.result))


def _exit_code(result: RunResult, clean: Callable[[str], str]) -> int:
    """The exit code of a finished run; its last line (reason or error) is scrubbed of
    secrets (`clean`) like everything else printed."""
    if result.status == "completed":
        return EXIT_OK
    if result.status == "cancelled":
        return fail("run cancelled; the session was saved", EXIT_CANCELLED)
    if result.error is not None:
        reason = result.reason or safe_text(str(result.error)) or type(result.error).__name__
        return fail(_one_line(clean(reason)), exit_code_for(result.error))
    return fail(_one_line(clean(result.reason or result.status)), 1)


def _one_line(text: str) -> str:
    """`text` on one line (an error's text may run over several)."""
    return " ".join(text.split("\n")) if "\n" in text else text
