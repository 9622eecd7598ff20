"""`soong-agent run` against the strict fake OpenAI server: it must send what strict servers take.

llama.cpp (llama-cpp-python's server) answers an assistant message with `"content": null` beside
`tool_calls` with HTTP 500, and a session holding such a message could never be continued.
These runs make tool calls without text, continue and resume the session, and check that the
strict server refused nothing along the way.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import error_response, text_response, tool_call_response

pytestmark = pytest.mark.e2e

LIST_ARGS = json.dumps({"path": "."})
READ_ARGS = json.dumps({"path": "notes.txt"})


def session_id_of(output: str) -> str:
    match = re.search(r"session: (ses_\w+)", output)
    assert match, output
    return match.group(1)


def messages_of(world: CliWorld, index: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = world.server.requests[index].json["messages"]
    return messages


def assert_nothing_refused(world: CliWorld) -> None:
    assert [str(r) for r in world.server.rejections] == []


def assistant_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]


@pytest.fixture
def project_files(world: CliWorld) -> CliWorld:
    (world.project / "notes.txt").write_text("buy milk\n", encoding="utf-8")
    (world.project / "src").mkdir()
    return world


def test_tool_call_without_text_then_a_second_turn_then_a_resume(project_files: CliWorld) -> None:
    world = project_files
    world.server.enqueue(
        tool_call_response([("call_list", "list_dir", LIST_ARGS)]),  # no text at all
        text_response("There is notes.txt and a src folder."),
    )
    first = world.run("run", "what is in this folder?")
    assert first.returncode == 0, first.stderr
    assert "There is notes.txt and a src folder." in first.stdout
    sid = session_id_of(first.stdout)
    # the tool ran and its listing went back to the model, after the text-less call
    sent = messages_of(world, 1)
    [call_message] = assistant_calls(sent)
    assert call_message["content"] == ""
    assert call_message["tool_calls"][0]["function"]["name"] == "list_dir"
    tool_message = sent[sent.index(call_message) + 1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_list"
    assert "notes.txt" in tool_message["content"]

    world.server.enqueue(text_response("It says: buy milk."))
    second = world.run("run", "--session-id", sid, "and what does notes.txt say?")
    assert second.returncode == 0, second.stderr
    assert "It says: buy milk." in second.stdout
    assert session_id_of(second.stdout) == sid

    world.server.enqueue(
        tool_call_response([("call_read", "read_file", READ_ARGS)]),  # again without text
        text_response("Still: buy milk."),
    )
    third = world.run("run", "--session-id", sid, "read it again to be sure")
    assert third.returncode == 0, third.stderr
    assert "Still: buy milk." in third.stdout
    # the last request carries both text-less tool rounds of the session, each answered
    last = messages_of(world, len(world.server.requests) - 1)
    assert [c["tool_calls"][0]["id"] for c in assistant_calls(last)] == ["call_list", "call_read"]
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == ["call_list", "call_read"]
    assert "buy milk" in last[-1]["content"]

    assert len(world.server.requests) == 5
    assert_nothing_refused(world)


def test_a_session_ending_in_a_tool_call_without_text_can_be_resumed(
    project_files: CliWorld,
) -> None:
    world = project_files
    world.server.enqueue(
        tool_call_response([("call_a", "list_dir", LIST_ARGS), ("call_b", "read_file", READ_ARGS)]),
        text_response("Listed and read."),
    )
    first = world.run("run", "look around")
    assert first.returncode == 0, first.stderr
    sid = session_id_of(first.stdout)
    shown = world.run("sessions", "show", sid)
    assert shown.returncode == 0, shown.stderr
    assert "list_dir" in shown.stdout and "read_file" in shown.stdout

    world.server.enqueue(text_response("Yes, notes.txt is the only file."))
    resumed = world.run("run", "--session-id", sid, "is that the only file?")
    assert resumed.returncode == 0, resumed.stderr
    assert "Yes, notes.txt is the only file." in resumed.stdout
    # the stored text-less call went back as a string content, with both of its answers
    sent = messages_of(world, 2)
    [call_message] = assistant_calls(sent)
    assert call_message["content"] == ""
    assert [c["id"] for c in call_message["tool_calls"]] == ["call_a", "call_b"]
    assert sent[-1] == {"role": "user", "content": "is that the only file?"}
    assert_nothing_refused(world)


def test_a_run_that_failed_after_its_tool_call_can_be_resumed(project_files: CliWorld) -> None:
    world = project_files
    world.server.enqueue(
        tool_call_response([("call_list", "list_dir", LIST_ARGS)]),
        error_response(401, message="Incorrect API key provided"),  # ends the run after the tool
    )
    first = world.run("run", "what is here?")
    assert first.returncode == 1
    assert "Incorrect API key provided" in first.stderr
    sid = re.search(r"(ses_\w+)", first.stdout + first.stderr)
    assert sid, first.stdout + first.stderr

    world.server.enqueue(text_response("notes.txt and src."))
    resumed = world.run("run", "--session-id", sid.group(1), "try again")
    assert resumed.returncode == 0, resumed.stderr
    assert "notes.txt and src." in resumed.stdout
    sent = messages_of(world, 2)
    [call_message] = assistant_calls(sent)
    assert call_message["content"] == ""
    assert sent[-1] == {"role": "user", "content": "try again"}
    assert_nothing_refused(world)


def test_a_tool_choice_for_the_first_request_passes(project_files: CliWorld) -> None:
    world = project_files
    world.server.enqueue(
        tool_call_response([("call_list", "list_dir", LIST_ARGS)]),
        text_response("Listed."),
    )
    result = world.run("run", "--tool-choice", "list_dir", "list the folder")
    assert result.returncode == 0, result.stderr
    assert "Listed." in result.stdout
    named = {"type": "function", "function": {"name": "list_dir"}}
    first, second = (r.json for r in world.server.requests)
    assert first.get("tool_choice", named) == named  # when sent, it names the tool
    assert "tool_choice" not in second  # only the first request of the run forces it
    assert_nothing_refused(world)


# --- what strict mode once exposed: broken calls are sent back in a shape servers accept ---


def test_a_tool_call_with_arguments_that_are_not_json_does_not_break_the_session(
    project_files: CliWorld,
) -> None:
    world = project_files
    world.server.enqueue(
        tool_call_response([("call_cut", "list_dir", '{"path": ')]),  # cut short by the model
        text_response("Let me list it properly."),
    )
    result = world.run("run", "list the folder")
    refused = [str(r) for r in world.server.rejections]
    assert result.returncode == 0, result.stderr
    assert "Let me list it properly." in result.stdout
    assert refused == []


def test_a_tool_call_without_a_name_does_not_break_the_session(project_files: CliWorld) -> None:
    world = project_files
    world.server.enqueue(
        tool_call_response([("call_anon", "", "{}")]),
        text_response("Sorry, let me name the tool."),
    )
    result = world.run("run", "list the folder")
    refused = [str(r) for r in world.server.rejections]
    assert result.returncode == 0, result.stderr
    assert "Sorry, let me name the tool." in result.stdout
    assert refused == []
