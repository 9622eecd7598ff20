"""`AgentRuntime(storage_url=…)` (STORE-1, STORE-2) on a real PostgreSQL: a session written by
one runtime is listed and resumed by another runtime on the same database (as another process
or host would), the default SQLite file is never made, and while a run holds its session a
second runtime's resume of it is refused with the session named — no interleaved turns. A bad
URL is a UsageError naming `storage_url`."""

from __future__ import annotations

from pathlib import Path

import pytest

from soong_agent import AgentRuntime
from soong_agent.ports.errors import UsageError
from soong_agent.ports.storage import SessionBusy
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    write_minimal_config(home)
    return project, home


async def test_two_runtimes_share_sessions_through_one_database(
    world: tuple[Path, Path], postgres_url: str
) -> None:
    project, home = world
    first_model = ScriptedModel([ScriptedResponse.text("hello from the first host")])
    async with AgentRuntime(project, home, storage_url=postgres_url, model=first_model) as one:
        first = await (await one.run("say hello")).wait()
        assert first.status == "completed"
    second_model = ScriptedModel([ScriptedResponse.text("and hello again")])
    async with AgentRuntime(project, home, storage_url=postgres_url, model=second_model) as two:
        assert [s.id for s in await two.list_sessions()] == [first.session_id]
        again = await (await two.run("once more", session_id=first.session_id)).wait()
        assert again.status == "completed"
        # the resumed run saw the first runtime's turn
        assert [m.text for m in second_model.last_call.messages] == [
            "say hello",
            "hello from the first host",
            "once more",
        ]
    assert not list(home.rglob("*.sqlite"))


async def test_a_session_held_by_a_run_is_refused_to_a_second_runtime(
    world: tuple[Path, Path], postgres_url: str
) -> None:
    project, home = world
    slow = ScriptedModel(
        [ScriptedResponse.text("first"), ScriptedResponse.text("slow answer", delay_s=30.0)]
    )
    async with AgentRuntime(project, home, storage_url=postgres_url, model=slow) as one:
        session = (await (await one.run("start")).wait()).session_id
        running = await one.run("think for a while", session_id=session)
        other = ScriptedModel([ScriptedResponse.text("never asked")])
        async with AgentRuntime(project, home, storage_url=postgres_url, model=other) as two:
            with pytest.raises(SessionBusy) as busy:
                await two.run("me too", session_id=session)
            assert session in str(busy.value) and "in use" in str(busy.value)
            assert other.calls == []
            await running.cancel()
            await running.wait()
            # the run has ended: its claim is gone, the session resumes elsewhere
            resumed = await (await two.run("now me", session_id=session)).wait()
            assert resumed.status == "completed"


def test_a_bad_storage_url_names_the_setting(world: tuple[Path, Path]) -> None:
    project, home = world
    with pytest.raises(UsageError, match="storage_url"):
        AgentRuntime(project, home, storage_url="mysql://db.example/x")
