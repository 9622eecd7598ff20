"""`soong-agent run` end to end: streaming, approval, denial, resume, transcript, secrets."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import CANARY, CLI, CliWorld
from tests.support.fake_openai import error_response, text_response, tool_call_response

pytestmark = pytest.mark.e2e

WRITE_ARGS = json.dumps({"path": "hello.txt", "content": "hi from the agent\n"})


def session_id_of(output: str) -> str:
    match = re.search(r"session: (ses_\w+)", output)
    assert match, output
    return match.group(1)


def test_text_answer_streams_and_prints_session(world: CliWorld) -> None:
    world.server.enqueue(text_response("Hello from the model", pieces=4))
    result = world.run("run", "say hello")
    assert result.returncode == 0, result.stderr
    assert "Hello from the model" in result.stdout
    session_id_of(result.stdout)
    body = world.server.requests[0].json
    assert body["model"] == "fake-model" and body["stream"] is True
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][-1] == {"role": "user", "content": "say hello"}
    assert world.server.requests[0].headers["authorization"] == f"Bearer {CANARY}"


def test_write_after_answering_1_creates_the_file(world: CliWorld) -> None:
    world.server.enqueue(
        tool_call_response([("call_1", "write_file", WRITE_ARGS)], fragments=4),
        text_response("Wrote hello.txt"),
    )
    result = world.run("run", "create hello.txt", input="1\n")
    assert result.returncode == 0, result.stderr
    assert (world.project / "hello.txt").read_text() == "hi from the agent\n"
    assert "write_file" in result.stderr
    tool_messages = [m for m in world.server.requests[1].json["messages"] if m["role"] == "tool"]
    assert tool_messages[0]["tool_call_id"] == "call_1"
    assert "Wrote hello.txt" in result.stdout


def test_closed_stdin_denies_the_write_and_tells_the_model(world: CliWorld) -> None:
    world.server.enqueue(
        tool_call_response([("call_1", "write_file", WRITE_ARGS)]),
        text_response("I could not write it"),
    )
    result = world.run("run", "create hello.txt")
    assert result.returncode == 0, result.stderr
    assert not (world.project / "hello.txt").exists()
    tool_message = next(m for m in world.server.requests[1].json["messages"] if m["role"] == "tool")
    assert "denied" in tool_message["content"].lower()


@pytest.mark.parametrize("answer", ["3\n", "yes\n", "deny\n"])
def test_any_other_answer_denies(world: CliWorld, answer: str) -> None:
    world.server.enqueue(
        tool_call_response([("call_1", "write_file", WRITE_ARGS)]), text_response("ok")
    )
    result = world.run("run", "create hello.txt", input=answer)
    assert result.returncode == 0, result.stderr
    assert not (world.project / "hello.txt").exists()


def test_piped_answers_cover_several_prompts(world: CliWorld) -> None:
    second = json.dumps({"path": "second.txt", "content": "2"})
    world.server.enqueue(
        tool_call_response([("c1", "write_file", WRITE_ARGS)]),
        tool_call_response([("c2", "write_file", second)]),
        text_response("done"),
    )
    result = world.run("run", "two files", input="1\n3\n")
    assert result.returncode == 0, result.stderr
    assert (world.project / "hello.txt").exists()
    assert not (world.project / "second.txt").exists()


def test_allow_for_session_is_not_asked_again(world: CliWorld) -> None:
    second = json.dumps({"path": "second.txt", "content": "2"})
    world.server.enqueue(
        tool_call_response([("c1", "write_file", WRITE_ARGS)]),
        tool_call_response([("c2", "write_file", second)]),
        text_response("done"),
    )
    result = world.run("run", "two files", input="2\n")
    assert result.returncode == 0, result.stderr
    assert (world.project / "second.txt").read_text() == "2"
    assert result.stderr.count("answer [1/2/3]") == 1


def test_resume_sends_the_earlier_history(world: CliWorld) -> None:
    world.server.enqueue(text_response("The capital is Paris."), text_response("It has 2M people."))
    first = world.run("run", "capital of France?")
    sid = session_id_of(first.stdout)
    second = world.run("run", "--session-id", sid, "how many people?")
    assert second.returncode == 0, second.stderr
    assert session_id_of(second.stdout) == sid
    sent = [(m["role"], m.get("content")) for m in world.server.requests[1].json["messages"][1:]]
    assert sent == [
        ("user", "capital of France?"),
        ("assistant", "The capital is Paris."),
        ("user", "how many people?"),
    ]


def test_a_session_resumes_only_in_its_own_project(world: CliWorld, tmp_path: Path) -> None:
    world.server.enqueue(text_response("first answer"), text_response("second answer"))
    first = world.run("run", "remember this project")
    sid = session_id_of(first.stdout)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    moved = world.run("run", "--path", str(elsewhere), "--session-id", sid, "write here")
    assert moved.returncode == 2, moved.stderr
    assert f"belongs to the project {world.project.resolve()}" in moved.stderr
    assert str(elsewhere) in moved.stderr and len(world.server.requests) == 1  # nothing sent
    again = world.run("run", "--session-id", sid, "go on")  # from its own folder: resumed
    assert again.returncode == 0, again.stderr
    assert "second answer" in again.stdout


def test_resume_of_an_unknown_session_exits_2(world: CliWorld) -> None:
    result = world.run("run", "--session-id", "ses_nope", "hello")
    assert result.returncode == 2
    assert "ses_nope" in result.stderr and "Traceback" not in result.stderr
    assert world.server.requests == []


def test_sessions_list_and_show(world: CliWorld) -> None:
    world.server.enqueue(
        tool_call_response([("call_1", "write_file", WRITE_ARGS)]), text_response("All done.")
    )
    run = world.run("run", "make hello", input="1\n")
    sid = session_id_of(run.stdout)
    listing = world.run("sessions", "list")
    assert listing.returncode == 0 and sid in listing.stdout
    shown = world.run("sessions", "show", sid)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert text.index("make hello") < text.index("write_file") < text.index("All done.")
    assert "completed" in text
    missing = world.run("sessions", "show", "ses_missing")
    assert missing.returncode == 2 and "ses_missing" in missing.stderr


def test_secret_never_reaches_disk_or_output(world: CliWorld) -> None:
    world.server.enqueue(
        tool_call_response([("call_1", "write_file", WRITE_ARGS)]),
        error_response(401, message="bad key", type_="invalid_request_error"),
    )
    result = world.run("run", "go", input="1\n")
    assert result.returncode == 1
    assert CANARY not in result.stdout + result.stderr
    for path in world.home.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path
    assert list(world.home.glob("*.sqlite")), "the session database was written"


def test_provider_failure_is_one_line_and_non_zero(world: CliWorld) -> None:
    world.server.enqueue(error_response(401, message="Incorrect API key provided"))
    result = world.run("run", "hi")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("soong-agent: error")]
    assert len(errors) == 1 and world.server.base_url in errors[0]
    assert "Traceback" not in result.stderr


def test_orchestrator_without_pools_and_an_unknown_agent_are_refused_with_the_reason(
    world: CliWorld,
) -> None:
    result = world.run("run", "--orchestrator", "hi")
    assert result.returncode == 2
    assert "worker pool" in result.stderr and "agents.worker_pools is empty" in result.stderr
    assert "Traceback" not in result.stderr
    unknown = world.run("run", "--agent", "nope", "hi")
    assert unknown.returncode == 2 and "known agents:" in unknown.stderr
    assert "minimal" in unknown.stderr and world.server.requests == []


def test_an_agent_file_that_was_refused_is_the_error_of_agent_naming_it(
    world: CliWorld,
) -> None:
    """`--agent standard` with the user's own `standard.md` (a shipped preset's id, which a file
    cannot take) stops with the reason instead of quietly running the shipped preset; so does
    `--agent x` whose file is broken, instead of "unknown agent"."""
    agents = world.home / "agents"
    agents.mkdir()
    (agents / "standard.md").write_text(
        "---\nid: standard\ndescription: Mine.\ntools: [read_file]\n---\n", encoding="utf-8"
    )
    (agents / "broken.md").write_text(
        "---\nid: broken\ndescription: Oops.\ntool: [read_file]\n---\n", encoding="utf-8"
    )
    shadow = world.run("run", "--agent", "standard", "hi")
    assert shadow.returncode == 2, shadow.stderr
    assert "standard.md" in shadow.stderr and "shipped preset" in shadow.stderr
    broken = world.run("run", "--agent", "broken", "hi")
    assert broken.returncode == 2, broken.stderr
    assert "broken.md" in broken.stderr and "'tool'" in broken.stderr
    assert world.server.requests == [] and "Traceback" not in shadow.stderr + broken.stderr
    fine = world.run("run", "--agent", "minimal", "hi")  # the other presets still run
    assert "shipped preset" not in fine.stderr


def test_an_agent_preset_chooses_the_tools_and_prompt_and_the_session_keeps_it(
    world: CliWorld,
) -> None:
    agents = world.home / "agents"
    agents.mkdir()
    (agents / "reviewer.md").write_text(
        "---\nid: reviewer\ndescription: Reviews code\ntools: [read_file, grep]\n---\n"
        "You review code and never change it.\n",
        encoding="utf-8",
    )
    world.server.enqueue(text_response("looks fine"), text_response("still fine"))
    first = world.run("run", "--agent", "reviewer", "review main.py")
    assert first.returncode == 0, first.stderr
    request = world.server.requests[0].json
    # exactly its ceiling: `compact` too is offered only when a definition lists it
    assert sorted(t["function"]["name"] for t in request["tools"]) == ["grep", "read_file"]
    assert "You review code and never change it." in request["messages"][0]["content"]
    session = re.search(r"session: (ses_\w+)", first.stdout)
    assert session
    again = world.run("run", "--session-id", session.group(1), "and now?")
    assert again.returncode == 0, again.stderr
    resumed = world.server.requests[1].json
    assert sorted(t["function"]["name"] for t in resumed["tools"]) == ["grep", "read_file"]
    switch = world.run("run", "--session-id", session.group(1), "--agent", "minimal", "x")
    assert switch.returncode == 2 and "switched only while" in switch.stderr


def test_path_pointing_at_a_file_uses_its_folder(world: CliWorld, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "main.py").write_text("print('secret text not for context')\n")
    world.server.enqueue(text_response("ok"))
    result = world.run("run", "--path", str(other / "main.py"), "look")
    assert result.returncode == 0, result.stderr
    system = world.server.requests[0].json["messages"][0]["content"]
    assert str(other.resolve()) in system
    assert "secret text not for context" not in json.dumps(world.server.requests[0].json)


def _signalled_mid_answer(world: CliWorld, signum: int) -> tuple[int, str, str]:
    """A run stopped by `signum` while its answer streams: exit code, stderr, and the
    session's transcript afterwards."""
    world.server.enqueue(text_response("word " * 200, pieces=200).with_delay(0.05))
    proc = subprocess.Popen(
        [str(CLI), "run", "write a lot"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=world.env,
        cwd=world.project,
    )
    deadline = time.monotonic() + 20
    while not world.server.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    os.kill(proc.pid, signum)
    _, stderr = proc.communicate(timeout=30)
    sid = re.search(r"session (ses_\w+)", stderr)
    assert sid, stderr
    return proc.returncode, stderr, world.run("sessions", "show", sid.group(1)).stdout


def test_ctrl_c_cancels_and_leaves_a_consistent_session(world: CliWorld) -> None:
    code, stderr, shown = _signalled_mid_answer(world, signal.SIGINT)
    assert code == 130, stderr
    assert "Traceback" not in stderr
    assert "cancelled" in shown
    assert "word word" in shown


def test_sigterm_cancels_the_run_and_saves_it_as_cancelled(world: CliWorld) -> None:
    code, stderr, shown = _signalled_mid_answer(world, signal.SIGTERM)
    assert code == 143, stderr
    assert "terminated (SIGTERM); the session was saved" in stderr
    assert "cancelled" in shown and "running" not in shown and "word word" in shown


def test_ctrl_c_at_a_permission_question_exits_at_once(world: CliWorld) -> None:
    # stdin stays open (a script's pipe, a terminal nobody types in): the question's pending
    # read must not keep the process alive after the run was cancelled
    world.server.enqueue(tool_call_response([("call_1", "write_file", WRITE_ARGS)]))
    proc = subprocess.Popen(
        [str(CLI), "run", "create hello.txt"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=world.env,
        cwd=world.project,
    )
    assert proc.stderr is not None
    asked = ""
    deadline = time.monotonic() + 20
    while "answer" not in asked and time.monotonic() < deadline:
        asked += proc.stderr.read(1)  # the question is written without a newline
    assert "write_file" in asked, asked
    os.kill(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=10)  # stdin is still open: nothing was answered
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 130
    assert not (world.project / "hello.txt").exists()


def test_branch_from_an_earlier_user_message_and_show_it(world: CliWorld) -> None:
    world.server.enqueue(
        text_response("Paris."), text_response("2 million."), text_response("Lyon is second.")
    )
    first = world.run("run", "capital of France?")
    sid = session_id_of(first.stdout)
    world.run("run", "--session-id", sid, "how many people?")
    shown = world.run("sessions", "show", sid).stdout
    second_user = re.search(r"── user ── (msg_\w+)\nhow many people\?", shown)
    assert second_user, shown
    branched = world.run(
        "run", "--session-id", sid, "--from-message", second_user.group(1), "second city?"
    )
    assert branched.returncode == 0, branched.stderr
    sent = [(m["role"], m.get("content")) for m in world.server.requests[2].json["messages"][1:]]
    assert sent == [
        ("user", "capital of France?"),
        ("assistant", "Paris."),
        ("user", "second city?"),
    ]
    after = world.run("sessions", "show", sid).stdout
    assert "Lyon is second." in after and "another branch starts here" in after
    assert "how many people?" in after  # the old branch is named where it starts
    bad = world.run("run", "--session-id", sid, "--from-message", "msg_nope", "x")
    assert bad.returncode == 2 and "msg_nope" in bad.stderr
