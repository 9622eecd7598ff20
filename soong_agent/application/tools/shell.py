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
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from pydantic import AliasChoices, Field, field_validator

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput, no_nul
from soong_agent.application.tools.catalog import effective_timeout_ms
from soong_agent.domain.config.schema import ToolsConfig
from soong_agent.ports.process import ProcessResult, ProcessRunner

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


def run_command_tool(
    *,
    runner: ProcessRunner,
    project: str,
    tools: ToolsConfig,
    base_env: Mapping[str, str],
    secret_names: Collection[str] = (),
    sandbox_note: str = "",
) -> Tool:
    """The run_command tool over `runner`, running in `project`.

    `base_env` is where allow-listed variables are taken from (read when the tool is built);
    `secret_names` are variables that hold credentials (every model profile's `api_key_env`);
    `sandbox_note` tells the model what the OS sandbox of the commands allows.
    """
    bash: list[str | None] = []  # looked up at the first command, through the runner
    env = command_env(
        base_env, tools.env_allowlist, secret_names=frozenset(secret_names), home=project
    )
    max_ms = tools.max_timeout_ms
    default_ms = effective_timeout_ms("run_command", None, tools)

    async def run_command(args: RunCommandArgs, ctx: ToolContext) -> ToolOutput:
        if not bash:
            bash.append(runner.find_program("bash"))
        shell = bash[0]
        if shell is None:
            return ToolOutput("bash was not found on this system.", is_error=True)
        note = None
        timeout_ms = default_ms if args.timeout_ms is None else args.timeout_ms
        if timeout_ms > max_ms:
            note = (
                f"[timeout_ms {timeout_ms} is above the maximum of {max_ms}; "
                f"the timeout was {_seconds(max_ms)}]"
            )
            timeout_ms = max_ms
        try:
            result = await runner.run(
                [shell, "-c", args.command],
                cwd=project,
                env=env,
                timeout_s=timeout_ms / 1000,
                stdout_limit=tools.stdout_limit_bytes,
                stderr_limit=tools.stderr_limit_bytes,
            )
        except OSError as exc:
            return ToolOutput(f"the command could not be started: {exc}", is_error=True)
        failed = result.timed_out or result.exit_code != 0
        return ToolOutput(
            format_result(result, timeout_ms=timeout_ms, note=note),
            is_error=failed,
            denials=result.denials,
        )

    def describe(args: RunCommandArgs, ctx: ToolContext) -> tuple[str, str]:
        return command_scope(args.command), command_summary(args.command)

    return Tool(
        "run_command",
        "Run a bash command line in the project folder and return its exit code and output "
        f"(stdout cut at {tools.stdout_limit_bytes} bytes, stderr at "
        f"{tools.stderr_limit_bytes}). Default timeout {_seconds(default_ms)}, at most "
        f"{_seconds(max_ms)} (timeout_ms). No input is given; background processes are killed "
        "when the command ends. PATH holds only absolute folders (programs in the current "
        "folder run as ./name)." + (f" {sandbox_note}" if sandbox_note else ""),
        RunCommandArgs,
        run_command,
        permission_class="exec",
        describe=describe,
        timeout_ms=default_ms,
    )
