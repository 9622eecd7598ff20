"""`soong-agent` and its command groups. Only typer is imported up front (a fast --help)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer._click import Context
from typer.core import TyperCommand


class Command(TyperCommand):
    """A command whose usage line names required arguments plainly (`run [OPTIONS] MESSAGE`,
    not typer's `{MESSAGE}`)."""

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        pieces = super().collect_usage_pieces(ctx)
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in pieces]


app = typer.Typer(
    name="soong-agent",
    help="An agent core for coding and automation: run an agent on a project folder.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rendering it with rich costs ~100 ms of imports
)
sessions_app = typer.Typer(
    help="List and show stored sessions.", no_args_is_help=True, rich_markup_mode=None
)
config_app = typer.Typer(
    help="Check the configuration.", no_args_is_help=True, rich_markup_mode=None
)
sandbox_app = typer.Typer(
    help="The OS sandbox commands run in.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(sessions_app, name="sessions")
app.add_typer(config_app, name="config")
mcp_app = typer.Typer(
    help="The MCP servers of ~/.soong-agent/mcp.json.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(sandbox_app, name="sandbox")
memory_app = typer.Typer(
    help="The memories kept across sessions.", no_args_is_help=True, rich_markup_mode=None
)
skills_app = typer.Typer(
    help="The skills of ~/.soong-agent/skills.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(mcp_app, name="mcp")
app.add_typer(memory_app, name="memory")
app.add_typer(skills_app, name="skills")
tasks_app = typer.Typer(
    help="Task graphs (their write-ahead logs).", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(tasks_app, name="tasks")
agents_app = typer.Typer(
    help="The agent definitions (built-ins and ~/.soong-agent/agents).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(agents_app, name="agents")
team_app = typer.Typer(
    help="The team of an orchestrator session (teammates, mailboxes, worktrees).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(team_app, name="team")

NameArgument = Annotated[str, typer.Argument(metavar="NAME", help="The memory's name.")]

PathOption = Annotated[
    str | None,
    typer.Option(
        "--path",
        "-p",
        metavar="PATH",
        help="Project folder (a file means its folder). Default: cwd.",
    ),
]
OutputOption = Annotated[
    str,
    typer.Option(
        "--output",
        "-o",
        metavar="FORMAT",
        help="text (for people) or json (one JSON object per line, for scripts).",
    ),
]


def _version(value: bool) -> None:
    if value:  # (the console script answers a lone --version before typer is imported)
        from soong_agent import __version__

        sys.stdout.write(f"soong-agent {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """An agent core for coding and automation: run an agent on a project folder."""


@app.command(cls=Command)
def run(
    message: Annotated[
        str | None,
        typer.Argument(
            metavar="MESSAGE",
            help="What the agent should do. Without it, on a terminal: an interactive chat.",
        ),
    ] = None,
    path: PathOption = None,
    session_id: Annotated[
        str | None,
        typer.Option("--session-id", "-s", metavar="ID", help="Resume this session."),
    ] = None,
    from_message: Annotated[
        str | None,
        typer.Option(
            "--from-message",
            metavar="MESSAGE_ID",
            help="Start a new branch from this earlier user message (needs --session-id).",
        ),
    ] = None,
    orchestrator: Annotated[
        bool, typer.Option("--orchestrator", help="Run as orchestrator of worker pools.")
    ] = False,
    agent: Annotated[
        str | None, typer.Option("--agent", metavar="ID", help="Agent preset id.")
    ] = None,
    tool_choice: Annotated[
        str | None,
        typer.Option(
            "--tool-choice",
            metavar="CHOICE",
            help="For the first model request: auto, none, required, or a tool's name.",
        ),
    ] = None,
    max_cost: Annotated[
        float | None,
        typer.Option(
            "--max-cost", metavar="USD", help="Stop the run once it has cost this many US dollars."
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens", metavar="N", help="Stop the run once it has used this many tokens."
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", metavar="SECONDS", help="Stop the run after this many seconds."),
    ] = None,
    output: OutputOption = "text",
    approve: Annotated[
        str,
        typer.Option(
            "--approve",
            metavar="MODE",
            help="Who answers approval questions: ask (stdin, the default), never, "
            "once-per-tool, rules-only.",
        ),
    ] = "ask",
    plan: Annotated[
        bool,
        typer.Option(
            "--plan", help="Start in plan mode: read and write a plan, change nothing else."
        ),
    ] = False,
) -> None:
    """Run the agent on MESSAGE, streaming its answer; tool writes ask on stdin."""
    if message is None:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            sys.stderr.write(
                "soong-agent: error: missing MESSAGE (without one, run opens a chat on a "
                "terminal; here stdin or stdout is not one)\n"
            )
            raise typer.Exit(2)
        from soong_agent.entrypoints.cli.chat_cmd import chat_command

        raise typer.Exit(chat_command(path=path, session_id=session_id, agent=agent))
    from soong_agent.entrypoints.cli.run_cmd import run_command

    raise typer.Exit(
        run_command(
            message,
            path=path,
            session_id=session_id,
            from_message=from_message,
            orchestrator=orchestrator,
            agent=agent,
            tool_choice=tool_choice,
            max_cost=max_cost,
            max_tokens=max_tokens,
            timeout=timeout,
            output=output,
            approve=approve,
            plan=plan,
        )
    )


@app.command(cls=Command)
def chat(
    path: PathOption = None,
    session_id: Annotated[
        str | None,
        typer.Option("--session-id", "-s", metavar="ID", help="Continue this session."),
    ] = None,
    agent: Annotated[
        str | None, typer.Option("--agent", metavar="ID", help="Agent preset id.")
    ] = None,
) -> None:
    """An interactive session: each line is a run of the same session; /help lists commands."""
    from soong_agent.entrypoints.cli.chat_cmd import chat_command

    raise typer.Exit(chat_command(path=path, session_id=session_id, agent=agent))


@sessions_app.command("list", cls=Command)
def sessions_list(
    path: PathOption = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, metavar="N", help="How many sessions.")
    ] = 20,
    output: OutputOption = "text",
) -> None:
    """List sessions, most recently used first."""
    from soong_agent.entrypoints.cli.sessions_cmd import list_sessions

    raise typer.Exit(list_sessions(path=path, limit=limit, output=_output(output)))


@sessions_app.command("show", cls=Command)
def sessions_show(
    session_id: Annotated[str, typer.Argument(metavar="SESSION_ID", help="The session id.")],
    path: PathOption = None,
    output: OutputOption = "text",
) -> None:
    """Print a session's transcript."""
    from soong_agent.entrypoints.cli.sessions_cmd import show_session

    raise typer.Exit(show_session(session_id, path=path, output=_output(output)))


def _output(value: str) -> str:
    if value not in ("text", "json"):
        sys.stderr.write(f"soong-agent: error: --output: expected text or json, found {value!r}\n")
        raise typer.Exit(2)
    return value


schema_app = typer.Typer(
    help="JSON schemas of the machine-readable output.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(schema_app, name="schema")


@schema_app.command("events", cls=Command)
def schema_events() -> None:
    """Print the JSON schema of one line of `run --output json` (a run event or the result)."""
    import json

    from soong_agent.entrypoints.cli.json_output import event_schema

    sys.stdout.write(json.dumps(event_schema(), indent=2) + "\n")


@config_app.command("check", cls=Command)
def config_check(path: PathOption = None) -> None:
    """Validate config.toml and print the resolved values and where each came from."""
    from soong_agent.entrypoints.cli.config_cmd import check_config

    raise typer.Exit(check_config(path=path))


@sandbox_app.command("check", cls=Command)
def sandbox_check(
    path: PathOption = None,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode", metavar="MODE", help="Judge this sandbox.os (auto, required, off) instead."
        ),
    ] = None,
) -> None:
    """Try each OS sandbox here; say which works, and for one that does not, why and the fix."""
    from soong_agent.entrypoints.cli.sandbox_cmd import check_sandbox

    raise typer.Exit(check_sandbox(path=path, mode=mode))


@mcp_app.command("status", cls=Command)
def mcp_status(path: PathOption = None) -> None:
    """Start every MCP server; print each one's state, tools and start-up time (exit 1 if any
    is not ready)."""
    from soong_agent.entrypoints.cli.mcp_cmd import mcp_status as status

    raise typer.Exit(status(path=path))


@mcp_app.command("tools", cls=Command)
def mcp_tools(
    server: Annotated[str, typer.Argument(metavar="SERVER", help="The server's name in mcp.json.")],
    path: PathOption = None,
) -> None:
    """Print one MCP server's tools, named as the model sees them."""
    from soong_agent.entrypoints.cli.mcp_cmd import mcp_tools as tools

    raise typer.Exit(tools(server=server, path=path))


@memory_app.command("list", cls=Command)
def memory_list(path: PathOption = None) -> None:
    """List memories: category, name, last update, description."""
    from soong_agent.entrypoints.cli.memory_cmd import memory_list as body

    raise typer.Exit(body(path))


@memory_app.command("show", cls=Command)
def memory_show(name: NameArgument, path: PathOption = None) -> None:
    """Print one memory."""
    from soong_agent.entrypoints.cli.memory_cmd import memory_show as body

    raise typer.Exit(body(name, path))


@memory_app.command("consolidate", cls=Command)
def memory_consolidate(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan; write nothing.")
    ] = False,
    path: PathOption = None,
) -> None:
    """Merge duplicates, make dates absolute, resolve contradictions, cap MEMORY.md (now)."""
    from soong_agent.entrypoints.cli.memory_cmd import memory_consolidate as body

    raise typer.Exit(body(path, dry_run))


@memory_app.command("rm", cls=Command)
def memory_rm(name: NameArgument, path: PathOption = None) -> None:
    """Remove one memory (and its line in MEMORY.md)."""
    from soong_agent.entrypoints.cli.memory_cmd import memory_rm as body

    raise typer.Exit(body(name, path))


@agents_app.command("list", cls=Command)
def agents_list(path: PathOption = None) -> None:
    """List agent definitions (id, description, source, tool ceiling); skipped files on stderr."""
    from soong_agent.entrypoints.cli.agents_cmd import agents_list as body

    raise typer.Exit(body(path))


@agents_app.command("show", cls=Command)
def agents_show(
    agent_id: Annotated[str, typer.Argument(metavar="ID", help="The definition's id.")],
    path: PathOption = None,
) -> None:
    """Show one agent definition in full; an unknown id exits 2."""
    from soong_agent.entrypoints.cli.agents_cmd import agents_show as body

    raise typer.Exit(body(agent_id, path))


@tasks_app.command("list", cls=Command)
def tasks_list(path: PathOption = None) -> None:
    """List the task graphs of the project (from their WAL files)."""
    from soong_agent.entrypoints.cli.tasks_cmd import tasks_list as body

    raise typer.Exit(body(path))


@tasks_app.command("show", cls=Command)
def tasks_show(
    ref: Annotated[str, typer.Argument(metavar="SESSION/NAME", help="The task graph.")],
    path: PathOption = None,
) -> None:
    """Print one task graph: steps, dependencies, owners and leases."""
    from soong_agent.entrypoints.cli.tasks_cmd import tasks_show as body

    raise typer.Exit(body(ref, path))


@team_app.command("show", cls=Command)
def team_show(
    session_id: Annotated[str, typer.Argument(metavar="SESSION", help="The lead's session.")],
    path: PathOption = None,
) -> None:
    """Print the team of a session: each teammate's role, status, step, mail and cost."""
    from soong_agent.entrypoints.cli.team_cmd import team_show as body

    raise typer.Exit(body(session_id, path))


@skills_app.command("list", cls=Command)
def skills_list(path: PathOption = None) -> None:
    """List the home's skills (name, description, file); skipped files and why on stderr."""
    from soong_agent.entrypoints.cli.skills_cmd import skills_list as body

    raise typer.Exit(body(path))


def main() -> None:
    """Console-script entry point: runs the command, then exits without interpreter teardown."""
    from soong_agent.entrypoints.cli import code_cache
    from soong_agent.entrypoints.cli.common import exit_now, tolerant_streams
    from soong_agent.entrypoints.cli.pydantic_plugins import skip_empty_plugin_search

    skip_empty_plugin_search()
    tolerant_streams()  # no command fails half way on a character the terminal cannot show
    compiled = code_cache.start()
    try:
        app()
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            sys.stderr.write(f"{exc.code}\n")
            code = 1
    compiled.save()
    exit_now(code)


if __name__ == "__main__":
    main()
