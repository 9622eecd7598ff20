"""Property: whatever arguments a model sends, every built-in tool's call is parsed into valid
arguments or refused with a clear, storable reason; nothing raises (issue 39 item 5).

The argument models are found by walking `ToolArgs` subclasses across the built-in tool
modules, so a new tool is covered without touching this file."""

from __future__ import annotations

import importlib
import json
import pkgutil
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

import soong_agent.application.tools as tools_package
from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput, ToolRegistry
from soong_agent.application.tools.pipeline import ToolPipeline
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.ports.text import safe_json_text, safe_text
from tests.property.bad_input import arguments_for, bad_text, json_values

EXAMPLES = 300
"""Per property: each draws the tool (of every built-in argument model) with the input."""
SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _argument_models() -> list[type[ToolArgs]]:
    for info in pkgutil.iter_modules(tools_package.__path__):
        importlib.import_module(f"{tools_package.__name__}.{info.name}")
    found: list[type[ToolArgs]] = []
    pending = list(ToolArgs.__subclasses__())
    while pending:
        cls = pending.pop()
        pending += cls.__subclasses__()
        if cls.__module__.startswith("soong_agent."):
            found.append(cls)
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


MODELS = _argument_models()


def _names(model: type[BaseModel]) -> list[str]:
    names: list[str] = []
    for name, info in model.model_fields.items():
        names.append(name)
        alias = info.validation_alias
        choices = getattr(alias, "choices", None)
        if choices:
            names += [c for c in choices if isinstance(c, str)]
    return names


async def _never(args: BaseModel, ctx: ToolContext) -> ToolOutput:
    raise AssertionError("the property tests only parse arguments")


def _pipeline(model: type[ToolArgs]) -> ToolPipeline:
    registry = ToolRegistry([Tool("the_tool", "a tool", model, _never)])
    return ToolPipeline(registry=registry, gate=None, clock=None)  # type: ignore[arg-type]


def test_every_built_in_tool_module_has_argument_models() -> None:
    modules = {m.__module__.rsplit(".", 1)[-1] for m in MODELS}
    assert {"files", "shell", "web", "todo", "artifacts", "memory", "plans", "tasks"} <= modules
    assert len(MODELS) >= 20


def _assert_prepared(model: type[ToolArgs], raw: str) -> None:
    # the loop's boundary first (`ModelCalls._safe_call`), then the pipeline's parser
    arguments, lone = safe_json_text(raw)
    refused = {arguments: "refused: a lone surrogate"} if lone else None
    call = ToolCallBlock(id="call_1", name="the_tool", arguments=arguments)
    arguments.encode("utf-8")  # storable and sendable as it is
    prepared = _pipeline(model)._prepare(call, refused)
    if prepared.problem is not None:
        assert prepared.args is None
        prepared.problem.encode("utf-8")  # a reason the model, the store and a person can take
        assert prepared.problem.strip()
        if lone:
            assert prepared.problem == "refused: a lone surrogate"
        return
    assert isinstance(prepared.args, model)
    assert not lone
    prepared.args.model_dump_json()  # raises for a lone surrogate: a tool gets only text


@SETTINGS
@given(model=st.sampled_from(MODELS), data=st.data())
def test_any_arguments_text_is_parsed_or_refused_with_a_reason(
    model: type[ToolArgs], data: st.DataObject
) -> None:
    raw = data.draw(arguments_for(_names(model)))
    _assert_prepared(model, raw)


@settings(SETTINGS, max_examples=EXAMPLES // 2)
@given(model=st.sampled_from(MODELS), data=st.data())
def test_an_argument_model_validates_or_says_what_is_wrong(
    model: type[ToolArgs], data: st.DataObject
) -> None:
    # the real names (and unknown ones) with values of any type
    names = st.sampled_from(_names(model) or ["x"])
    fields: dict[str, Any] = data.draw(
        st.dictionaries(st.one_of(names, names, bad_text), json_values, max_size=4)
    )
    try:
        model.model_validate(fields)
    except ValidationError as exc:
        assert exc.errors()  # names what is wrong (the pipeline tells the model)


@SETTINGS
@given(raw=st.one_of(bad_text, st.builds(json.dumps, json_values)))
def test_a_tool_name_of_any_text_gets_a_storable_unknown_tool_reason(raw: str) -> None:
    name = safe_text(raw + "x" * 200)  # (the loop's boundary makes the name safe)
    call = ToolCallBlock(id="c", name=name, arguments="{}")
    prepared = _pipeline(MODELS[0])._prepare(call, None)
    assert prepared.problem is not None and prepared.problem.startswith("unknown tool")
    assert len(prepared.problem) < 2_000
    prepared.problem.encode("utf-8")
