"""`soong-agent chat`: an interactive session (issue 18 item 3, CLI-4).

Each line typed is a run of the same session (the first one starts it, `--session-id` resumes
one, `-c/--continue` the project's latest). Line editing and history come from the standard
library's `readline` (history kept in `${SOONG_AGENT_HOME}/chat_history`). The slash commands
are in `chat_commands` (`/help` lists them). Ctrl-C during a run cancels the run and keeps the
session open; Ctrl-C at the prompt, a second one during a run, or Ctrl-D leaves. Approvals are
asked inline, on the terminal, as in `run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import TYPE_CHECKING

from soong_agent.entrypoints.cli.chat_commands import Chat, ChatState, handle
from soong_agent.entrypoints.cli.common import EXIT_OK, guarded
from soong_agent.entrypoints.cli.overrides import Overrides
from soong_agent.entrypoints.cli.render import Renderer
from soong_agent.ports.errors import SoongAgentError

if TYPE_CHECKING:
    from soong_agent.application.runs.handle import Run

PROMPT = "› "


def read_line(prompt: str) -> str | None:
    """One line from the user; None at end of input (Ctrl-D); KeyboardInterrupt on Ctrl-C.

    Read on the event loop's thread on purpose: between runs nothing of the session needs the
    loop, and a Ctrl-C must interrupt `input` (Python's own handler, not asyncio's, is set
    for that while the prompt waits)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return input(prompt)
    except EOFError:
        return None


def _history(path: str) -> None:
    try:
        import readline
    except ImportError:  # no line editing on this platform: plain input still works
        return
    with contextlib.suppress(OSError):  # no history yet
        readline.read_history_file(path)
    readline.set_history_length(1000)
    import atexit

    atexit.register(_save_history, readline, path)


def _save_history(readline: object, path: str) -> None:
    try:
        readline.write_history_file(path)  # type: ignore[attr-defined]
    except OSError as exc:
        sys.stderr.write(f"soong-agent: warning: chat history not saved: {exc}\n")


async def _one_run(chat: Chat, message: str) -> None:
    state, renderer = chat.state, chat.renderer
    run = await chat.runtime.service.start(
        message,
        session_id=state.session_id,
        from_message=state.branch_from,
        agent=state.agent if state.session_id is None else None,
    )
    state.branch_from = None
    state.run_ids.append(run.run_id)
    pending: list[asyncio.Future[object]] = []
    if state.compact_next:  # compacted before the run's first model call
        state.compact_next = False
        pending.append(asyncio.ensure_future(run.compact()))
    state.session_id = run.session_id
    loop = asyncio.get_running_loop()
    cancelled: list[Run] = []

    def interrupt() -> None:
        if cancelled:
            renderer.status("interrupted again: leaving")
            raise SystemExit(130)
        cancelled.append(run)
        renderer.status("cancelling this answer… (Ctrl-C again to leave)")
        pending.append(asyncio.ensure_future(run.cancel()))

    loop.add_signal_handler(signal.SIGINT, interrupt)
    try:
        async for event in run.events():
            renderer.handle(event)
        result = await run.wait()
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    for task in pending:  # the compaction answered, or the run ended before it (UsageError)
        with contextlib.suppress(SoongAgentError):
            await task
    renderer.finished(result)
    if result.status not in ("completed", "cancelled") and result.reason:
        renderer.status(f"  ({result.status}: {renderer.clean(result.reason)})")


async def _chat(
    path: str | None,
    session_id: str | None,
    agent: str | None,
    resume_latest: bool,
    overrides: Overrides,
) -> int:
    from soong_agent.entrypoints.cli.chat_commands import ChatRuntime
    from soong_agent.entrypoints.cli.live_render import LiveRenderer, wants_live
    from soong_agent.entrypoints.sdk import load
    from soong_agent.ports.errors import UsageError

    if resume_latest and session_id is not None:
        raise UsageError("--continue resumes the latest session; --session-id names one: give one")
    renderer = LiveRenderer() if wants_live() else Renderer()
    base = Overrides(permission_mode=overrides.permission_mode, max_turns=overrides.max_turns)
    runtime = ChatRuntime(base.applied(load(path, None)), renderer, overrides.model)
    chat = Chat(ChatState(session_id=session_id, agent=agent), runtime, renderer, read_line)
    _history(str(runtime.loaded.home / "chat_history"))
    try:
        if resume_latest:
            from soong_agent.entrypoints.cli.overrides import latest_session

            chat.state.session_id = await latest_session(runtime.store, str(runtime.loaded.project))
            renderer.status(f"continuing session {chat.state.session_id}")
        for warning in runtime.container.services.catalog().warnings:
            renderer.status(f"warning: {warning}")
        renderer.status("soong-agent chat: /help for commands, /exit or Ctrl-D to leave")
        return await _loop(chat)
    finally:
        await chat.runtime.close()


async def _loop(chat: Chat) -> int:
    while True:
        try:
            text = chat.read(PROMPT)
        except KeyboardInterrupt:
            sys.stdout.write("\n")
            return EXIT_OK
        if text is None:
            sys.stdout.write("\n")
            return EXIT_OK
        text = text.strip()
        if not text:
            continue
        try:
            if text.startswith("/"):
                if not await handle(chat, text):
                    return EXIT_OK
                continue
            await _one_run(chat, text)
        except SoongAgentError as exc:  # a mistake (a bad branch id…) must not end the chat
            chat.renderer.status(f"error: {chat.renderer.clean(str(exc))}")
            chat.state.branch_from = None


def chat_command(
    *,
    path: str | None,
    session_id: str | None,
    agent: str | None = None,
    resume_latest: bool = False,
    overrides: Overrides | None = None,
) -> int:
    """`soong-agent chat`."""

    def go() -> int:
        return asyncio.run(_chat(path, session_id, agent, resume_latest, overrides or Overrides()))

    return guarded(go)
