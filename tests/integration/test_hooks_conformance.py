"""Every hook type fires, through the SDK, with real hook processes (HOOK-1 conformance).

One run walks every fire point that exists: session start and end, each model call, a call
that is asked about and allowed, one asked about and denied, one that fails, a task created
and one of its steps completed, a compaction, and the stop. Every registered type must have
fired, each with the run's identity and depth 0 (the root); the types whose features do not
exist yet (config_change, subagent_stop) are listed here and must not fire. When sub-agents
land, the same walk runs at depth 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from soong_agent import AgentRuntime, ApprovalRequest
from soong_agent.domain.hooks import HOOK_TYPES
from soong_agent.ports.approval import Decision
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config

NOT_YET = {"config_change", "subagent_stop"}
"""Types of features that do not exist yet: nothing can fire them."""

LOGGER = """
import json, os, sys
data = json.load(sys.stdin)
line = {"hook": sys.argv[1], "session": data["session_id"], "run": data["run_id"],
        "depth": data["depth"], "agent": data["agent_id"],
        "env_session": os.environ.get("SESSION_ID")}
with open(sys.argv[2], "a") as log:
    log.write(json.dumps(line) + "\\n")
"""


async def test_every_hook_type_fires_at_the_root_through_the_sdk(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    write_minimal_config(home)
    logger = tmp_path / "log_hook.py"
    logger.write_text(LOGGER, encoding="utf-8")
    log = project / "fired.jsonl"  # hooks run in the OS sandbox: they write in the project
    hooks = {hook: [{"command": f"{sys.executable} {logger} {hook} {log}"}] for hook in HOOK_TYPES}
    (home / "hooks.json").write_text(json.dumps({"hooks": hooks}), encoding="utf-8")

    answers = iter(["allow_once", "deny"])

    def approve(request: ApprovalRequest) -> Decision:
        return next(answers)  # type: ignore[return-value]

    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("write_file", {"path": "a.txt", "content": "a"})),
            ScriptedResponse.tool_calls(("write_file", {"path": "b.txt", "content": "b"})),
            ScriptedResponse.tool_calls(("read_file", {"path": "missing.txt"})),
            ScriptedResponse.tool_calls(("task_create", {"name": "t", "title": "T"})),
            ScriptedResponse.tool_calls(
                ("task_add_step", {"task": "t", "step_id": "s", "title": "S"})
            ),
            ScriptedResponse.tool_calls(("task_claim", {"task": "t", "step_id": "s"})),
            ScriptedResponse.tool_calls(("task_complete", {"task": "t", "step_id": "s"})),
            ScriptedResponse.tool_calls(("compact", {})),
            ScriptedResponse.text("summary of the work"),  # the compaction's summary
            ScriptedResponse.text("done"),
        ]
    )
    async with AgentRuntime(project, home, approve, model=model) as runtime:
        run = await runtime.run("walk every hook")
        result = await run.wait()
    assert result.status == "completed", result.reason
    assert (project / "a.txt").exists() and not (project / "b.txt").exists()

    fired = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert {f["hook"] for f in fired} == set(HOOK_TYPES) - NOT_YET
    assert {(f["session"], f["run"], f["depth"], f["agent"]) for f in fired} == {
        (result.session_id, result.run_id, 0, "root")
    }
    order = [f["hook"] for f in fired]
    assert order[0] == "session_start" and order[-1] == "session_end"
    # the first call: its hook before its permission, the question, then the call's result
    first = [order.index(h) for h in ("pre_tool_use", "permission_request", "notification")]
    assert first == sorted(first) and first[-1] < order.index("post_tool_use")
    assert order.index("pre_compact") < order.index("stop") < order.index("session_end")
    assert fired[0]["env_session"] == result.session_id
