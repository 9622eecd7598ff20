"""Property: through the SDK, whatever a model sends (bad tool calls of every built-in tool,
unknown and huge tool names, duplicate ids, lone surrogates in text, names and arguments,
arguments nested thousands deep, many calls a turn), no exception escapes `run.events()` or
`run.wait()`, the run ends with a status the session store records, and the session resumes
(issue 39 item 5).

One runtime over a real SQLite file and a project holding a file whose name is not UTF-8;
every write and command is denied by the approval callback, so nothing the fuzzer makes up
runs on this machine beyond reads inside the project."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soong_agent import AgentRuntime
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config
from tests.property.bad_input import arguments_for, bad_text

EXAMPLES = 150
STATUSES = {"completed", "failed", "max_turns", "stuck", "budget_exhausted", "blocked"}
TOOLS = ["read_file", "list_dir", "glob", "grep", "write_file", "edit_file", "run_command"]
TOOLS += ["web_fetch", "todo_write", "read_artifact", "task_create", "memory_write"]
ARGUMENT_NAMES = ["path", "pattern", "content", "command", "old_string", "new_string", "limit"]
ARGUMENT_NAMES += ["offset", "url", "todos", "glob", "artifact_id", "name", "task"]

names = st.one_of(st.sampled_from(TOOLS), st.sampled_from(TOOLS), bad_text, st.just("x" * 70_000))
ids = st.one_of(st.sampled_from(["call_1", "call_1", "call_2"]), bad_text)
calls = st.lists(
    st.builds(
        lambda call_id, name, arguments: ToolCallBlock(id=call_id, name=name, arguments=arguments),
        ids,
        names,
        arguments_for(ARGUMENT_NAMES),
    ),
    min_size=1,
    max_size=4,
)
failures = st.sampled_from(
    [
        ProviderError("overloaded", kind="overloaded", provider="p", base_url="http://p"),
        ProviderError("bad \udce9 \ud800", kind="bad_request", provider="p", base_url="http://p"),
        RecursionError("maximum recursion depth exceeded while decoding a JSON array"),
        UnicodeEncodeError("utf-8", "caf\udce9", 3, 4, "surrogates not allowed"),
        KeyError("a bug"),
    ]
)
turns = st.lists(st.one_of(calls, st.builds(lambda n: [n], st.integers(40, 50))), max_size=3)


class World:
    """The runtime all examples share (built at the first), on a loop of its own."""

    def __init__(self) -> None:
        self.folder = tempfile.TemporaryDirectory()
        root = Path(self.folder.name)
        self.home, self.project = root / "home", root / "project"
        write_minimal_config(self.home, "[runtime]\nmax_turns = 6\n")
        self.project.mkdir()
        with open(os.path.join(os.fsencode(self.project), b"caf\xe9.txt"), "wb") as f:
            f.write(b"hello\n")
        (self.project / "notes.txt").write_text("notes\n", encoding="utf-8")
        self.model = ScriptedModel(strict=False, unique_call_ids=False)
        self.loop = asyncio.new_event_loop()
        self.runtime = AgentRuntime(
            self.project, self.home, lambda request: "deny", model=self.model
        )

    def close(self) -> None:
        self.loop.run_until_complete(self.runtime.aclose())
        self.loop.close()
        self.folder.cleanup()


_WORLD: list[World] = []


def world() -> World:
    if not _WORLD:
        _WORLD.append(World())
    return _WORLD[0]


def teardown_module() -> None:
    while _WORLD:
        _WORLD.pop().close()


def _text(answer: str, pieces: int) -> ScriptedResponse:
    return ScriptedResponse.text(answer, pieces=pieces)


def _script(plan: list[Any], answer: str | BaseException) -> list[Any]:
    out: list[Any] = []
    for turn in plan:
        if turn and isinstance(turn[0], int):  # many calls in one turn
            many = [("read_file", {"path": f"missing_{i}.txt"}) for i in range(turn[0])]
            out.append(ScriptedResponse.tool_calls(*many))
        else:
            out.append(ScriptedResponse.tool_calls(*turn))
    out.append(answer if isinstance(answer, BaseException) else _text(answer, 3))
    return out


async def _one(w: World, plan: list[Any], answer: str | BaseException) -> None:
    w.model.script[:] = _script(plan, answer)
    run = await w.runtime.run("fuzz")
    seen = [event async for event in run.events()]  # never raises
    result = await run.wait()  # never raises
    assert result.status in STATUSES, (result.status, result.reason)
    if isinstance(answer, BaseException):  # the model's call raised: a failed run, said so
        assert result.status == "failed"
    if result.status != "completed":
        assert result.reason and result.reason.strip()
        result.reason.encode("utf-8")
    result.final_text.encode("utf-8")  # shown text is always UTF-8
    assert seen and seen[-1].type in ("run_finished", "error")
    [stored] = [r for r in await w.runtime.session_runs(run.session_id) if r.id == run.run_id]
    assert stored.status == result.status
    w.model.script[:] = [ScriptedResponse.text("resumed")]
    again = await w.runtime.run("go on", session_id=run.session_id)
    resumed = await again.wait()
    assert resumed.status == "completed", resumed.reason
    assert resumed.output == "resumed"


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(plan=turns, answer=st.one_of(bad_text, bad_text, failures))
def test_no_bad_tool_call_or_text_escapes_and_every_run_ends_recorded_and_resumes(
    plan: list[Any], answer: str | BaseException
) -> None:
    w = world()
    w.loop.run_until_complete(_one(w, plan, answer))
