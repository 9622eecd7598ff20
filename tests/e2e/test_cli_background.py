"""BG-1 end to end: the installed CLI runs a command in the background, the model reads its output
in a later turn, and no background process is left once the CLI has exited, however it exits
(the run's end, Ctrl-C, SIGKILL), with the OS sandbox and without.

Whether a process is left is read from /proc: each test's `sleep` has an argument no other
process has (`marker`). A killed process may take a moment to leave, so its absence is waited
for, up to a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import CANARY, CLI, CliWorld
from tests.support.fake_openai import (
    FakeOpenAIServer,
    RecordedRequest,
    ScriptedResponse,
    text_response,
    tool_call_response,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc"),
]

MARK = "[redacted:SOONG_TEST_KEY]"


def marker() -> str:
    return f"1000.{uuid.uuid4().int % 10**12:012d}"


def holding(mark: str) -> list[int]:
    """The pids of the ``sleep <mark>`` processes (a zombie has no command line)."""
    wanted = b"sleep\0" + mark.encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as file:
                    if file.read() == wanted:
                        found.append(int(entry))
            except OSError:
                continue
    return found


def wait_for(check: Callable[[], bool], deadline_s: float = 20.0) -> bool:
    end = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def configure(world: CliWorld, sandbox: str) -> None:
    config = world.home / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8")
        + f'[permissions]\nmode = "bypass"\n[sandbox]\nos = "{sandbox}"\n',
        encoding="utf-8",
    )


def call(call_id: str, name: str, **args: Any) -> ScriptedResponse:
    return tool_call_response([(call_id, name, json.dumps(args))])


def tool_messages(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.json["messages"] if m["role"] == "tool"]


SANDBOXES = ["auto", "off"]


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_background_output_is_read_in_a_later_turn_and_nothing_is_left_after_exit(
    world: CliWorld, sandbox: str
) -> None:
    configure(world, sandbox)
    mark = marker()
    (world.project / "settings.txt").write_text(f"key={CANARY}\n", encoding="utf-8")
    world.server.enqueue(
        call(
            "c1",
            "run_command",
            command=f"echo ready; cat settings.txt; touch printed; sleep {mark}",
            background=True,
        ),
        # the command line waits (not the test) until the background command has written
        call("c2", "run_command", command="while [ ! -e printed ]; do sleep 0.02; done"),
        call("c3", "command_output", id="bg-1"),
        text_response("done"),
    )
    result = world.run("run", "start it and tell me what it printed")
    assert result.returncode == 0, result.stderr
    started = tool_messages(world.server.requests[1])[-1]
    assert started.startswith("started in the background as bg-1"), started
    assert ("[unsandboxed" in started) == (sandbox == "off")
    output = tool_messages(world.server.requests[3])[-1]
    assert output.startswith("bg-1 is running: echo ready; cat settings.txt"), output
    assert f"--- stdout ---\nready\nkey={CANARY}" in output  # the model gets what it printed
    assert wait_for(lambda: not holding(mark)), f"left running: {holding(mark)}"
    # what is stored and shown is scrubbed like any output (CFG-6)
    assert CANARY not in result.stdout + result.stderr
    for path in world.home.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path
    shown = world.run("sessions", "list")
    assert CANARY not in shown.stdout


def test_in_chat_a_background_command_goes_on_between_messages_and_ends_with_the_chat(
    world: CliWorld,
) -> None:
    configure(world, "auto")
    mark = marker()
    world.server.enqueue(
        call(
            "c1",
            "run_command",
            command=f"echo ready; touch printed; sleep {mark}",
            background=True,
        ),
        text_response("started"),
        # the next message of the chat, a later run of the session
        call("c2", "run_command", command="while [ ! -e printed ]; do sleep 0.02; done"),
        call("c3", "command_output", id="bg-1"),
        text_response("it printed ready"),
    )
    result = world.run("chat", input="start the server\nwhat did it print?\n/exit\n", timeout=120)
    assert result.returncode == 0, result.stderr
    later = world.server.requests[4]
    users = [m["content"] for m in later.json["messages"] if m["role"] == "user"]
    assert users == ["start the server", "what did it print?"]  # one session, two messages
    output = tool_messages(later)[-1]
    assert output.startswith("bg-1 is running: echo ready"), output
    assert "--- stdout ---\nready" in output
    assert wait_for(lambda: not holding(mark)), f"left running: {holding(mark)}"


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("ending", ["ctrl-c", "sigkill"])
def test_no_background_process_outlives_the_cli(world: CliWorld, sandbox: str, ending: str) -> None:
    configure(world, sandbox)
    mark = marker()
    world.server.enqueue(
        call("c1", "run_command", command=f"sleep {mark}", background=True),
        # a slow answer: the CLI is still running when the test ends it
        text_response("x" * 40, pieces=40).with_delay(0.5),
    )
    cli = subprocess.Popen(
        [str(CLI), "run", "start it"],
        cwd=world.project,
        env=world.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: len(world.server.requests) == 2 and len(holding(mark)) == 1)
        if ending == "sigkill":  # nothing is closed: the lifeline (or bwrap) ends it
            cli.send_signal(signal.SIGKILL)
        else:  # the run is cancelled and the runtime closed
            cli.send_signal(signal.SIGINT)
        cli.wait(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert wait_for(lambda: not holding(mark)), f"left running: {holding(mark)}"


class RespondingServer(FakeOpenAIServer):
    """Answers the requests after the scripted ones with `respond(request body)`."""

    def __init__(self, respond: Callable[[Any], ScriptedResponse]) -> None:
        super().__init__()
        self._respond = respond
        self._current = threading.local()

    def _record(self, request: RecordedRequest) -> int:
        self._current.body = request.json if request.body else None
        return super()._record(request)

    def _next(self) -> ScriptedResponse | None:
        return super()._next() or self._respond(self._current.body)


def notices_in(body: Any) -> list[str]:
    return [
        m["content"]
        for m in body["messages"]
        if m["role"] == "user" and str(m["content"]).startswith("[background command")
    ]


def test_the_next_request_after_an_exit_carries_a_notice(world: CliWorld) -> None:
    configure(world, "auto")

    def respond(body: Any) -> ScriptedResponse:
        if notices_in(body):
            return text_response("it ended")
        # not ended yet, or not seen yet: the model waits a moment, in a command (each one
        # different: the same call again and again would be stopped as stuck)
        turn = len(body["messages"])
        return call(f"w{turn}", "run_command", command=f"sleep 0.1; echo {turn}")

    with RespondingServer(respond) as server:
        world.server = server
        world.write_config()
        configure(world, "auto")
        server.enqueue(
            call(
                "c1",
                "run_command",
                command="echo ready; touch printed; while [ ! -e go ]; do sleep 0.02; done; "
                "echo bye; exit 3",
                background=True,
            ),
            call("c2", "run_command", command="while [ ! -e printed ]; do sleep 0.02; done"),
            call("c3", "command_output", id="bg-1"),
            call("c4", "run_command", command="touch go"),
        )
        result = world.run("run", "run it, read it, let it end")
        assert result.returncode == 0, result.stderr
        requests = server.requests
        assert "ready" in tool_messages(requests[3])[-1]
        last = requests[-1].json
        (notice,) = notices_in(last)
        assert notice.startswith("[background command bg-1 ended (exit code 3): echo ready")
        assert "ready\nbye" in notice
        assert [len(notices_in(r.json)) for r in requests[:4]] == [0, 0, 0, 0]
