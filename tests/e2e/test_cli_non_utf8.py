"""`soong-agent run` over a project whose file names are not UTF-8, and a model whose output holds
lone surrogates (issue 39): every run ends with a status and a line, the session shows and
resumes, and a name shown as ``caf\\xe9.txt`` reaches the real file."""

from __future__ import annotations

import json
import os
import re
import sqlite3

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e

NAME = b"caf\xe9.txt"


def session_id_of(output: str) -> str:
    match = re.search(r"session: (ses_\w+)", output)
    assert match, output
    return match.group(1)


def tool_results(world: CliWorld, request: int) -> list[str]:
    messages = world.server.requests[request].json["messages"]
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_list_dir_glob_and_read_file_of_a_non_utf8_name(world: CliWorld) -> None:
    with open(os.path.join(os.fsencode(world.project), NAME), "wb") as f:
        f.write(b"hello from a latin-1 name\n")
    world.server.enqueue(
        tool_call_response([("call_1", "list_dir", "{}")]),
        tool_call_response([("call_2", "glob", json.dumps({"pattern": "**"}))]),
        # the model writes back the name as it was shown: caf\xe9.txt
        tool_call_response([("call_3", "read_file", json.dumps({"path": "caf\\xe9.txt"}))]),
        text_response("read it"),
    )
    result = world.run("run", "read the cafe file")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "read it" in result.stdout
    listed, globbed, read = tool_results(world, 3)
    assert "caf\\xe9.txt (26 bytes)" in listed
    assert "caf\\xe9.txt" in globbed.splitlines()
    assert "hello from a latin-1 name" in read
    # the same names are what the session holds and shows
    session = session_id_of(result.stdout)
    shown = world.run("sessions", "show", session)
    assert shown.returncode == 0, shown.stderr
    assert "caf\\xe9.txt (26 bytes)" in shown.stdout
    assert re.search(r"run run_\w+: completed", shown.stdout)


def test_edit_file_through_the_shown_name_then_resume(world: CliWorld) -> None:
    path = os.path.join(os.fsencode(world.project), NAME)
    with open(path, "wb") as f:
        f.write(b"old text\n")
    edit = {"path": "caf\\xe9.txt", "old_string": "old", "new_string": "new"}
    world.server.enqueue(
        tool_call_response([("call_1", "edit_file", json.dumps(edit))]),
        text_response("edited"),
    )
    first = world.run("run", "edit it", input="1\n")
    assert first.returncode == 0, first.stderr
    with open(path, "rb") as f:
        assert f.read() == b"new text\n"
    assert not (world.project / "caf\\xe9.txt").exists()  # no new file named by the escape
    world.server.enqueue(text_response("resumed"))
    second = world.run("run", "--session-id", session_id_of(first.stdout), "go on")
    assert second.returncode == 0, second.stderr
    assert "resumed" in second.stdout


def test_lone_surrogates_from_the_model_end_the_run_with_a_status(world: CliWorld) -> None:
    answer = text_response("bad SURROGATE text", pieces=1)
    answer.chunks = [c.replace(b"SURROGATE", b"\\udc80 \\ud800") for c in answer.chunks]
    bad_args = '{"path": "a\\ud800"}'  # an escaped lone surrogate in a path
    world.server.enqueue(
        tool_call_response([("call_1", "read_file", bad_args)]),
        answer,
    )
    result = world.run("run", "go")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    # the one text rule (ports/text.py): U+DC80 stands for a byte and is written \x80; any
    # other lone surrogate becomes U+FFFD
    assert "bad \\x80 \ufffd text" in result.stdout
    refused = tool_results(world, 1)[0]
    assert "lone surrogate (U+D800)" in refused and "did not run" in refused
    session = session_id_of(result.stdout)
    db = sqlite3.connect(world.home / "sessions.sqlite")
    query = "SELECT status FROM runs WHERE session_id = ?"
    statuses = [r[0] for r in db.execute(query, (session,))]
    db.close()
    assert statuses == ["completed"]
    world.server.enqueue(text_response("again"))
    resumed = world.run("run", "--session-id", session, "more")
    assert resumed.returncode == 0, resumed.stderr
    sent = world.server.requests[-1].json["messages"]
    assert any(m["role"] == "assistant" and m["content"] == "bad \\x80 \ufffd text" for m in sent)


def test_a_non_utf8_message_argument_is_stored_and_shown(world: CliWorld) -> None:
    world.server.enqueue(text_response("ok"))
    # the shell hands the CLI bytes that are not UTF-8; Python gives them as surrogates
    message = os.fsdecode(b"look at caf\xe9")
    result = world.run("run", message)
    assert result.returncode == 0, result.stderr
    assert world.server.requests[0].json["messages"][-1]["content"] == "look at caf\\xe9"
