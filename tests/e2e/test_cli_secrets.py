"""CFG-6 end to end: a key the runtime holds, or a secret a tool prints, never reaches the
session database, an artifact, the terminal or `sessions show`; the model still gets the tool
result as the tool returned it (the scrubber guards storage and output, not the conversation).

The installed CLI runs against the loopback OpenAI server; the `world` fixture puts the canary
key in SOONG_TEST_KEY, the variable the config names for the model's key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.conftest import CANARY, CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e

AWS_KEY = "AKIAQ3EGUSXW7EXAMPLE"
PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----\n"
NEEDLES = {
    "the model key": CANARY,
    "an AWS key": AWS_KEY,
    "a private key": PEM_BODY,
    "part of the model key": CANARY[:16],
}
MARK = "[redacted:SOONG_TEST_KEY]"


def configure(world: CliWorld) -> None:
    config = world.home / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8")
        + '[permissions]\nmode = "bypass"\n[tools]\nmax_result_chars = 2000\n',
        encoding="utf-8",
    )


def session_id_of(output: str) -> str:
    match = re.search(r"session: (ses_\w+)", output)
    assert match, output
    return match.group(1)


def assert_nothing_leaked(world: CliWorld, *outputs: str) -> None:
    files = [p for p in world.home.rglob("*") if p.is_file()]
    assert any(p.name == "sessions.sqlite" for p in files)
    for what, needle in NEEDLES.items():
        for output in outputs:
            assert needle not in output, f"{what} printed"
        for path in files:  # the database, its WAL, every artifact
            assert needle.encode() not in path.read_bytes(), f"{what} in {path}"


def tool_content(world: CliWorld, request: int) -> str:
    messages = world.server.requests[request].json["messages"]
    return "\n".join(m["content"] for m in messages if m["role"] == "tool")


def test_a_key_read_by_a_tool_is_scrubbed_everywhere_but_the_model_got_it(
    world: CliWorld,
) -> None:
    configure(world)
    secret_file = f"# local settings\nSOONG_TEST_KEY={CANARY}\naws_access_key_id = {AWS_KEY}\n{PEM}"
    (world.project / "settings.txt").write_text(secret_file, encoding="utf-8")
    big = "".join(f"line {i}: nothing to see\n" for i in range(300)) + secret_file
    (world.project / "big.log").write_text(big, encoding="utf-8")
    world.server.enqueue(
        tool_call_response([("c1", "read_file", json.dumps({"path": "settings.txt"}))]),
        tool_call_response([("c2", "run_command", json.dumps({"command": "cat settings.txt"}))]),
        tool_call_response([("c3", "read_file", json.dumps({"path": "big.log"}))]),
        # the model repeats what it read, the key cut across many stream pieces
        text_response(f"The key is {CANARY} and the AWS key {AWS_KEY}.", pieces=12),
    )
    result = world.run("run", "what keys does settings.txt hold?")
    assert result.returncode == 0, result.stderr
    assert MARK in result.stdout and "[redacted:aws_access_key]" in result.stdout
    assert "read_file" in result.stderr and "run_command" in result.stderr

    # the model received each result as the tool returned it: the user approved those calls
    assert CANARY in tool_content(world, 1) and PEM_BODY in tool_content(world, 1)
    assert CANARY in tool_content(world, 2) and AWS_KEY in tool_content(world, 2)
    assert "art_" in tool_content(world, 3)  # the big result was stored as an artifact
    artifacts = list((world.home / "sessions").rglob("big.log*")) or [
        p for p in (world.home / "sessions").rglob("*") if p.is_file()
    ]
    assert artifacts, "the big result was written to disk"
    assert any(MARK.encode() in p.read_bytes() for p in artifacts)

    sid = session_id_of(result.stdout)
    shown = world.run("sessions", "show", sid)
    assert shown.returncode == 0, shown.stderr
    assert MARK in shown.stdout and "[redacted:private_key]" in shown.stdout
    listed = world.run("sessions", "list")
    assert_nothing_leaked(
        world,
        result.stdout,
        result.stderr,
        shown.stdout,
        shown.stderr,
        listed.stdout,
        listed.stderr,
    )


def test_a_resumed_session_sends_the_placeholder_not_the_key(world: CliWorld) -> None:
    configure(world)
    (world.project / "settings.txt").write_text(f"key={CANARY}\n", encoding="utf-8")
    world.server.enqueue(
        tool_call_response([("c1", "read_file", json.dumps({"path": "settings.txt"}))]),
        text_response("Read it."),
        text_response("Still here."),
    )
    first = world.run("run", "read settings.txt")
    assert first.returncode == 0, first.stderr
    second = world.run("run", "--session-id", session_id_of(first.stdout), "and?")
    assert second.returncode == 0, second.stderr
    assert CANARY in tool_content(world, 1)
    resumed = tool_content(world, 2)
    assert CANARY not in resumed and MARK in resumed  # history is read back from the store
    assert_nothing_leaked(world, first.stdout, first.stderr, second.stdout, second.stderr)


def test_the_users_own_message_holding_the_key_is_stored_scrubbed(world: CliWorld) -> None:
    world.server.enqueue(text_response("Noted."))
    result = world.run("run", f"remember {CANARY} for later")
    assert result.returncode == 0, result.stderr
    assert world.server.requests[0].json["messages"][-1]["content"].endswith(f"{CANARY} for later")
    listed = world.run("sessions", "list")
    assert MARK in listed.stdout
    assert_nothing_leaked(world, result.stdout, result.stderr, listed.stdout)


def test_files_are_checked_byte_for_byte(tmp_path: Path) -> None:
    """The leak check itself finds a planted canary (so a pass above means something)."""
    home = tmp_path / "home"
    (home / "sessions").mkdir(parents=True)
    (home / "sessions.sqlite").write_bytes(b"x" + CANARY.encode() + b"y")
    world = CliWorld(server=None, home=home, project=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(AssertionError):
        assert_nothing_leaked(world)
