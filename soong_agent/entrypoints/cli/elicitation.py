"""An MCP server's questions (`elicitation/create`, MCP-4) put to the person at the terminal,
field by field, through the terminal approver's I/O (one question at a time on one terminal).

A form is shown with the server's name and message, then each field of its schema is asked
for in turn, with its type, its description, its default (Enter takes it) and its choices
(numbered: the number or the value is an answer). A value that does not fit the field says why
and is asked again. ``-`` leaves an optional field out; ``:decline`` declines the form,
``:cancel`` cancels it; a closed stdin declines. In URL mode the URL is shown and the person
says whether they opened it.

Only where a person can answer: the CLI with a terminal on stdin, the text output and the
terminal approver (`run -o json`, piped input, `--approve never|once-per-tool|rules-only` and
workers decline every question).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from soong_agent.ports.approval import Approver, printable
from soong_agent.ports.mcp import ElicitationAnswer, ElicitationRequest, Elicitor

if TYPE_CHECKING:  # (imported when a run asks: this module is loaded with the CLI's commands)
    from soong_agent.adapters.approvals.terminal import TerminalApprover
    from soong_agent.entrypoints.containers import CliContainer

Ask = Callable[[str], Awaitable[str | None]]

DECLINE, CANCEL, SKIP = ":decline", ":cancel", "-"
TRIES = 3
"""How many times a field whose answer does not fit is asked before the form is cancelled."""

_YES = frozenset({"y", "yes", "true", "1", "on"})
_NO = frozenset({"n", "no", "false", "0", "off"})


class _Stop(Exception):
    """The person declined or cancelled the form (or stdin closed)."""

    def __init__(self, answer: ElicitationAnswer) -> None:
        self.answer = answer


def terminal_elicitor(
    approver: Approver | None, *, interactive: bool | None = None
) -> Elicitor | None:
    """The elicitor of a CLI run: over `approver` when it is the terminal's and stdin is a
    terminal (`interactive` None: `sys.stdin.isatty()`); None otherwise (questions are
    declined)."""
    from soong_agent.adapters.approvals.terminal import TerminalApprover

    if not isinstance(approver, TerminalApprover):
        return None
    if interactive is None:
        try:
            interactive = sys.stdin.isatty()
        except (OSError, ValueError):
            interactive = False
    if not interactive:
        return None
    return TerminalForm(approver).ask


class TerminalForm:
    """Asks an MCP server's questions on the terminal of `approver`."""

    def __init__(self, approver: TerminalApprover) -> None:
        self._approver = approver

    async def ask(self, request: ElicitationRequest) -> ElicitationAnswer:
        async with self._approver.holding() as ask:
            try:
                if request.mode == "url":
                    return await _url(ask, request)
                return await _form(ask, request)
            except _Stop as stop:
                return stop.answer


async def _url(ask: Ask, request: ElicitationRequest) -> ElicitationAnswer:
    line = await ask(
        f"\n? MCP server {request.server!r} asks you to open a page: {printable(request.message)}\n"
        f"    {printable(request.url or '')}\n"
        "  did you open it? [y]es / [n]o (decline) / [c]ancel: "
    )
    answer = (line or "").strip().lower()
    if line is None or answer in ("n", "no", DECLINE):
        return ElicitationAnswer("decline")
    if answer in ("y", "yes"):
        return ElicitationAnswer("accept")
    return ElicitationAnswer("cancel")


async def _form(ask: Ask, request: ElicitationRequest) -> ElicitationAnswer:
    schema: Mapping[str, Any] = request.schema or {}
    properties = schema.get("properties")
    fields: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
    required = set(schema.get("required") or ())
    line = await ask(
        f"\n? MCP server {request.server!r} asks: {printable(request.message)}\n"
        f"  ({len(fields)} field{'s' if len(fields) != 1 else ''}; Enter takes a default, "
        f"{SKIP} leaves an optional field out, {DECLINE} declines, {CANCEL} cancels)\n"
        "  answer it? [y]es / [n]o (decline) / [c]ancel: "
    )
    start = (line or "").strip().lower()
    if line is None or start in ("n", "no", DECLINE):
        return ElicitationAnswer("decline")
    if start not in ("", "y", "yes"):
        return ElicitationAnswer("cancel")
    content: dict[str, Any] = {}
    for name, prop in fields.items():
        if not isinstance(prop, Mapping):
            continue
        value = await _field(ask, str(name), prop, str(name) in required)
        if value is not _LEFT_OUT:
            content[str(name)] = value
    return ElicitationAnswer("accept", content)


_LEFT_OUT = object()


