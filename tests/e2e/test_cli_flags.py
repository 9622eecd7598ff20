"""`run` and `chat` flags and chat's commands (CLI-4, RWD-1) through the installed CLI against the
strict loopback server: `--model`, `--permission-mode`, `--max-turns`, `-c/--continue`; chat's
`/model`, `/clear`, `/permissions`, `/undo`, `/rewind` (chat driven by piped stdin)."""

from __future__ import annotations

import json
import re

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e

WARNING = "WARNING: permission mode bypass"


def session_of(output: str) -> str:
    found = re.search(r"session: (ses_\w+)", output)
    assert found, output
    return found.group(1)


def write_call(call_id: str, path: str, content: str) -> tuple[str, str, str]:
    return (call_id, "write_file", json.dumps({"path": path, "content": content}))


def test_help_names_the_message_without_a_type_placeholder(world: CliWorld) -> None:
    shown = world.run("run", "--help")
    assert shown.returncode == 0
    assert "Usage: soong-agent run [OPTIONS] [MESSAGE]" in shown.stdout
    assert re.search(r"^  MESSAGE  What the agent should do", shown.stdout, re.MULTILINE)
    assert "<str>" not in shown.stdout
    for flag in ("--model NAME", "--permission-mode MODE", "--max-turns N", "-c, --continue"):
        assert flag in shown.stdout
    rewind = world.run("sessions", "rewind", "--help")
    assert re.search(r"^  SESSION_ID  The session id", rewind.stdout, re.MULTILINE)
    assert "<str>" not in rewind.stdout


def test_model_flag_sends_that_model_for_this_run_only(world: CliWorld) -> None:
    world.server.enqueue(text_response("a"), text_response("b"))
    first = world.run("run", "--model", "other-model", "hi")
    assert first.returncode == 0, first.stderr
    assert world.server.requests[0].json["model"] == "other-model"
    second = world.run("run", "hi again")
    assert second.returncode == 0, second.stderr
    assert world.server.requests[1].json["model"] == "fake-model"  # the config's, as before
    shown = world.run("sessions", "show", session_of(first.stdout))
    assert "other-model" in shown.stdout


def test_bypass_writes_without_asking_and_warns_once(world: CliWorld) -> None:
    world.server.enqueue(
        tool_call_response([write_call("c1", "a.txt", "A")]), text_response("written")
    )
    result = world.run("run", "--permission-mode", "bypass", "write a.txt")
    assert result.returncode == 0, result.stderr
    assert (world.project / "a.txt").read_text() == "A"  # nobody was asked (stdin is closed)
    assert result.stderr.count(WARNING) == 1
    assert "answer [1/2/3]" not in result.stderr


def test_plan_mode_refuses_a_write_and_a_bad_mode_is_a_usage_error(world: CliWorld) -> None:
    world.server.enqueue(
        tool_call_response([write_call("c1", "a.txt", "A")]), text_response("planned")
    )
    planned = world.run("run", "--permission-mode", "plan", "write a.txt", input="1\n")
    assert planned.returncode == 0, planned.stderr
    assert not (world.project / "a.txt").exists()
    assert WARNING not in planned.stderr
    bad = world.run("run", "--permission-mode", "yolo", "hi")
    assert bad.returncode == 2
    assert "--permission-mode: expected default, accept_edits, plan or bypass" in bad.stderr
    assert "'yolo'" in bad.stderr
    assert len(world.server.requests) == 2  # the bad one sent nothing


def test_max_turns_stops_the_run_after_n_model_turns(world: CliWorld) -> None:
    listing = ("c1", "list_dir", json.dumps({"path": "."}))
    world.server.enqueue(
        tool_call_response([listing]),
        tool_call_response([("c2", "list_dir", json.dumps({"path": "."}))]),
        text_response("never sent"),
    )
    result = world.run("run", "--max-turns", "1", "look around")
    assert result.returncode == 1
    assert "max_turns" in result.stdout + result.stderr
    assert len(world.server.requests) == 1
    zero = world.run("run", "--max-turns", "0", "hi")
    assert zero.returncode == 2 and "--max-turns" in zero.stderr


def test_continue_resumes_the_latest_session_of_this_project(world: CliWorld) -> None:
    none_yet = world.run("run", "-c", "hi")
    assert none_yet.returncode == 2
    assert "--continue: no session of this project" in none_yet.stderr
    other = world.project.parent / "other"
    other.mkdir()
    world.server.enqueue(text_response("one"), text_response("elsewhere"), text_response("two"))
    first = world.run("run", "first here")
    sid = session_of(first.stdout)
    elsewhere = world.run("run", "-p", str(other), "in another project")
    assert session_of(elsewhere.stdout) != sid  # the latest session overall, not this project's
    again = world.run("run", "--continue", "and again")
    assert again.returncode == 0, again.stderr
    assert session_of(again.stdout) == sid
    sent = [m["content"] for m in world.server.requests[-1].json["messages"] if m["role"] == "user"]
    assert sent == ["first here", "and again"]
    both = world.run("run", "-c", "-s", sid, "x")
    assert both.returncode == 2 and "give one" in both.stderr


