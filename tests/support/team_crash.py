"""A team in a process that a test kills with SIGKILL, then resumes in a new process.

python -m tests.support.team_crash first HOME PROJECT OUT
    The lead makes a task with one step and two teammates; alice takes the step up and
    hangs in a model call; the lead mails her while she works. Writes {"session": id} to
    OUT and prints READY, then waits to be killed.
python -m tests.support.team_crash second HOME PROJECT OUT SESSION
    Resumes the lead's session (after the step's lease has expired); waits for the team to
    settle; writes what the model saw and the roster to OUT.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from soong_agent import AgentRuntime
from soong_agent.ports.model import ModelRequest
from soong_agent.testing import ScriptedModel, ScriptedResponse


def last_user(request: ModelRequest) -> str:
    users = [m for m in request.messages if m.role == "user"]
    return users[-1].text if users else ""


def call(tool: str, /, **args: object) -> ScriptedResponse:
    return ScriptedResponse.tool_calls((tool, dict(args)))


async def first(home: Path, project: Path, out: Path) -> None:
    counts: dict[str, int] = {}
    ready = asyncio.Event()

    def answer(request: ModelRequest) -> ScriptedResponse:
        text = last_user(request)
        key = "work" if "Work is ready" in text else "lead" if text == "lead the team" else "idle"
        n = counts[key] = counts.get(key, 0) + 1
        if key == "lead":
            script = [
                call("task_create", name="ship", title="Ship"),
                call("task_add_step", task="ship", step_id="build", title="Build"),
                ScriptedResponse.tool_calls(
                    (
                        "spawn_teammate",
                        {"definition": "default_worker_agent", "name": "alice", "prompt": "hi"},
                    ),
                ),
            ]
            if n <= len(script):
                return script[n - 1]
            return ScriptedResponse.text("lead waits", delay_s=600)
        if key == "work":
            if n == 1:
                return call("task_claim", task="ship", step_id="build")
            ready.set()
            return ScriptedResponse.text("never finished", delay_s=600)
        return ScriptedResponse.text("idle")

    model = ScriptedModel(default=answer)
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("lead the team", orchestrator=True)
        await asyncio.wait_for(ready.wait(), 30)
        teams = runtime._container.services.teams()
        sent = await teams.mail(run.session_id, "alice", "status? (sent while you work)")
        assert not sent.is_error, sent.content
        added = await teams.add_member(run.session_id, "default_worker_agent", "bob", "bob: hi")
        assert not added.is_error, added.content
        while not any(
            m.name == "bob" and m.runs >= 1 and m.status == "idle"
            for m in teams.roster(run.session_id)
        ):
            await asyncio.sleep(0.05)
        out.write_text(json.dumps({"session": run.session_id}))
        sys.stdout.write("READY\n")
        sys.stdout.flush()
        await asyncio.sleep(600)


async def second(home: Path, project: Path, out: Path, session: str) -> None:
    seen: list[tuple[str, str]] = []
    counts: dict[str, int] = {}

    def answer(request: ModelRequest) -> ScriptedResponse:
        text = last_user(request)
        who = "alice" if "status?" in text else "work" if "Work is ready" in text else "other"
        seen.append((who, text))
        n = counts[who] = counts.get(who, 0) + 1
        if who == "work":
            if n == 1:
                return call("task_claim", task="ship", step_id="build")
            if n == 2:
                return call("task_complete", task="ship", step_id="build", summary="built")
        if who == "other" and text == "carry on" and n == 1:
            return call("team_wait", timeout_s=20)
        return ScriptedResponse.text("ok")

    model = ScriptedModel(default=answer)
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("carry on", session_id=session)
        await asyncio.wait_for(run.wait(), 60)
        teams = runtime._container.services.teams()
        settled = await teams.settle(session, timeout_s=30)
        roster = [m.as_json() for m in teams.roster(session)]
    out.write_text(json.dumps({"settled": settled, "seen": seen, "roster": roster}))


def main() -> None:
    phase, home, project, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    if phase == "first":
        asyncio.run(first(home, project, out))
    else:
        asyncio.run(second(home, project, out, sys.argv[5]))


if __name__ == "__main__":
    main()
