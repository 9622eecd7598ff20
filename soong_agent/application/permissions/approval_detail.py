"""What an approval question shows below its one-line summary: the request's `detail`.

A tool's own preview (`Tool.preview`: a file tool's unified diff, a fetch's URL and host) and,
for a command line, the parts the permission gate's analysis found in it (the simple commands a
compound line runs, their redirection targets, what could not be understood). Computed only
when a person is about to be asked; a preview that fails is reported in the detail, and the
question is asked all the same.
"""

from __future__ import annotations

import shlex

from pydantic import BaseModel

from soong_agent.application.tools.base import Tool, ToolContext
from soong_agent.ports.approval import printable
from soong_agent.ports.shell import ShellAnalysis, SimpleCommand


def _word(word: str | None) -> str:
    if word is None:
        return "?"
    return shlex.quote(word) if not word or any(c.isspace() for c in word) else word


def _simple(command: SimpleCommand) -> str:
    shown = " ".join(_word(w) for w in command.words) or "(no command word)"
    notes = [f"writes to {target}" for target in command.writes_to]
    notes += [f"reads {source}" for source in command.reads_from]
    return f"{shown}  ({'; '.join(notes)})" if notes else shown


def shell_detail(command: str, analysis: ShellAnalysis, summary: str) -> str:
    """A command line's parts, as far as they add to `summary`: the whole line when the
    summary shows it cut, the simple commands of a compound line (nested ones included) with
    their redirection targets, and why the line was not fully understood. Empty for one plain
    command the summary shows whole."""
    lines: list[str] = []
    if command.strip() not in summary:
        lines += ["command:", *(f"  {line}" for line in command.strip().split("\n"))]
    commands = analysis.commands
    redirects = any(c.writes_to or c.reads_from for c in commands)
    if len(commands) > 1 or redirects:
        count = f"{len(commands)} commands" if len(commands) > 1 else "1 command"
        lines.append(f"runs {count}:")
        lines += [f"  {_simple(c)}" for c in commands]
        if any(None in c.words for c in commands):
            lines.append("  (? stands for a word only known when the line runs)")
    if not analysis.ok:
        lines.append(f"not fully understood: {'; '.join(analysis.problems) or 'unknown'}")
    return "\n".join(lines)


def _failure(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def approval_detail(
    tool: Tool,
    args: BaseModel,
    ctx: ToolContext,
    *,
    summary: str,
    command: str | None = None,
    shell: ShellAnalysis | None = None,
) -> str:
    """The detail of the approval question about one call of `tool` (plain text, control
    characters made visible); empty when there is nothing beyond `summary` to show."""
    parts: list[str] = []
    if tool.preview is not None:
        try:
            parts.append(await tool.preview(args, ctx))
        except Exception as exc:  # shown to the person asked; the question is still asked
            parts.append(f"(no preview: {_failure(exc)})")
    if command is not None and shell is not None:
        parts.append(shell_detail(command, shell, summary))
    return printable("\n".join(part for part in parts if part.strip()))
