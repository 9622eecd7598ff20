"""The slash commands of `soong-agent chat` (issue 18 item 3, CLI-4, RWD-1), and the runtime a
chat runs in, which `/model` builds again for another model."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from soong_agent.entrypoints.cli.render import Renderer
from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:
    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.application.runs.service import RunService
    from soong_agent.entrypoints.containers import CliContainer
    from soong_agent.ports.storage import SessionStore

HELP = """\
/model [NAME]       show the model, or use NAME for the following messages
/permissions        the permission mode, the rules, and what this session allowed for itself
/undo               put back what the last turn changed and take that turn back
/rewind [N|ID]      list the turns; go back to before turn N (or message ID)
                    (/undo and /rewind take --files-only, --conversation-only, --force)
/clear              start a new session with the next message
/compact            compact the context before the next message
/cost               tokens and cost of this session so far
/sessions           the most recent sessions
/branch MESSAGE_ID  send the next message as a new branch from that earlier user message
/help               this list
/exit               leave (Ctrl-D too); Ctrl-C cancels a running answer
"""
REWIND_FLAGS = ("--files-only", "--conversation-only", "--force")


@dataclass
class ChatState:
    """What the conversation carries from one message to the next."""

    session_id: str | None = None
    agent: str | None = None
    branch_from: str | None = None
    compact_next: bool = False
    interrupted: int = 0
    spent: dict[str, float] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)
    """The runs this chat's runtime started (whose approvals `/permissions` lists)."""


class ChatRuntime:
    """The container, run service and store a chat runs with; `/model` makes them anew."""

    def __init__(self, base: LoadedConfig, renderer: Renderer, model: str | None) -> None:
        self._base = base
        self._renderer = renderer
        self.model = model
        self._build()

    def _build(self) -> None:
        from soong_agent.entrypoints.cli.approve_modes import approver_for
        from soong_agent.entrypoints.cli.elicitation import with_questions
        from soong_agent.entrypoints.cli.overrides import with_model
        from soong_agent.entrypoints.containers import CliContainer

        renderer = self._renderer
        self.loaded = with_model(self._base, self.model) if self.model else self._base
        self.container: CliContainer = with_questions(  # MCP-4: a server's questions
            CliContainer(
                loaded=self.loaded,
                approver=approver_for("ask", write=renderer.prompt, clean=renderer.clean),
            )
        )
        self.service: RunService = self.container.services.run_service()
        renderer.use_redactor(self.container.adapters.redactor())
        self.store: SessionStore = self.container.adapters.session_store()

    async def switch(self, model: str) -> None:
        """Use `model` from now on (the configuration checked before the old runtime goes)."""
        from soong_agent.entrypoints.cli.overrides import with_model

        with_model(self._base, model)
        await self.close()
        self.model = model
        self._build()

    def model_line(self) -> str:
        profile = self.container.adapters.main_profile()
        model = profile.model
        return f"model {model.name or '(unnamed)'} ({model.provider}, {profile.source})"

    async def close(self) -> None:
        from soong_agent.entrypoints.closing import close_all

        await close_all(self.container.adapters.closables())


@dataclass
class Chat:
    """A chat: its state, its runtime, where it writes and how it reads a line."""

    state: ChatState
    runtime: ChatRuntime
    renderer: Renderer
    read: Callable[[str], str | None]


async def handle(chat: Chat, text: str) -> bool:
    """Carry out one slash command; False when the chat should end."""
    command, _, arg = text.partition(" ")
    arg = arg.strip()
    state, say = chat.state, chat.renderer.status
    match command:
        case "/exit" | "/quit":
            return False
        case "/help":
            sys.stdout.write(HELP)
        case "/compact":
            state.compact_next = True
            say("the context is compacted before the next message")
        case "/cost":
            say(await _cost(chat.runtime.store, state.session_id))
        case "/sessions":
            say(await _sessions(chat.runtime.store))
        case "/branch" if arg:
            if state.session_id is None:
                say("no session yet: send a message first")
            else:
                state.branch_from = arg
                say(f"the next message branches from {arg}")
        case "/model":
            await _model(chat, arg)
        case "/clear":
            state.session_id, state.branch_from, state.compact_next = None, None, False
            state.run_ids.clear()
            say("cleared: the next message starts a new session")
        case "/permissions":
            say(await _permissions(chat))
        case "/undo":
            await _undo(chat, arg)
        case "/rewind":
            await _rewind(chat, arg)
        case _:
            say(f"unknown command {command!r}; /help lists them")
    return True


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


async def _model(chat: Chat, name: str) -> None:
    if name:
        had_grants = bool(await _grants(chat))
        await chat.runtime.switch(name)
        chat.state.run_ids.clear()
        note = " (what you allowed for this session is asked again)" if had_grants else ""
        chat.renderer.status(f"the following messages use {name}{note}")
    chat.renderer.status(chat.runtime.model_line())