def chat(world: CliWorld, *lines: str, args: tuple[str, ...] = ()) -> tuple[str, str]:
    result = world.run("chat", *args, input="".join(line + "\n" for line in lines))
    assert result.returncode == 0, result.stderr
    return result.stdout, result.stderr


def test_chat_model_switches_the_model_for_the_following_messages(world: CliWorld) -> None:
    world.server.enqueue(text_response("first"), text_response("second"))
    out, err = chat(world, "hello", "/model big-model", "again", "/model", "/exit")
    assert [r.json["model"] for r in world.server.requests] == ["fake-model", "big-model"]
    assert "the following messages use big-model" in err
    assert "model big-model (openai" in err
    assert len(set(re.findall(r"session: (ses_\w+)", out))) == 1  # the same session goes on


def test_chat_clear_starts_a_new_session(world: CliWorld) -> None:
    world.server.enqueue(text_response("first"), text_response("second"))
    out, err = chat(world, "remember 42", "/clear", "what number?", "/exit")
    assert "the next message starts a new session" in err
    assert len(set(re.findall(r"session: (ses_\w+)", out))) == 2
    second = world.server.requests[1].json["messages"]
    assert not any("42" in str(m.get("content")) for m in second)


def test_chat_permissions_shows_mode_rules_and_this_sessions_grants(world: CliWorld) -> None:
    world.write_config(
        "[model]\n"
        'provider = "openai"\n'
        f'base_url = "{world.server.base_url}"\n'
        'api_key_env = "SOONG_TEST_KEY"\n'
        'name = "fake-model"\n'
        "[permissions]\n"
        'deny = ["run_command(prefix:rm)"]\n'
    )
    world.server.enqueue(
        tool_call_response([write_call("c1", "notes/a.txt", "A")]), text_response("ok")
    )
    _, err = chat(world, "/permissions", "write it", "2", "/permissions", "/exit")
    assert err.count("mode: default") == 2
    assert "deny rules: run_command(prefix:rm)" in err
    assert "allowed for this session: nothing yet" in err  # before the answer
    assert "allowed for this session: write_file on any file in notes/ and below" in err


def test_chat_undo_puts_back_the_last_turn_and_takes_it_back(world: CliWorld) -> None:
    (world.project / "keep.txt").write_text("kept\n")
    world.server.enqueue(
        text_response("hello"),
        tool_call_response([write_call("c1", "keep.txt", "changed"), write_call("c2", "n", "")]),
        text_response("changed it"),
        text_response("fresh"),
    )
    _, err = chat(
        world,
        "hi",
        "change keep.txt",
        "/undo",
        "something else",
        "/exit",
        args=("--permission-mode", "bypass"),
    )
    assert (world.project / "keep.txt").read_text() == "kept\n"
    assert not (world.project / "n").exists()
    assert re.search(r"restored\s+keep\.txt", err) and re.search(r"removed\s+n\b", err)
    last = [m["content"] for m in world.server.requests[-1].json["messages"] if m["role"] == "user"]
    assert last == ["hi", "something else"]  # the undone turn is not in the conversation


def test_chat_rewind_lists_the_turns_and_goes_back_to_the_one_picked(world: CliWorld) -> None:
    world.server.enqueue(
        tool_call_response([write_call("c1", "one.txt", "1")]),
        text_response("one done"),
        tool_call_response([write_call("c2", "two.txt", "2")]),
        text_response("two done"),
    )
    _, err = chat(
        world,
        "make one",
        "make two",
        "/rewind",
        "1",
        "/rewind",
        "",
        "/exit",
        args=("--permission-mode", "bypass"),
    )
    assert re.search(r"1  msg_\w+  'make one'  \(1 file\(s\), 0 command\(s\)\)", err)
    assert re.search(r"2  msg_\w+  'make two'  \(1 file\(s\), 0 command\(s\)\)", err)
    assert not (world.project / "one.txt").exists() and not (world.project / "two.txt").exists()
    assert "nothing to rewind: this session has no turn yet" in err  # the path is empty now


def test_image_flag_attaches_images_to_the_message_of_a_vision_model(world: CliWorld) -> None:
    from tests.support.images import PNG, PNG_B64

    (world.project / "shot.png").write_bytes(PNG)
    world.server.enqueue(text_response("a red dot"))
    seen = world.run("run", "--model", "gpt-4o", "--image", "shot.png", "what is this?")
    assert seen.returncode == 0, seen.stderr
    (last,) = [m for m in world.server.requests[0].json["messages"] if m["role"] == "user"]
    assert last["content"] == [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
        {"type": "text", "text": "what is this?"},
    ]
    text_only = world.run("run", "--image", "shot.png", "what is this?")  # fake-model: no vision
    assert text_only.returncode == 2 and "is not shown images" in text_only.stderr
    missing = world.run("run", "--model", "gpt-4o", "--image", "nope.png", "x")
    assert missing.returncode == 2 and "nope.png: no such file" in missing.stderr
    assert len(world.server.requests) == 1  # neither mistake sent anything
