"""Chat's /undo on a real pseudo-terminal (RWD-1): the turn's file change is put back, and the
undone message comes back in the prompt line, to send again with Enter (or change)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import CliWorld
from tests.e2e.test_cli_terminal import Terminal
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e


def test_undo_puts_the_file_back_and_the_message_in_the_prompt_line(world: CliWorld) -> None:
    write = json.dumps({"path": "one.txt", "content": "1"})
    world.server.enqueue(
        tool_call_response([("c1", "write_file", write)]),
        text_response("made it"),
        text_response("made it again"),
    )
    term = Terminal(world, "chat", "--permission-mode", "bypass")
    term.read_until("›")
    term.send("make one.txt\n")
    term.read_until(r"session: ses_\w+")
    assert (world.project / "one.txt").exists()
    term.send("/undo\n")
    term.read_until(r"removed\s+one\.txt")
    term.read_until(r"› make one\.txt")  # the undone message, ready to send again
    assert not (world.project / "one.txt").exists()
    term.send("\r")
    term.read_until("made it again")
    term.send("/exit\n")
    assert term.close() == 0
    users = [m for m in world.server.requests[-1].json["messages"] if m["role"] == "user"]
    assert [m["content"] for m in users] == ["make one.txt"]  # sent again, once, from there