async def _grants(chat: Chat) -> list[str]:
    """What `allow_for_session` answers gave in this chat's runs of its session."""
    from soong_agent.ports.events import PermissionAsked, PermissionDecided

    store, out = chat.runtime.store, []
    for run_id in chat.state.run_ids:
        asked: dict[str, str] = {}
        for event in await store.run_events(run_id):
            if event.session_id != chat.state.session_id:
                continue
            if isinstance(event, PermissionAsked):
                asked[event.call_id] = event.session_scope
            elif isinstance(event, PermissionDecided) and event.decision == "allow_for_session":
                scope = asked.get(event.call_id, f"every {event.tool} call")
                if scope not in out:
                    out.append(scope)
    return out


async def _permissions(chat: Chat) -> str:
    from soong_agent.application.permissions.plan_mode import stored_plan_mode

    policy = chat.runtime.loaded.config.permissions
    session = chat.state.session_id
    planning = session is not None and bool(await stored_plan_mode(chat.runtime.store, session))
    lines = [
        f"mode: {policy.mode}" + (" (this session is in plan mode)" if planning else ""),
        f"reading: {policy.readonly_default}; with nobody to ask, writes: "
        f"{policy.write_without_callback}",
        "allow rules: " + (", ".join(policy.allow) or "none"),
        "deny rules: " + (", ".join(policy.deny) or "none"),
        "protected paths: " + (", ".join(policy.protected_paths) or "none"),
    ]
    grants = await _grants(chat)
    lines.append("allowed for this session: " + ("; ".join(grants) or "nothing yet"))
    return "\n".join(lines)


def _rewind_flags(words: list[str]) -> dict[str, bool]:
    unknown = [w for w in words if w.startswith("--") and w not in REWIND_FLAGS]
    if unknown:
        raise UsageError(f"unknown option {unknown[0]}; use {', '.join(REWIND_FLAGS)}")
    if "--files-only" in words and "--conversation-only" in words:
        raise UsageError("--files-only and --conversation-only: give at most one")
    return {
        "files": "--conversation-only" not in words,
        "conversation": "--files-only" not in words,
        "force": "--force" in words,
    }


async def _undo(chat: Chat, arg: str) -> None:
    flags = _rewind_flags(arg.split())
    turns = await _turns(chat)
    if not turns:
        chat.renderer.status("nothing to undo: this session has no turn yet")
        return
    await _rewind_to(chat, turns[-1].message_id, flags)


async def _rewind(chat: Chat, arg: str) -> None:
    words = arg.split()
    flags = _rewind_flags(words)
    picked = [w for w in words if not w.startswith("--")]
    turns = await _turns(chat)
    if not turns:
        chat.renderer.status("nothing to rewind: this session has no turn yet")
        return
    if not picked:
        for number, turn in enumerate(turns, 1):
            changed = f"{turn.files} file(s), {turn.commands} command(s)"
            text = " ".join(turn.text.split())[:60]
            chat.renderer.status(f"{number:3}  {turn.message_id}  {text!r}  ({changed})")
        try:
            answer = chat.read("rewind to before which turn? (number; Enter: none) ")
        except KeyboardInterrupt:
            answer = None
        picked = [answer.strip()] if answer and answer.strip() else []
        if not picked:
            chat.renderer.status("no rewind")
            return
    choice = picked[0]
    if choice.isdigit() and 1 <= int(choice) <= len(turns):
        choice = turns[int(choice) - 1].message_id
    elif choice.isdigit():
        raise UsageError(f"no turn {choice}: pick 1 to {len(turns)}")
    await _rewind_to(chat, choice, flags)


async def _turns(chat: Chat) -> list[Any]:
    from soong_agent.entrypoints.rewinding import rewind_service

    if chat.state.session_id is None:
        return []
    return await rewind_service(chat.runtime.container.adapters).turns(chat.state.session_id)


async def _rewind_to(chat: Chat, message_id: str, flags: dict[str, bool]) -> None:
    from soong_agent.entrypoints.cli.rewind_cmd import report_lines
    from soong_agent.entrypoints.rewinding import rewind_service

    assert chat.state.session_id is not None
    service = rewind_service(chat.runtime.container.adapters)
    report = await service.rewind(chat.state.session_id, to=message_id, **flags)
    for line in report_lines(report):
        chat.renderer.status(chat.renderer.clean(line))
    if report.refused:
        chat.renderer.status("  (/undo --force or /rewind … --force overwrites them)")
    elif report.conversation:
        chat.state.branch_from = None
        _offer_again(report.message)


def _offer_again(text: str) -> None:
    """Put the rewound message in the next prompt's line, to send again or change (on a
    terminal with line editing)."""
    if not sys.stdin.isatty():
        return
    try:
        import readline
    except ImportError:
        return

    def hook() -> None:
        readline.insert_text(text.replace("\n", " "))
        readline.redisplay()
        readline.set_pre_input_hook(None)

    readline.set_pre_input_hook(hook)
