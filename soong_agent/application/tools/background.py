"""Background commands (BG-1): `run_command(background=true)`, `command_output`, `command_kill`.

`BackgroundCommands` holds the background commands of one runtime, shared by its runs. A
command started in the background is checked and sandboxed exactly as a foreground one (the
same `run_command` call goes through the same permission gate; `background` does not change the
decision) and gets an id (``bg-1``, ``bg-2``…) at once. At most `limit`
(`tools.max_background_commands`) run at a time.

A command belongs to the session whose run started it: only that session's runs read it, kill
it and are told when it ends. Its end is told once, whichever comes first: a `command_output`
or `command_kill` result that shows it ended, or a notice (`notices`) the run loop adds before
the session's next model request (the id, how it ended, its last lines).

`close` kills every command still running (the runtime's `aclose`, the CLI's exit); the
process runner also makes sure none outlives the agent's process (its lifeline).

What the tools return is capped by the runner's buffers (the newest bytes of each stream up to
`tools.stdout_limit_bytes` / `stderr_limit_bytes` per read) and then like any tool result
(`tools.max_result_chars`); secrets are scrubbed where every result is (the run recorder).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pydantic import Field, field_validator

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.ports.process import BackgroundOutput, BackgroundProcess

NOTICE_LINES = 8
"""How many of its last lines an exit notice shows."""
LINE_MAX_CHARS = 300
"""Longer lines of a notice are cut."""
COMMAND_SHOWN = 80
"""How much of its command line names a command in a notice."""
KEEP_ENDED = 32
"""Ended commands whose end was told are forgotten past this many (the oldest first)."""


class BackgroundLimit(Exception):
    """No background command can start now: the limit is reached, or the runtime is closing."""


@dataclass(slots=True)
class _Command:
    id: str
    session_id: str
    command: str
    process: BackgroundProcess
    timeout_ms: int
    told: bool = False
    """Its end was shown to the model (a result or a notice)."""


def _ended(output: BackgroundOutput, timeout_ms: int) -> str:
    """How a command ended, in a few words."""
    if output.state == "timed_out":
        return f"killed after its timeout of {timeout_ms / 1000:g} s"
    if output.state == "killed":
        return "killed"
    code = output.exit_code
    if code is not None and code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"


def _shown(command: str) -> str:
    first = (command.strip().splitlines() or [""])[0]
    if len(first) > COMMAND_SHOWN or "\n" in command.strip():
        first = first[: COMMAND_SHOWN - 2].rstrip() + " …"
    return first


class BackgroundCommands:
    """The background commands of one runtime (see the module documentation)."""

    def __init__(self, *, limit: int) -> None:
        self.limit = limit
        self._commands: dict[str, _Command] = {}
        self._untold: dict[str, _Command] = {}
        """Commands whose end was not told yet (running ones included)."""
        self._starting = 0
        self._count = 0
        self._closed = False

    # --- starting ------------------------------------------------------------------------------
    async def launch(
        self,
        start: Callable[[], Awaitable[BackgroundProcess]],
        *,
        session_id: str,
        command: str,
        timeout_ms: int,
    ) -> str:
        """Start a command through `start` (the runner's `start`) and give it an id.

        Raises BackgroundLimit when `limit` commands run already (or the runtime is closing),
        and what `start` raises when it cannot start (nothing is kept then)."""
        if self._closed:
            raise BackgroundLimit("the runtime is closing: no background command can start")
        running = self._starting + sum(1 for c in self._untold.values() if _runs(c))
        if running >= self.limit:
            raise BackgroundLimit(
                f"{running} background commands are running, the most there may be "
                f"(tools.max_background_commands = {self.limit}); end one with command_kill, "
                "or wait for one to end"
            )
        self._starting += 1  # held before the start, so parallel calls cannot pass the limit
        try:
            process = await start()
        finally:
            self._starting -= 1
        if self._closed:  # closed while it started: it must not outlive the runtime
            await process.kill()
            raise BackgroundLimit("the runtime is closing: no background command can start")
        self._count += 1
        entry = _Command(f"bg-{self._count}", session_id, command, process, timeout_ms)
        self._commands[entry.id] = entry
        self._untold[entry.id] = entry
        self._forget_old()
        return entry.id

    def _forget_old(self) -> None:
        told = [c for c in self._commands.values() if c.told]
        for entry in told[: max(0, len(told) - KEEP_ENDED)]:
            del self._commands[entry.id]

    # --- what the tools and the loop ask -------------------------------------------------------
    def _of(self, command_id: str, session_id: str) -> _Command | str:
        """The session's command `command_id`, or why there is none."""
        entry = self._commands.get(command_id.strip())
        if entry is not None and entry.session_id == session_id:
            return entry
        mine = [c.id for c in self._commands.values() if c.session_id == session_id]
        known = f"this session's: {', '.join(mine)}" if mine else "this session has none"
        return f"no background command {command_id!r} ({known})"

    def unsandboxed(self, command_id: str) -> bool:
        """Whether the command runs without an OS sandbox (its runner has one, it did not)."""
        entry = self._commands.get(command_id)
        return entry is not None and entry.process.sandbox == "none"

    def output(self, command_id: str, session_id: str) -> ToolOutput:
        """What `command_output` returns: the output since the last read and the status."""
        entry = self._of(command_id, session_id)
        if isinstance(entry, str):
            return ToolOutput(entry, is_error=True)
        return ToolOutput(self._report(entry, entry.process.read()))

    async def kill(self, command_id: str, session_id: str) -> ToolOutput:
        """What `command_kill` returns: the command's group ended, its last unread output."""
        entry = self._of(command_id, session_id)
        if isinstance(entry, str):
            return ToolOutput(entry, is_error=True)
        already = entry.process.state != "running"
        if not already:
            await entry.process.kill()
        text = self._report(entry, entry.process.read())
        return ToolOutput(f"{entry.id} had already ended. {text}" if already else text)

    def _report(self, entry: _Command, output: BackgroundOutput) -> str:
        if output.state == "running":
            head = f"{entry.id} is running: {_shown(entry.command)}"
        else:
            head = f"{entry.id} ended ({_ended(output, entry.timeout_ms)}): {_shown(entry.command)}"
            self._told(entry)
        parts = [head]
        parts.extend(denial.note() for denial in output.denials)
        streams = (
            ("stdout", output.stdout, output.stdout_dropped),
            ("stderr", output.stderr, output.stderr_dropped),
        )
        shown = False
        for name, text, dropped in streams:
            if not text and not dropped:
                continue
            shown = True
            parts.append(f"--- {name} ---")
            if dropped:
                parts.append(f"[{dropped} earlier bytes of {name} were dropped unread]")
            if text:
                parts.append(text.removesuffix("\n"))
        if not shown:
            parts.append("(no new output since the last read)")
        return "\n".join(parts)

    def _told(self, entry: _Command) -> None:
        entry.told = True
        self._untold.pop(entry.id, None)

    def notices(self, session_id: str) -> str:
        """The ends of the session's background commands not told yet, one notice each (the
        text of a message before the next model request); "" when there are none."""
        if not self._untold:  # the usual turn: nothing runs in the background
            return ""
        notes = []
        for entry in list(self._untold.values()):
            if entry.session_id != session_id or entry.process.state == "running":
                continue
            state = entry.process.state
            code = entry.process.exit_code
            how = _ended(BackgroundOutput("", "", state, code), entry.timeout_ms)
            lines = [
                f"[background command {entry.id} ended ({how}): {_shown(entry.command)}]",
            ]
            tail = entry.process.tail(NOTICE_LINES)
            if tail:
                lines.append("Its last lines of output:")
                lines.extend(_cut(line) for line in tail.splitlines())
            lines.append(f'(its unread output: command_output(id="{entry.id}"))')
            notes.append("\n".join(lines))
            self._told(entry)
        return "\n\n".join(notes)

    # --- the end ------------------------------------------------------------------------------
    async def close(self) -> None:
        """Kill every command still running; none can start afterwards."""
        self._closed = True
        running = [c.process for c in self._commands.values() if _runs(c)]
        if running:
            await asyncio.gather(*(p.kill() for p in running), return_exceptions=True)


def _runs(entry: _Command) -> bool:
    return entry.process.state == "running"


def _cut(line: str) -> str:
    return line if len(line) <= LINE_MAX_CHARS else line[: LINE_MAX_CHARS - 1] + "…"


class CommandIdArgs(ToolArgs):
    id: str = Field(
        min_length=1,
        max_length=100,
        description='The id run_command gave the background command ("bg-1").',
    )

    @field_validator("id")
    @classmethod
    def _trimmed(cls, value: str) -> str:
        return value.strip()


def background_tools(commands: BackgroundCommands) -> list[Tool]:
    """`command_output` and `command_kill` over `commands`.

    Both are read-only for permissions: they reach only commands this runtime started in the
    session (an exec the gate already allowed), change no file and open no connection; ending
    one can only stop what the agent itself started, and refusing it would leave it running."""

    async def command_output(args: CommandIdArgs, ctx: ToolContext) -> ToolOutput:
        return commands.output(args.id, ctx.session_id)

    async def command_kill(args: CommandIdArgs, ctx: ToolContext) -> ToolOutput:
        return await commands.kill(args.id, ctx.session_id)

    def describe(args: CommandIdArgs, ctx: ToolContext) -> tuple[str, str]:
        return args.id, f"background command {args.id}"

    return [
        Tool(
            "command_output",
            "Read what a background command (run_command with background=true) wrote since "
            "the last read, and whether it is still running or how it ended.",
            CommandIdArgs,
            command_output,
            describe=describe,
        ),
        Tool(
            "command_kill",
            "End a background command (its whole process group) and return its last output.",
            CommandIdArgs,
            command_kill,
            describe=describe,
        ),
    ]
