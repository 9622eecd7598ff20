"""`soong-agent chat`: an interactive session (issue 18 item 3).

Each line typed is a run of the same session (the first one starts it, or `--session-id`
resumes one). Line editing and history come from the standard library's `readline` (history
kept in `${SOONG_AGENT_HOME}/chat_history`). Slash commands: `/compact` (compact the context
before the next message), `/cost` (tokens and cost of the session so far), `/sessions`,
`/branch MESSAGE_ID` (the next message starts a new branch from that earlier user message),
`/help`, `/exit`. Ctrl-C during a run cancels the run and keeps the session open; Ctrl-C at the
prompt, a second one during a run, or Ctrl-D leaves. Approvals are asked inline, on the
terminal, as in `run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from soong_agent.entrypoints.cli.common import EXIT_OK, guarded
from soong_agent.entrypoints.cli.render import Renderer
from soong_agent.ports.errors import SoongAgentError

if TYPE_CHECKING:
    from soong_agent.application.runs.handle import Run
    from soong_agent.application.runs.service import RunService
    from soong_agent.ports.storage import SessionStore

HELP = """\
/compact            compact the context before the next message
/cost               tokens and cost of this session so far
/sessions           the most recent sessions
/branch MESSAGE_ID  send the next message as a new branch from that earlier user message
/help               this list
/exit               leave (Ctrl-D too); Ctrl-C cancels a running answer
"""
PROMPT = "› "


@dataclass
class ChatState:
    """What the conversation carries from one message to the next."""

    session_id: str | None = None
    agent: str | None = None
    branch_from: str | None = None
    compact_next: bool = False
    interrupted: int = 0
    spent: dict[str, float] = field(default_factory=dict)


def _read_line(prompt: str) -> str | None:
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


async def _cost(store: SessionStore, session_id: str | None) -> str:
    from soong_agent.entrypoints.cli.sessions_cmd import _run_totals

    if session_id is None:
        return "nothing sent yet"
    runs = await store.list_runs(session_id)
    totals = [_run_totals(await store.run_events(r.id)) for r in runs]
    shown = "; ".join(t.lstrip(", ") for t in totals if t) or "no usage reported"
    return f"{len(runs)} run(s): {shown}"


async def _sessions(store: SessionStore) -> str:
    found = await store.list_sessions(limit=10)
    return "\n".join(f"{s.id}  {s.title[:60]}" for s in found) or "no sessions yet"


async def _one_run(service: RunService, renderer: Renderer, message: str, state: ChatState) -> None:
    run = await service.start(
        message,
        session_id=state.session_id,
        from_message=state.branch_from,
        agent=state.agent if state.session_id is None else None,
    )
    state.branch_from = None
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


async def _chat(path: str | None, session_id: str | None, agent: str | None = None) -> int:
    from soong_agent.entrypoints.cli.approve_modes import approver_for
    from soong_agent.entrypoints.cli.live_render import LiveRenderer, wants_live
    from soong_agent.entrypoints.containers import CliContainer
    from soong_agent.entrypoints.sdk import load

    loaded = load(path, None)
    renderer = LiveRenderer() if wants_live() else Renderer()
    container = CliContainer(
        loaded=loaded, approver=approver_for("ask", write=renderer.prompt, clean=renderer.clean)
    )
    state = ChatState(session_id=session_id, agent=agent)
    _history(str(loaded.home / "chat_history"))
    try:
        service = container.services.run_service()
        renderer.use_redactor(container.adapters.redactor())
        store: SessionStore = container.adapters.session_store()
        for warning in container.services.catalog().warnings:
            renderer.status(f"warning: {warning}")
        renderer.status("soong-agent chat: /help for commands, /exit or Ctrl-D to leave")
        while True:
            try:
                text = _read_line(PROMPT)
            except KeyboardInterrupt:
                sys.stdout.write("\n")
                return EXIT_OK
            if text is None:
                sys.stdout.write("\n")
                return EXIT_OK
            text = text.strip()
            if not text:
                continue
            if text.startswith("/"):
                command, _, arg = text.partition(" ")
                match command:
                    case "/exit" | "/quit":
                        return EXIT_OK
                    case "/help":
                        sys.stdout.write(HELP)
                    case "/compact":
                        state.compact_next = True
                        renderer.status("the context is compacted before the next message")
                    case "/cost":
                        renderer.status(await _cost(store, state.session_id))
                    case "/sessions":
                        renderer.status(await _sessions(store))
                    case "/branch" if arg.strip():
                        if state.session_id is None:
                            renderer.status("no session yet: send a message first")
                        else:
                            state.branch_from = arg.strip()
                            renderer.status(f"the next message branches from {arg.strip()}")
                    case _:
                        renderer.status(f"unknown command {command!r}; /help lists them")
                continue
            try:
                await _one_run(service, renderer, text, state)
            except SoongAgentError as exc:  # a mistake (a bad branch id…) must not end the chat
                renderer.status(f"error: {renderer.clean(str(exc))}")
                state.branch_from = None
    finally:
        closables = container.adapters.closables()
        while closables:
            await closables.pop()()


def chat_command(*, path: str | None, session_id: str | None, agent: str | None = None) -> int:
    """`soong-agent chat`."""

    def go() -> int:
        return asyncio.run(_chat(path, session_id, agent))

    return guarded(go)
