"""`soong-agent` and its command groups. Only typer is imported up front (a fast --help)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from soong_agent.entrypoints.cli import groups, queue_groups
from soong_agent.entrypoints.cli.options import (
    AgentOption,
    ApproveOption,
    Command,
    ContinueOption,
    DetachOption,
    FromMessageOption,
    ImageOption,
    MaxCostOption,
    MaxTokensOption,
    MaxTurnsOption,
    MessageArgument,
    ModelOption,
    OrchestratorOption,
    OutputOption,
    PathOption,
    PermissionModeOption,
    PlanOption,
    ResumeOption,
    TimeoutOption,
    ToolChoiceOption,
)

app = typer.Typer(
    name="soong-agent",
    help="An agent core for coding and automation: run an agent on a project folder.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rendering it with rich costs ~100 ms of imports
)
groups.register(app)
queue_groups.register(app)


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
    message: MessageArgument = None,
    path: PathOption = None,
    session_id: ResumeOption = None,
    resume_latest: ContinueOption = False,
    from_message: FromMessageOption = None,
    orchestrator: OrchestratorOption = False,
    agent: AgentOption = None,
    model: ModelOption = None,
    permission_mode: PermissionModeOption = None,
    max_turns: MaxTurnsOption = None,
    tool_choice: ToolChoiceOption = None,
    max_cost: MaxCostOption = None,
    max_tokens: MaxTokensOption = None,
    timeout: TimeoutOption = None,
    output: OutputOption = "text",
    approve: ApproveOption = "ask",
    plan: PlanOption = False,
    image: ImageOption = None,
    detach: DetachOption = False,
) -> None:
    """Run the agent on MESSAGE, streaming its answer; tool writes ask on stdin."""
    from soong_agent.entrypoints.cli.overrides import Overrides

    overrides = Overrides(model=model, permission_mode=permission_mode, max_turns=max_turns)
    if detach:
        from soong_agent.entrypoints.cli.queue_groups import detach_run

        raise typer.Exit(
            detach_run(
                message,
                path=path,
                session_id=session_id,
                resume_latest=resume_latest,
                from_message=from_message,
                orchestrator=orchestrator,
                agent=agent,
                plan=plan,
                limits=(max_cost, max_tokens, timeout),
                overrides=overrides,
                output=output,
                unsupported={"--tool-choice": tool_choice, "--image": image or None},
                approve=approve,
            )
        )
    if message is None:
        raise typer.Exit(_chat_instead(path, session_id, agent, resume_latest, overrides))
    from soong_agent.entrypoints.cli.run_cmd import run_command

    raise typer.Exit(
        run_command(
            message,
            path=path,
            session_id=session_id,
            resume_latest=resume_latest,
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
            overrides=overrides,
            images=tuple(image or ()),
        )
    )


def _chat_instead(
    path: str | None,
    session_id: str | None,
    agent: str | None,
    resume_latest: bool,
    overrides: Any,
) -> int:
    """`run` without a MESSAGE (`overrides`: the run's `Overrides`): a chat, on a terminal."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        sys.stderr.write(
            "soong-agent: error: missing MESSAGE (without one, run opens a chat on a "
            "terminal; here stdin or stdout is not one)\n"
        )
        return 2
    from soong_agent.entrypoints.cli.chat_cmd import chat_command

    return chat_command(
        path=path,
        session_id=session_id,
        agent=agent,
        resume_latest=resume_latest,
        overrides=overrides,
    )


@app.command(cls=Command)
def chat(
    path: PathOption = None,
    session_id: Annotated[
        str | None,
        typer.Option("--session-id", "-s", metavar="ID", help="Continue this session."),
    ] = None,
    resume_latest: ContinueOption = False,
    agent: Annotated[
        str | None, typer.Option("--agent", metavar="ID", help="Agent preset id.")
    ] = None,
    model: ModelOption = None,
    permission_mode: PermissionModeOption = None,
    max_turns: MaxTurnsOption = None,
) -> None:
    """An interactive session: each line is a run of the same session; /help lists commands."""
    from soong_agent.entrypoints.cli.chat_cmd import chat_command
    from soong_agent.entrypoints.cli.overrides import Overrides

    overrides = Overrides(model=model, permission_mode=permission_mode, max_turns=max_turns)
    raise typer.Exit(
        chat_command(
            path=path,
            session_id=session_id,
            agent=agent,
            resume_latest=resume_latest,
            overrides=overrides,
        )
    )


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
