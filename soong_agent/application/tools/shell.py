"""The run_command tool (TOOL-2): a bash command line in the project, bounded in time and output.

The command runs through a `ProcessRunner` (own process group, killed on timeout or cancel) with
a small environment: only the variables named in `tools.env_allowlist`, plus PATH, HOME and LANG
when missing, and never a variable that looks like a credential (``*_API_KEY``, ``*_TOKEN``,
``*_SECRET``) or that a model profile reads its API key from, even when allow-listed.
Cancelling the call kills the command's group and propagates the cancellation.

PATH keeps only its absolute folders: an empty entry, ``.`` or any relative one (``bin``,
``./node_modules/.bin``) would make the shell look for ``cat`` in the folder the command runs
in, where the model can plant one. Variables that change how a command line is understood
after the permission check are dropped too: CDPATH (``cd sub`` could go elsewhere) and git's
``GIT_LITERAL_PATHSPECS`` / ``GIT_NOGLOB_PATHSPECS`` (they turn off the pathspec exclusions that
keep sensitive files out of git's output).

The runner may start the command in an OS sandbox (SBX-3); the result then says when the
command ran without one (`UNSANDBOXED_NOTE`) and what the sandbox refused it, each refusal
naming the policy that applied, so neither the model nor the user mistakes it for a broken
file. `sandbox_note` (what the sandbox allows, in a sentence) is added to the description.

With ``background: true`` (BG-1, given `BackgroundCommands`) the same command line, in the same
environment and sandbox, is started through `ProcessRunner.start` and the call returns its id at
once (see `application.tools.background`). Its timeout is `timeout_ms` when given, else
`tools.max_timeout_ms` (a server or a watcher is meant to run long), never more than that.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from pydantic import AliasChoices, Field, field_validator

from soong_agent.application.tools.background import BackgroundCommands, BackgroundLimit
from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput, no_nul
from soong_agent.application.tools.catalog import effective_timeout_ms
from soong_agent.domain.config.schema import ToolsConfig
from soong_agent.ports.process import BackgroundProcess, ProcessResult, ProcessRunner

SECRET_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET")
"""Variables whose names end like this never reach a command."""
_SECRET_NAMES = frozenset({"API_KEY", "TOKEN", "SECRET"})
DEFAULT_PATH = "/usr/bin:/bin"
DROPPED_VARIABLES = frozenset({"CDPATH", "GIT_LITERAL_PATHSPECS", "GIT_NOGLOB_PATHSPECS"})
"""Variables never passed to a command (see the module docstring)."""
DEFAULT_LANG = "C.UTF-8"
SUMMARY_MAX_CHARS = 120
UNSANDBOXED_NOTE = "[unsandboxed: no OS sandbox confined this command]"
"""Marks the result of a command that ran without an OS sandbox (``sandbox.os``, SBX-3)."""


class RunCommandArgs(ToolArgs):
    command: str = Field(
        min_length=1,
        validation_alias=AliasChoices("command", "cmd"),
        description="The bash command line to run in the project folder.",
    )
    timeout_ms: int | None = Field(
        default=None,
        gt=0,
        validation_alias=AliasChoices("timeout_ms", "timeout"),
        description="Timeout in milliseconds (default and maximum come from the configuration).",
    )
    description: str | None = Field(
        default=None, description="A few words on what the command does, for the user."
    )

    _no_nul = field_validator("command")(no_nul)


class BackgroundRunCommandArgs(RunCommandArgs):
    """run_command's arguments where background commands are on (BG-1)."""

    background: bool = Field(
        default=False,
        description="Start it in the background and get its id at once (a server, a watcher, "
        "a long build): read its output with command_output, end it with command_kill; you "
        "are told when it ends. Do not end the line with & yourself.",
    )


def is_secret_name(name: str, secret_names: Collection[str] = ()) -> bool:
    """Whether a variable must never be passed to a command."""
    upper = name.upper()
    return upper in _SECRET_NAMES or upper.endswith(SECRET_SUFFIXES) or name in secret_names


def absolute_path_entries(path: str) -> str:
    """`path` (a PATH value) without its empty and relative entries; `DEFAULT_PATH` when none
    is left."""
    kept = [entry for entry in path.split(":") if entry.startswith("/")]
    return ":".join(kept) or DEFAULT_PATH


