"""Two things the installed CLI tells its user, against the loopback OpenAI-style server:

- `run --session-id S --from-message M` with M an assistant or a tool message is refused
  (exit 2, one line naming M and saying a branch starts from a user message), nothing sent to
  the model, nothing written (CTX-3);
- approving three calls that one rule would allow prints that rule once, as a hint to put it
  in `permissions.allow` (PERM-5), and `--output json` carries it as an event.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e


def session_id_of(output: str) -> str:
    match = re.search(r"session:? (ses_\w+)", output)
    assert match, output
    return match.group(1)


def message_ids(world: CliWorld, session_id: str) -> list[tuple[str, str]]:
    """(label, id) of each message `sessions show` prints, in order."""
    shown = world.run("sessions", "show", session_id)
    assert shown.returncode == 0, shown.stderr
    return re.findall(r"── ([\w ()]+?) ── (msg_\w+)", shown.stdout)


def test_a_branch_from_an_assistant_or_tool_message_is_refused_naming_it(
    world: CliWorld,
) -> None:
    (world.project / "notes.txt").write_text("alpha\n", encoding="utf-8")
    world.server.enqueue(
        tool_call_response([("c1", "read_file", json.dumps({"path": "notes.txt"}))]),
        text_response("the notes say alpha"),
    )
    first = world.run("run", "what do the notes say?")
    assert first.returncode == 0, first.stderr
    sid = session_id_of(first.stdout + first.stderr)
    ids = message_ids(world, sid)
    assert [label for label, _ in ids] == ["user", "assistant", "tool results", "assistant"]
    sent = len(world.server.requests)
    for role, (_, message_id) in zip(["assistant", "tool"], ids[1:3], strict=True):
        refused = world.run("run", "--session-id", sid, "--from-message", message_id, "go on")
        assert refused.returncode == 2, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1, refused.stderr
        assert message_id in lines[0] and f"{role} message" in lines[0]
        assert "a branch starts from a user message" in lines[0]
        assert "Traceback" not in refused.stderr
    assert len(world.server.requests) == sent  # the model was never asked
    assert message_ids(world, sid) == ids  # nothing was written


def test_three_approvals_of_one_kind_print_the_rule_once(world: CliWorld) -> None:
    writes = [
        tool_call_response(
            [(f"c{n}", "write_file", json.dumps({"path": f"src/{name}.txt", "content": name}))]
        )
        for n, name in enumerate("abcd")
    ]
    world.server.enqueue(*writes, text_response("four files written"))
    done = world.run("run", "write four files", input="1\n1\n1\n1\n")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (world.project / "src").iterdir()) == [
        "a.txt",
        "b.txt",
        "c.txt",
        "d.txt",
    ]
    hint = (
        "  hint: you allowed 3 calls like this; to allow them without asking, add "
        '"write_file(/src/**)" to permissions.allow in config.toml'
    )
    lines = done.stderr.splitlines()
    assert lines.count(hint) == 1, done.stderr
    # printed once the third call is approved, before the fourth call
    third, fourth = [i for i, line in enumerate(lines) if line.startswith("● write_file")][2:4]
    assert third < lines.index(hint) < fourth
    assert "allow" not in (world.home / "config.toml").read_text(encoding="utf-8")  # only said


def test_the_hint_is_an_event_of_the_json_output(world: CliWorld) -> None:
    world.server.enqueue(
        *(
            tool_call_response(
                [(f"c{n}", "write_file", json.dumps({"path": f"src/{n}.txt", "content": "x"}))]
            )
            for n in range(3)
        ),
        text_response("done"),
    )
    done = world.run("run", "-o", "json", "write three files", input="1\n1\n1\n")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    hints = [e for e in events if e.get("type") == "permission_suggestion"]
    assert [(h["tool"], h["rule"], h["approvals"]) for h in hints] == [
        ("write_file", "write_file(/src/**)", 3)
    ]
