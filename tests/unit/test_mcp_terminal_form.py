"""An MCP server's question on the terminal (MCP-4, `entrypoints/cli/elicitation.py`): each
field asked in turn with its type, default and choices, a value that does not fit asked again,
optional fields left out, declined or cancelled on request or when stdin closes, URL mode; and
who gets a terminal form at all. The run events of what servers ask round-trip as run events."""

from __future__ import annotations

import io
from typing import Any

import pytest

from soong_agent.adapters.approvals.terminal import TerminalApprover
from soong_agent.entrypoints.cli.approve_modes import NeverApprover
from soong_agent.entrypoints.cli.elicitation import TerminalForm, terminal_elicitor
from soong_agent.ports.events import RUN_EVENT, McpElicitationEvent, McpSamplingEvent
from soong_agent.ports.mcp import ElicitationAnswer, ElicitationRequest

FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Your name", "maxLength": 5},
        "age": {"type": "integer", "minimum": 0},
        "ratio": {"type": "number", "default": 0.5},
        "ok": {"type": "boolean", "default": False},
        "colour": {
            "type": "string",
            "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}],
        },
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}},
        "note": {"type": "string"},
    },
    "required": ["name", "age", "colour"],
}


async def _ask(lines: str, request: ElicitationRequest) -> tuple[ElicitationAnswer, str]:
    shown: list[str] = []
    approver = TerminalApprover(stdin=io.StringIO(lines), write=shown.append)
    answer = await TerminalForm(approver).ask(request)
    return answer, "".join(shown)


def _form(schema: dict[str, Any] = FORM) -> ElicitationRequest:
    return ElicitationRequest("shop", "Tell us about you", "form", schema=schema)


async def test_each_field_is_asked_and_typed_answers_are_converted() -> None:
    answer, shown = await _ask(
        "y\nAda\nold\n-1\n36\n\nyes\nGreen\n1, 3\n-\n",
        _form(),
    )
    assert answer == ElicitationAnswer(
        "accept",
        {"name": "Ada", "age": 36, "ratio": 0.5, "ok": True, "colour": "g", "tags": ["a", "c"]},
    )
    assert "? MCP server 'shop' asks: Tell us about you" in shown
    assert "Your name (text; required): " in shown
    assert "(a whole number is wanted) age: " in shown
    assert "(less than 0) age: " in shown
    assert "ratio (a number; default 0.5; optional): " in shown
    assert "ok (yes/no; default no; optional): " in shown
    assert "colour (one of 1) Red, 2) Green; required): " in shown
    assert "tags (some of 1) a, 2) b, 3) c; comma-separated; optional): " in shown


async def test_a_value_that_never_fits_cancels_and_a_required_field_cannot_be_skipped() -> None:
    answer, shown = await _ask("y\ntoo long\nlonger still\nway too long\n", _form())
    assert answer == ElicitationAnswer("cancel")
    assert "(longer than 5 characters) name: " in shown
    answer, shown = await _ask(
        "\n\nv\n", _form({"properties": {"x": {"type": "string"}}, "required": ["x"]})
    )
    assert "(a value is required) x: " in shown
    assert answer == ElicitationAnswer("accept", {"x": "v"})


@pytest.mark.parametrize(
    ("lines", "action"),
    [
        ("n\n", "decline"),
        ("c\n", "cancel"),
        ("y\n:decline\n", "decline"),
        ("y\nAda\n:cancel\n", "cancel"),
        ("y\nAda\n", "decline"),  # stdin closed in the middle: nobody answers
        ("", "decline"),
    ],
)
async def test_the_form_can_be_declined_or_cancelled(lines: str, action: str) -> None:
    answer, _ = await _ask(lines, _form())
    assert answer == ElicitationAnswer(action)  # type: ignore[arg-type]


async def test_url_mode_shows_the_url_and_asks_whether_it_was_opened() -> None:
    request = ElicitationRequest("pay", "Confirm the payment", "url", url="https://pay.example/x")
    answer, shown = await _ask("y\n", request)
    assert answer == ElicitationAnswer("accept")
    assert "https://pay.example/x" in shown and "Confirm the payment" in shown
    assert (await _ask("n\n", request))[0] == ElicitationAnswer("decline")


async def test_terminal_escapes_in_a_question_are_shown_not_obeyed() -> None:
    schema = {"properties": {"f\x1b[2J": {"type": "string", "description": "d\x1b]0;t\x07"}}}
    request = ElicitationRequest("s", "hi\x1b[31m", "form", schema=schema)
    _, shown = await _ask("y\nv\n", request)
    assert "\x1b" not in shown and "\\x1b" in shown


def test_only_the_terminal_approver_on_a_terminal_gets_a_form() -> None:
    terminal = TerminalApprover(stdin=io.StringIO(""), write=lambda text: None)
    assert terminal_elicitor(terminal, interactive=True) is not None
    assert terminal_elicitor(terminal, interactive=False) is None
    assert terminal_elicitor(NeverApprover(), interactive=True) is None
    assert terminal_elicitor(None, interactive=True) is None


def test_the_events_of_what_servers_ask_are_run_events() -> None:
    base = {"seq": 1, "run_id": "r", "session_id": "s", "at": 1.0}
    sampled = McpSamplingEvent(
        **base, server="a", outcome="declined", messages=2, prompt="p", reason="no"
    )
    asked = McpElicitationEvent(
        **base, server="a", mode="form", message="m", fields=["x"], action="accept"
    )
    for event in (sampled, asked):
        assert RUN_EVENT.validate_json(event.model_dump_json()) == event
    with pytest.raises(ValueError, match="outcome"):
        McpSamplingEvent(**base, server="a", outcome="maybe", messages=1)
