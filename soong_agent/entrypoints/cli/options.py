"""What the CLI's commands share on the command line: the command class and the options."""

from __future__ import annotations

import re
import sys
from typing import Annotated

import typer
from typer._click import Context, HelpFormatter
from typer.core import TyperCommand

_TYPE_PLACEHOLDER = re.compile(r" <[^<>]*>$")


class Command(TyperCommand):
    """A command whose usage line names required arguments plainly (`run [OPTIONS] MESSAGE`,
    not typer's `{MESSAGE}`), and whose help lists arguments by name alone (`MESSAGE`, not
    typer's `MESSAGE <str>`)."""

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        pieces = super().collect_usage_pieces(ctx)
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in pieces]

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        arguments: list[tuple[str, str]] = []
        options: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append((_TYPE_PLACEHOLDER.sub("", record[0]), record[1]))
            elif param.param_type_name == "option":
                options.append(record)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        if options:
            with formatter.section("Options"):
                formatter.write_dl(options)


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


# `run`'s options
MessageArgument = Annotated[
    str | None,
    typer.Argument(
        metavar="MESSAGE",
        help="What the agent should do. Without it, on a terminal: an interactive chat.",
    ),
]
ResumeOption = Annotated[
    str | None,
    typer.Option("--session-id", "-s", metavar="ID", help="Resume this session."),
]
FromMessageOption = Annotated[
    str | None,
    typer.Option(
        "--from-message",
        metavar="MESSAGE_ID",
        help="Start a new branch from this earlier user message (needs --session-id).",
    ),
]
OrchestratorOption = Annotated[
    bool, typer.Option("--orchestrator", help="Run as orchestrator of worker pools.")
]
AgentOption = Annotated[str | None, typer.Option("--agent", metavar="ID", help="Agent preset id.")]
ToolChoiceOption = Annotated[
    str | None,
    typer.Option(
        "--tool-choice",
        metavar="CHOICE",
        help="For the first model request: auto, none, required, or a tool's name.",
    ),
]
MaxCostOption = Annotated[
    float | None,
    typer.Option(
        "--max-cost", metavar="USD", help="Stop the run once it has cost this many US dollars."
    ),
]
MaxTokensOption = Annotated[
    int | None,
    typer.Option(
        "--max-tokens", metavar="N", help="Stop the run once it has used this many tokens."
    ),
]
TimeoutOption = Annotated[
    float | None,
    typer.Option("--timeout", metavar="SECONDS", help="Stop the run after this many seconds."),
]
ApproveOption = Annotated[
    str,
    typer.Option(
        "--approve",
        metavar="MODE",
        help="Who answers approval questions: ask (stdin, the default), never, "
        "once-per-tool, rules-only.",
    ),
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model", "-m", metavar="NAME", help="The model for this run ([model] name replaced)."
    ),
]
PermissionModeOption = Annotated[
    str | None,
    typer.Option(
        "--permission-mode",
        metavar="MODE",
        help="default, accept_edits, plan or bypass (no approval questions at all).",
    ),
]
MaxTurnsOption = Annotated[
    int | None,
    typer.Option("--max-turns", metavar="N", help="Stop the run after N model turns."),
]
ContinueOption = Annotated[
    bool,
    typer.Option("--continue", "-c", help="Resume the most recent session of this project."),
]
ImageOption = Annotated[
    list[str] | None,
    typer.Option(
        "--image",
        metavar="PATH",
        help="Attach a PNG, JPEG, GIF or WebP image to the message (repeatable).",
    ),
]
PlanOption = Annotated[
    bool,
    typer.Option("--plan", help="Start in plan mode: read and write a plan, change nothing else."),
]
DetachOption = Annotated[
    bool,
    typer.Option(
        "--detach",
        help="Queue the run for a worker (soong-agent worker) and print its ids at once.",
    ),
]


def output_format(value: str) -> str:
    """`--output`'s value, or exit 2 saying what it may be."""
    if value not in ("text", "json"):
        sys.stderr.write(f"soong-agent: error: --output: expected text or json, found {value!r}\n")
        raise typer.Exit(2)
    return value
