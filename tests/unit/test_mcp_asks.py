"""What a server may ask the client (MCP-4), answered by `ServerAsks`: a form's defaults filled
in, an answer that does not fit the schema refused (never sent), a question declined with
nobody to ask, sampling declined with nobody to approve it, roots as file:// URIs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types

from soong_agent.adapters.mcp.asks import AskSettings, schema_problem, with_defaults
from soong_agent.ports.mcp import ElicitationAnswer, ElicitationRequest

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "Ada", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0},
        "colour": {"type": "string", "enum": ["red", "green"]},
        "ok": {"type": "boolean", "default": True},
    },
    "required": ["age"],
}


def _form(message: str = "Who are you?") -> types.ElicitRequestFormParams:
    return types.ElicitRequestFormParams(message=message, requested_schema=SCHEMA)  # type: ignore[arg-type]


def test_defaults_fill_what_the_answer_leaves_out() -> None:
    assert with_defaults(SCHEMA, {"age": 3}) == {"age": 3, "name": "Ada", "ok": True}


def test_an_answer_is_checked_against_the_schema() -> None:
    assert schema_problem(SCHEMA, {"age": 3, "name": "Ada"}) is None
    assert schema_problem(SCHEMA, {"name": "Ada"}) == "age: required"
    assert schema_problem(SCHEMA, {"age": "3"}) == "age: expected an integer"
    assert schema_problem(SCHEMA, {"age": -1}) == "age: less than 0"
    assert schema_problem(SCHEMA, {"age": 1, "colour": "blue"}) == (
        "colour: 'blue' is not one of ['red', 'green']"
    )
    assert schema_problem(SCHEMA, {"age": 1, "name": "x" * 11}) == "name: longer than 10 characters"
    assert schema_problem(SCHEMA, {"age": 1, "extra": 1}) == "extra: not a field of the form"


async def test_with_nobody_to_ask_a_question_is_declined() -> None:
    asks = AskSettings().for_server("s")
    result = await asks.elicit(None, _form())  # type: ignore[arg-type]
    assert isinstance(result, types.ElicitResult) and result.action == "decline"


async def test_an_accepted_form_is_sent_with_defaults_and_a_bad_one_is_not() -> None:
    seen: list[ElicitationRequest] = []

    async def answer(request: ElicitationRequest) -> ElicitationAnswer:
        seen.append(request)
        return ElicitationAnswer("accept", {"age": 7} if len(seen) == 1 else {"age": "old"})

    asks = AskSettings(elicitor=answer).for_server("s")
    good = await asks.elicit(None, _form())  # type: ignore[arg-type]
    assert isinstance(good, types.ElicitResult)
    assert good.content == {"age": 7, "name": "Ada", "ok": True}
    assert seen[0].server == "s" and seen[0].mode == "form" and seen[0].message == "Who are you?"
    bad = await asks.elicit(None, _form())  # type: ignore[arg-type]
    assert isinstance(bad, types.ErrorData)
    assert "age: expected an integer" in bad.message


async def test_url_mode_is_passed_on_and_answered_with_the_action_only() -> None:
    async def answer(request: ElicitationRequest) -> ElicitationAnswer:
        assert request.mode == "url" and request.url == "https://x.example/pay"
        return ElicitationAnswer("accept", {"ignored": 1})

    asks = AskSettings(elicitor=answer).for_server("s")
    params = types.ElicitRequestURLParams(
        message="Pay here", url="https://x.example/pay", elicitation_id="e1"
    )
    result = await asks.elicit(None, params)  # type: ignore[arg-type]
    assert isinstance(result, types.ElicitResult)
    assert result.action == "accept" and result.content is None


async def test_sampling_is_declined_with_nobody_to_approve_it() -> None:
    asks = AskSettings().for_server("s")
    params = types.CreateMessageRequestParams(
        messages=[
            types.SamplingMessage(role="user", content=types.TextContent(type="text", text="hi"))
        ],
        max_tokens=10,
    )
    result = await asks.sample(None, params)  # type: ignore[arg-type]
    assert isinstance(result, types.ErrorData)
    assert "sampling declined" in result.message


async def test_roots_are_the_given_folders(tmp_path: Path) -> None:
    asks = AskSettings(roots=(tmp_path,)).for_server("s")
    result = await asks.list_roots(None)  # type: ignore[arg-type]
    assert [str(root.uri) for root in result.roots] == [tmp_path.resolve().as_uri()]