async def _field(ask: Ask, name: str, prop: Mapping[str, Any], required: bool) -> Any:
    choices = _choices(prop)
    question = _question(name, prop, required, choices)
    for _ in range(TRIES):
        line = await ask(question)
        if line is None:
            raise _Stop(ElicitationAnswer("decline"))
        text = line.strip()
        if text == DECLINE:
            raise _Stop(ElicitationAnswer("decline"))
        if text == CANCEL:
            raise _Stop(ElicitationAnswer("cancel"))
        if text == "":
            if "default" in prop:
                return prop["default"]
            if not required:
                return _LEFT_OUT
            ask_again = "a value is required"
        elif text == SKIP and not required:
            return _LEFT_OUT
        else:
            value, wrong = _parse(text, prop, choices)
            if wrong is None:
                from soong_agent.adapters.mcp.forms import schema_problem

                problem = schema_problem({"properties": {name: prop}}, {name: value})
                if problem is None:
                    return value
                wrong = problem.split(": ", 1)[-1]
            ask_again = wrong
        question = f"    ({ask_again}) {name}: "
    raise _Stop(ElicitationAnswer("cancel"))


def _choices(prop: Mapping[str, Any]) -> list[tuple[Any, str]]:
    """(value, label) of each choice of an enum field (`enum`, `oneOf`/`anyOf` of `const`
    with their `title`, or an array's `items` of those)."""
    source = prop.get("items") if prop.get("type") == "array" else prop
    if not isinstance(source, Mapping):
        return []
    if isinstance(source.get("enum"), list):
        names = source.get("enumNames")
        labels = names if isinstance(names, list) and len(names) == len(source["enum"]) else None
        return [
            (value, str(labels[i]) if labels else str(value))
            for i, value in enumerate(source["enum"])
        ]
    for key in ("oneOf", "anyOf"):
        options = source.get(key)
        if isinstance(options, list):
            return [
                (o["const"], str(o.get("title") or o["const"]))
                for o in options
                if isinstance(o, Mapping) and "const" in o
            ]
    return []


def _question(
    name: str, prop: Mapping[str, Any], required: bool, choices: list[tuple[Any, str]]
) -> str:
    kind = prop.get("type")
    title = prop.get("title") or name
    parts: list[str] = []
    if choices:
        shown = ", ".join(f"{i}) {printable(label)}" for i, (_, label) in enumerate(choices, 1))
        several = kind == "array"
        parts.append(
            f"{'some' if several else 'one'} of {shown}{'; comma-separated' if several else ''}"
        )
    elif kind == "boolean":
        parts.append("yes/no")
    elif kind == "integer":
        parts.append("a whole number")
    elif kind == "number":
        parts.append("a number")
    else:
        parts.append("text")
        if isinstance(prop.get("format"), str):
            parts[-1] += f", {prop['format']}"
    for key, said in (("minimum", "≥"), ("maximum", "≤")):
        if key in prop:
            parts.append(f"{said} {prop[key]}")
    if "default" in prop:
        default = prop["default"]
        if isinstance(default, bool):
            default = "yes" if default else "no"
        parts.append(f"default {printable(str(default))}")
    parts.append("required" if required else "optional")
    about = prop.get("description")
    described = f" — {printable(str(about))}" if about else ""
    return f"  {printable(str(title))} ({'; '.join(parts)}){described}: "


def _parse(
    text: str, prop: Mapping[str, Any], choices: list[tuple[Any, str]]
) -> tuple[Any, str | None]:
    """The value typed for a field, or why it is not one."""
    kind = prop.get("type")
    if choices:
        picks = [part.strip() for part in text.split(",")] if kind == "array" else [text]
        values = []
        for pick in picks:
            value = _choice(pick, choices)
            if value is _LEFT_OUT:
                return None, f"{pick!r} is not one of the choices"
            values.append(value)
        return (values if kind == "array" else values[0]), None
    if kind == "boolean":
        if text.lower() in _YES:
            return True, None
        if text.lower() in _NO:
            return False, None
        return None, "answer yes or no"
    if kind == "integer":
        try:
            return int(text), None
        except ValueError:
            return None, "a whole number is wanted"
    if kind == "number":
        try:
            number = float(text)
        except ValueError:
            return None, "a number is wanted"
        return (int(number) if number.is_integer() and "." not in text else number), None
    return text, None


def _choice(pick: str, choices: list[tuple[Any, str]]) -> Any:
    if pick.isdigit() and 1 <= int(pick) <= len(choices):
        return choices[int(pick) - 1][0]
    for value, label in choices:
        if pick in (str(value), label):
            return value
    return _LEFT_OUT


def with_questions(container: CliContainer, output: str = "text") -> CliContainer:
    """`container` with MCP servers' questions put to the person at the terminal of a CLI
    run or chat (`terminal_elicitor` over its approver); with ``json`` output, or nobody at a
    terminal, they are declined."""
    elicitor = None if output == "json" else terminal_elicitor(container.approver())
    if elicitor is not None:
        from soong_agent.entrypoints.di import providers

        container.adapters.mcp_elicitor.override(providers.Object(elicitor))
    return container