def command_env(
    base_env: Mapping[str, str],
    allowlist: Collection[str],
    *,
    secret_names: Collection[str] = (),
    home: str | None = None,
) -> dict[str, str]:
    """The environment of a command: allow-listed variables of `base_env` minus secrets and
    `DROPPED_VARIABLES`, plus PATH (``/usr/bin:/bin`` when `base_env` has none), HOME
    (`base_env`'s, else `home`) and LANG (``C.UTF-8``) when missing. PATH keeps only its
    absolute entries (`absolute_path_entries`)."""
    env = {
        name: base_env[name]
        for name in allowlist
        if name in base_env
        and not is_secret_name(name, secret_names)
        and name.upper() not in DROPPED_VARIABLES
    }
    env["PATH"] = absolute_path_entries(env.get("PATH") or base_env.get("PATH") or DEFAULT_PATH)
    fallback_home = base_env.get("HOME") or home
    if fallback_home:
        env.setdefault("HOME", fallback_home)
    env.setdefault("LANG", DEFAULT_LANG)
    return env


def command_scope(command: str) -> str:
    """The session scope of a command: its first two words."""
    return " ".join(command.split()[:2])


def command_summary(command: str) -> str:
    """``run: <first line of the command>``, at most `SUMMARY_MAX_CHARS` characters of it."""
    lines = command.strip().splitlines() or [""]
    first = lines[0]
    if len(first) > SUMMARY_MAX_CHARS or len(lines) > 1:
        first = first[: SUMMARY_MAX_CHARS - 2].rstrip() + " …"
    return f"run: {first}"


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s"


def format_result(result: ProcessResult, *, timeout_ms: int, note: str | None = None) -> str:
    """The text the model gets: how the command ended, whether it ran without an OS sandbox
    and what the sandbox refused it (SBX-3), then its output with cuts marked."""
    if result.timed_out:
        head = f"killed after timeout of {_seconds(timeout_ms)}"
    elif result.exit_code is None:
        head = "killed"
    elif result.exit_code < 0:
        head = f"killed by signal {-result.exit_code}"
    else:
        head = f"exit code {result.exit_code}"
    parts = [head]
    if note:
        parts.append(note)
    if result.unsandboxed:
        parts.append(UNSANDBOXED_NOTE)
    parts.extend(denial.note() for denial in result.denials)
    streams = (
        ("stdout", result.stdout, result.stdout_truncated),
        ("stderr", result.stderr, result.stderr_truncated),
    )
    shown = False
    for name, text, dropped in streams:
        if not text and not dropped:
            continue
        shown = True
        parts.append(f"--- {name} ---")
        if text:
            parts.append(text.removesuffix("\n"))
        if dropped:
            parts.append(f"[{name} cut: {dropped} more bytes]")
    if not shown:
        parts.append("(no output)")
    return "\n".join(parts)


def _capped(asked: int, max_ms: int) -> tuple[int, str | None]:
    """`asked` capped at `max_ms`, and the note that says so (None when it was not)."""
    if asked <= max_ms:
        return asked, None
    return max_ms, (
        f"[timeout_ms {asked} is above the maximum of {max_ms}; the timeout was {_seconds(max_ms)}]"
    )


