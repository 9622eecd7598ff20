"""How a tool call's arguments text becomes the tool's arguments: parsed and validated in one
step when it is a valid JSON object for the tool, and otherwise explained to the model the same
way whatever went wrong (not JSON, not an object, a wrong or missing argument)."""

from __future__ import annotations

from pydantic import BaseModel

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.ports.events import ToolResultEvent
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.testing import ScriptedModel, ScriptedResponse
from tests.support.harness import Harness


class MeasureArgs(ToolArgs):
    name: str
    count: int = 1
    ratio: float = 1.0
    tags: tuple[str, ...] = ()


async def _measure(args: BaseModel, ctx: ToolContext) -> ToolOutput:
    assert isinstance(args, MeasureArgs)
    return ToolOutput(f"{args.name}|{args.count}|{args.ratio}|{','.join(args.tags)}")


MEASURE = Tool("measure", "Measures.", MeasureArgs, _measure)


async def results_for(*arguments: str) -> list[ToolResultEvent]:
    calls = [
        ScriptedResponse.tool_calls(ToolCallBlock(id=f"c{i}", name="measure", arguments=a))
        for i, a in enumerate(arguments)
    ]
    h = Harness(ScriptedModel([*calls, ScriptedResponse.text("done")]), extra_tools=[MEASURE])
    run = await h.service.start("measure")
    events = [e async for e in run.events()]
    assert (await run.wait()).status == "completed"
    return [e for e in events if isinstance(e, ToolResultEvent)]


async def test_valid_arguments_are_converted_as_the_model_declares_them() -> None:
    results = await results_for(
        '{"name": "a", "count": 3, "ratio": 2, "tags": ["x", "y"]}',
        '{"name": "b", "count": "4"}',  # lax, as pydantic validates a parsed object
        '{"name": "first", "name": "last"}',  # a repeated key: the last one counts
        "",  # no arguments text at all: {}
    )
    assert [r.content for r in results[:3]] == ["a|3|2.0|x,y", "b|4|1.0|", "last|1|1.0|"]
    assert [r.is_error for r in results[:3]] == [False, False, False]
    assert results[3].is_error
    assert results[3].content == "invalid arguments for measure: name: Field required"


async def test_bad_arguments_are_explained_the_same_way_as_before() -> None:
    results = await results_for(
        '{"name": "a", "count": 3',
        "[1, 2]",
        '{"name": "a", "count": "many"}',
        '{"name": "a", "colour": "red"}',
        '  {"name": "spaced"}',
        '{"name": "a", "ratio": NaN}',
    )
    contents = [r.content for r in results]
    assert contents[0].startswith("arguments are not valid JSON (")
    assert contents[1] == "arguments must be a JSON object"
    assert contents[2].startswith("invalid arguments for measure: count: Input should be a valid")
    assert contents[3] == "invalid arguments for measure: colour: Extra inputs are not permitted"
    assert contents[4] == "spaced|1|1.0|", "leading blanks are still JSON"
    assert contents[5] == "a|1|nan|", "what Python's JSON reads (NaN) is still accepted"
    assert [r.is_error for r in results] == [True, True, True, True, False, False]
