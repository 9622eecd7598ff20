"""The CLI's command groups (`sessions`, `config`, `sandbox`, `mcp`, `memory`, `skills`,
`tasks`, `agents`, `team`, `storage`, `schema`): each command imports what it runs when it runs."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from soong_agent.entrypoints.cli.options import (
    Command,
    NameArgument,
    OutputOption,
    PathOption,
    output_format,
)

GROUPS: list[tuple[typer.Typer, str]] = []


def _add(group: typer.Typer, *, name: str) -> None:
    GROUPS.append((group, name))


sessions_app = typer.Typer(
    help="List, show and rewind stored sessions.", no_args_is_help=True, rich_markup_mode=None
)
config_app = typer.Typer(
    help="Check the configuration.", no_args_is_help=True, rich_markup_mode=None
)
sandbox_app = typer.Typer(
    help="The OS sandbox commands run in.", no_args_is_help=True, rich_markup_mode=None
)
_add(sessions_app, name="sessions")
_add(config_app, name="config")
mcp_app = typer.Typer(
    help="The MCP servers of ~/.soong-agent/mcp.json.", no_args_is_help=True, rich_markup_mode=None
)
_add(sandbox_app, name="sandbox")
memory_app = typer.Typer(
    help="The memories kept across sessions.", no_args_is_help=True, rich_markup_mode=None
)
skills_app = typer.Typer(
    help="The skills of ~/.soong-agent/skills.", no_args_is_help=True, rich_markup_mode=None
)
_add(mcp_app, name="mcp")
_add(memory_app, name="memory")
_add(skills_app, name="skills")
tasks_app = typer.Typer(
    help="Task graphs (their write-ahead logs).", no_args_is_help=True, rich_markup_mode=None
)
_add(tasks_app, name="tasks")
agents_app = typer.Typer(
    help="The agent definitions (built-ins and ~/.soong-agent/agents).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
_add(agents_app, name="agents")
team_app = typer.Typer(
    help="The team of an orchestrator session (teammates, mailboxes, worktrees).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
_add(team_app, name="team")
storage_app = typer.Typer(
    help="The store of sessions and artifacts ([storage]): status, migrate, copy.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
_add(storage_app, name="storage")


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

    raise typer.Exit(list_sessions(path=path, limit=limit, output=output_format(output)))


@sessions_app.command("show", cls=Command)
def sessions_show(
    session_id: Annotated[str, typer.Argument(metavar="SESSION_ID", help="The session id.")],
    path: PathOption = None,
    output: OutputOption = "text",
) -> None:
    """Print a session's transcript."""
    from soong_agent.entrypoints.cli.sessions_cmd import show_session

    raise typer.Exit(show_session(session_id, path=path, output=output_format(output)))


@sessions_app.command("rewind", cls=Command)
def sessions_rewind(
    session_id: Annotated[str, typer.Argument(metavar="SESSION_ID", help="The session id.")],
    to: Annotated[
        str,
        typer.Option("--to", metavar="MESSAGE_ID", help="The user message to go back to before."),
    ],
    files_only: Annotated[
        bool, typer.Option("--files-only", help="Put the files back; leave the conversation.")
    ] = False,
    conversation_only: Annotated[
        bool,
        typer.Option("--conversation-only", help="Branch the conversation; leave the files."),
    ] = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Overwrite files changed outside the agent since."),
    ] = False,
    path: PathOption = None,
) -> None:
    """Put back every file the agent changed since MESSAGE_ID and continue the conversation
    from before it (the rest stays as another branch)."""
    from soong_agent.entrypoints.cli.rewind_cmd import rewind_command

    raise typer.Exit(
        rewind_command(
            session_id,
            to=to,
            path=path,
            files_only=files_only,
            conversation_only=conversation_only,
            force=force,
        )
    )


schema_app = typer.Typer(
    help="JSON schemas of the machine-readable output.", no_args_is_help=True, rich_markup_mode=None
)
_add(schema_app, name="schema")


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


@mcp_app.command("login", cls=Command)
def mcp_login(
    server: Annotated[str, typer.Argument(metavar="SERVER", help="The server's name in mcp.json.")],
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Print the authorization URL; open no browser.")
    ] = False,
    path: PathOption = None,
) -> None:
    """Log in to an HTTP or SSE MCP server with OAuth (opens the browser, waits for the
    redirect); the tokens are kept under the home, mode 0600."""
    from soong_agent.entrypoints.cli.mcp_cmd import mcp_login as login

    raise typer.Exit(login(server=server, browser=not no_browser, path=path))


@mcp_app.command("logout", cls=Command)
def mcp_logout(
    server: Annotated[str, typer.Argument(metavar="SERVER", help="The server's name in mcp.json.")],
    path: PathOption = None,
) -> None:
    """Forget an MCP server's OAuth tokens and registered client."""
    from soong_agent.entrypoints.cli.mcp_cmd import mcp_logout as logout

    raise typer.Exit(logout(server=server, path=path))


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


@storage_app.command("status", cls=Command)
def storage_status(path: PathOption = None) -> None:
    """Print the configured store and, for PostgreSQL, the server's version and whether the
    schema is current; creates nothing (a database that cannot be reached exits 2)."""
    from soong_agent.entrypoints.cli.storage_cmd import storage_status as body

    raise typer.Exit(body(path))


@storage_app.command("migrate", cls=Command)
def storage_migrate(path: PathOption = None) -> None:
    """Bring the PostgreSQL schema to this soong-agent's version (SQLite: nothing to do)."""
    from soong_agent.entrypoints.cli.storage_cmd import storage_migrate as body

    raise typer.Exit(body(path))


@storage_app.command("copy", cls=Command)
def storage_copy(
    source: Annotated[
        str,
        typer.Option(
            "--from",
            metavar="URL",
            help="The store to read: sqlite:///<file> or postgresql://user@host:port/db.",
        ),
    ],
    target: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="URL",
            help="The PostgreSQL database to write (postgresql://…). Default: [storage] url.",
        ),
    ] = None,
    from_password_env: Annotated[
        str | None,
        typer.Option(
            "--from-password-env",
            metavar="VAR",
            help="The variable holding --from's PostgreSQL password (default: libpq's own"
            " PGPASSWORD or ~/.pgpass).",
        ),
    ] = None,
    to_password_env: Annotated[
        str | None,
        typer.Option(
            "--to-password-env",
            metavar="VAR",
            help="The variable holding --to's password. Default: [storage] password_env when"
            " --to is the configured database, else libpq's own (PGPASSWORD, ~/.pgpass).",
        ),
    ] = None,
    from_home: Annotated[
        str | None,
        typer.Option(
            "--from-home",
            metavar="DIR",
            help="Where a SQLite source's artifact files are (DIR/sessions/…). Default: the"
            " home for the configured file, else the file's folder.",
        ),
    ] = None,
    path: PathOption = None,
) -> None:
    """Copy every session (runs, messages, events, marks) and artifact from --from into the
    PostgreSQL database --to. Run it again to resume: what is there already is skipped, never
    changed. Passwords come only from environment variables, never from a URL."""
    from soong_agent.entrypoints.cli.storage_cmd import storage_copy as body

    raise typer.Exit(
        body(
            source_url=source,
            target_url=target,
            from_password_env=from_password_env,
            to_password_env=to_password_env,
            from_home=from_home,
            path=path,
        )
    )


def register(app: typer.Typer) -> None:
    """Add every command group to the top-level `app`, in the order `--help` lists them."""
    for group, name in GROUPS:
        app.add_typer(group, name=name)