class _Commands:
    """What run_command does with a call: the foreground run, or a background start (BG-1)."""

    def __init__(
        self,
        runner: ProcessRunner,
        project: str,
        env: dict[str, str],
        tools: ToolsConfig,
        background: BackgroundCommands | None,
    ) -> None:
        self._runner = runner
        self._project = project
        self._env = env
        self._tools = tools
        self._background = background
        self._bash: list[str | None] = []  # looked up at the first command, through the runner
        self.max_ms = tools.max_timeout_ms
        self.default_ms = effective_timeout_ms("run_command", None, tools)

    async def call(self, args: RunCommandArgs, ctx: ToolContext) -> ToolOutput:
        if not self._bash:
            self._bash.append(self._runner.find_program("bash"))
        shell = self._bash[0]
        if shell is None:
            return ToolOutput("bash was not found on this system.", is_error=True)
        if isinstance(args, BackgroundRunCommandArgs) and args.background:
            return await self._start(args, ctx, shell)
        asked = self.default_ms if args.timeout_ms is None else args.timeout_ms
        timeout_ms, note = _capped(asked, self.max_ms)
        try:
            result = await self._runner.run(
                [shell, "-c", args.command],
                cwd=self._project,
                env=self._env,
                timeout_s=timeout_ms / 1000,
                stdout_limit=self._tools.stdout_limit_bytes,
                stderr_limit=self._tools.stderr_limit_bytes,
            )
        except OSError as exc:
            return ToolOutput(f"the command could not be started: {exc}", is_error=True)
        failed = result.timed_out or result.exit_code != 0
        return ToolOutput(
            format_result(result, timeout_ms=timeout_ms, note=note),
            is_error=failed,
            denials=result.denials,
        )

    async def _start(self, args: RunCommandArgs, ctx: ToolContext, shell: str) -> ToolOutput:
        """Start the command in the background; its id at once (BG-1)."""
        background = self._background
        assert background is not None
        timeout_ms, note = _capped(args.timeout_ms or self.max_ms, self.max_ms)

        async def start() -> BackgroundProcess:
            return await self._runner.start(
                [shell, "-c", args.command],
                cwd=self._project,
                env=self._env,
                timeout_s=timeout_ms / 1000,
                stdout_limit=self._tools.stdout_limit_bytes,
                stderr_limit=self._tools.stderr_limit_bytes,
            )

        try:
            command_id = await background.launch(
                start, session_id=ctx.session_id, command=args.command, timeout_ms=timeout_ms
            )
        except BackgroundLimit as exc:
            return ToolOutput(f"the command was not started: {exc}", is_error=True)
        except OSError as exc:
            return ToolOutput(f"the command could not be started: {exc}", is_error=True)
        unsandboxed = background.unsandboxed(command_id)
        return ToolOutput(started_text(command_id, timeout_ms, note, unsandboxed))


def run_command_tool(
    *,
    runner: ProcessRunner,
    project: str,
    tools: ToolsConfig,
    base_env: Mapping[str, str],
    secret_names: Collection[str] = (),
    sandbox_note: str = "",
    background: BackgroundCommands | None = None,
) -> Tool:
    """The run_command tool over `runner`, running in `project`.

    `base_env` is where allow-listed variables are taken from (read when the tool is built);
    `secret_names` are variables that hold credentials (every model profile's `api_key_env`);
    `sandbox_note` tells the model what the OS sandbox of the commands allows; `background`
    (when its limit is above 0) lets a call start its command in the background (BG-1).
    """
    env = command_env(
        base_env, tools.env_allowlist, secret_names=frozenset(secret_names), home=project
    )
    if background is not None and background.limit <= 0:
        background = None
    commands = _Commands(runner, project, env, tools, background)
    default_ms, max_ms = commands.default_ms, commands.max_ms

    def describe(args: RunCommandArgs, ctx: ToolContext) -> tuple[str, str]:
        return command_scope(args.command), command_summary(args.command)

    description = (
        "Run a bash command line in the project folder and return its exit code and output "
        f"(stdout cut at {tools.stdout_limit_bytes} bytes, stderr at "
        f"{tools.stderr_limit_bytes}). Default timeout {_seconds(default_ms)}, at most "
        f"{_seconds(max_ms)} (timeout_ms). No input is given; processes it leaves running "
        "(&) are killed when it ends. PATH holds only absolute folders (programs in the "
        "current folder run as ./name)."
    )
    if background is not None:
        description += (
            f" With background=true it runs beside the conversation (at most {background.limit} "
            f"at a time; timeout {_seconds(max_ms)} unless timeout_ms says less)."
        )
    return Tool(
        "run_command",
        description + (f" {sandbox_note}" if sandbox_note else ""),
        RunCommandArgs if background is None else BackgroundRunCommandArgs,
        commands.call,
        permission_class="exec",
        describe=describe,
        timeout_ms=default_ms,
    )


def started_text(command_id: str, timeout_ms: int, note: str | None, unsandboxed: bool) -> str:
    """The result of a call that started a background command."""
    parts = [
        f"started in the background as {command_id} (killed after {_seconds(timeout_ms)} "
        f'unless it ends first). Read its output with command_output(id="{command_id}"), end '
        f'it with command_kill(id="{command_id}"); you are told when it ends.'
    ]
    if note:
        parts.append(note)
    if unsandboxed:
        parts.append(UNSANDBOXED_NOTE)
    return "\n".join(parts)
