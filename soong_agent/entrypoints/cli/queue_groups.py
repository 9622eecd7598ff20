"""The CLI of the run queue (WORK-1..3): `run --detach`, `runs list|show|wait|cancel`, `worker`
and `approvals list|answer`; each command imports what it runs when it runs."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from soong_agent.entrypoints.cli.options import Command, OutputOption, PathOption, output_format

if TYPE_CHECKING:
    from soong_agent.entrypoints.cli.overrides import Overrides

runs_app = typer.Typer(
    help="Runs queued with run --detach: list, show, wait for, cancel.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
approvals_app = typer.Typer(
    help="Approval questions of workers' runs: list and answer them from anywhere.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
RunIdArgument = Annotated[str, typer.Argument(metavar="RUN_ID", help="The queued run's id.")]


def register(app: typer.Typer) -> None:
    """Add `runs`, `approvals` and `worker` to the CLI."""
    app.add_typer(runs_app, name="runs")
    app.add_typer(approvals_app, name="approvals")
    app.command("worker", cls=Command)(worker)


@approvals_app.command("list", cls=Command)
def approvals_list(
    path: PathOption = None,
    all_: Annotated[bool, typer.Option("--all", help="Answered and expired ones too.")] = False,
    output: OutputOption = "text",
) -> None:
    """List pending approvals: tool, what it would do, the diff or command, the scope."""
    from soong_agent.entrypoints.cli.approvals_cmd import list_command

    raise typer.Exit(list_command(path=path, all_=all_, output=output_format(output)))


@approvals_app.command("answer", cls=Command)
def approvals_answer(
    approval_id: Annotated[str, typer.Argument(metavar="APPROVAL_ID", help="The approval.")],
    decision: Annotated[
        str,
        typer.Argument(metavar="DECISION", help="allow_once, allow_for_session or deny."),
    ],
    path: PathOption = None,
) -> None:
    """Answer a pending approval; the run waiting on it goes on."""
    from soong_agent.entrypoints.cli.approvals_cmd import answer_command

    raise typer.Exit(answer_command(approval_id, decision, path=path))


def detach_run(
    message: str | None,
    *,
    path: str | None,
    session_id: str | None,
    resume_latest: bool,
    from_message: str | None,
    orchestrator: bool,
    agent: str | None,
    plan: bool,
    limits: tuple[float | None, int | None, float | None],
    overrides: Overrides,
    output: str,
    unsupported: dict[str, object],
    approve: str,
) -> int:
    """`run --detach`: queue the run (see `runs_cmd.submit_command`)."""
    from soong_agent.entrypoints.cli.common import EXIT_USAGE, fail
    from soong_agent.ports.run_queue import RunOptions

    if message is None:
        return fail("run --detach needs a MESSAGE", EXIT_USAGE)
    given = [flag for flag, value in unsupported.items() if value]
    if given:
        return fail(f"{', '.join(given)} cannot be used with --detach", EXIT_USAGE)
    if approve != "ask":
        return fail(
            "--approve cannot be used with --detach: in a worker's run, a call that would ask "
            "waits for an answer from `soong-agent approvals answer`",
            EXIT_USAGE,
        )
    max_cost, max_tokens, timeout = limits
    options = RunOptions(
        agent=agent,
        orchestrator=orchestrator,
        plan_mode=plan,
        from_message=from_message,
        max_cost_usd=max_cost,
        max_tokens=max_tokens,
        max_wall_ms=None if timeout is None else max(1, round(timeout * 1000)),
        max_turns=overrides.max_turns,
        model=overrides.model,
        permission_mode=overrides.permission_mode,
    )
    from soong_agent.entrypoints.cli.runs_cmd import submit_command

    return submit_command(
        message,
        path=path,
        session_id=session_id,
        resume_latest=resume_latest,
        options=options,
        overrides=overrides,
        output=output_format(output),
    )


@runs_app.command("list", cls=Command)
def runs_list(
    path: PathOption = None,
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            metavar="STATUS",
            help="Only runs queued, running, completed, failed or cancelled.",
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, metavar="N", help="How many.")] = 50,
    output: OutputOption = "text",
) -> None:
    """List queued runs, newest first."""
    from soong_agent.entrypoints.cli.runs_cmd import list_command

    raise typer.Exit(
        list_command(path=path, status=status, limit=limit, output=output_format(output))
    )


@runs_app.command("show", cls=Command)
def runs_show(
    run_id: RunIdArgument, path: PathOption = None, output: OutputOption = "text"
) -> None:
    """Show a queued run: status, worker, attempts, reason, events stored so far."""
    from soong_agent.entrypoints.cli.runs_cmd import show_command

    raise typer.Exit(show_command(run_id, path=path, output=output_format(output)))


@runs_app.command("wait", cls=Command)
def runs_wait(
    run_id: RunIdArgument,
    path: PathOption = None,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", metavar="S", help="Give up after S seconds (exit 124)."),
    ] = None,
) -> None:
    """Wait for a queued run to end: exit 0 completed, 1 failed, 130 cancelled, 124 timeout."""
    from soong_agent.entrypoints.cli.runs_cmd import wait_command

    raise typer.Exit(wait_command(run_id, path=path, timeout=timeout))


@runs_app.command("cancel", cls=Command)
def runs_cancel(run_id: RunIdArgument, path: PathOption = None) -> None:
    """Cancel a queued run, or ask the worker running it to stop it."""
    from soong_agent.entrypoints.cli.runs_cmd import cancel_command

    raise typer.Exit(cancel_command(run_id, path=path))


def worker(
    project: Annotated[
        list[str] | None,
        typer.Option(
            "--project",
            metavar="PATH",
            help="A project folder whose queued runs to take (repeatable; default: the cwd).",
        ),
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", metavar="N", help="Runs at once.")
    ] = 1,
    worker_id: Annotated[
        str | None,
        typer.Option("--id", metavar="NAME", help="This worker's name (default: host-pid)."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="Print nothing on stderr.")] = False,
) -> None:
    """Run queued runs (run --detach) of the given projects until SIGTERM or Ctrl-C."""
    from soong_agent.entrypoints.cli.worker_cmd import worker_command

    sys.stderr.flush()
    raise typer.Exit(
        worker_command(
            tuple(project or ()), concurrency=concurrency, worker_id=worker_id, quiet=quiet
        )
    )
