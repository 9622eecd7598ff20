"""The CLI on a terminal (issue 18 items 2 and 3), under a real pseudo-terminal: Markdown is
rendered, a spinner shows while the model has not answered, and `chat` keeps a session across
messages, cancels a running answer on Ctrl-C and stays open, and leaves on /exit."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from tests.e2e.conftest import CLI, CliWorld
from tests.support.fake_openai import text_response

pytestmark = pytest.mark.e2e

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\r")


# the CLI starts in a session of its own whose controlling terminal is the pty (its stdin), so
# that Ctrl-C typed there is a SIGINT to it, as for a user; exec'd, so no code runs after fork
LEADER = (
    "import fcntl, os, sys, termios; os.setsid(); fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


class Terminal:
    """A CLI process on a pseudo-terminal; everything it wrote, raw."""

    def __init__(self, world: CliWorld, *args: str) -> None:
        self.master, slave = pty.openpty()
        env = {**world.env, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "40"}
        self.process = subprocess.Popen(
            [sys.executable, "-c", LEADER, str(CLI), *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=world.project,
        )
        os.close(slave)
        self.raw = b""

    def read_until(self, pattern: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.text):
                return self.text
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                self.raw += chunk
        if re.search(pattern, self.text):
            return self.text
        raise AssertionError(f"{pattern!r} never appeared in:\n{self.text[-3000:]}")

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw.decode("utf-8", "replace"))

    def send(self, data: str) -> None:
        os.write(self.master, data.encode())

    def close(self) -> int:
        try:
            return self.process.wait(timeout=20)
        finally:
            os.close(self.master)


def test_run_on_a_terminal_renders_markdown_with_a_spinner_first(world: CliWorld) -> None:
    slow = text_response("Use **bold** words and `code`.\n\n- one\n- two", pieces=4)
    world.server.enqueue(slow.with_delay(0.8))
    term = Terminal(world, "run", "explain")
    out = term.read_until(r"session: ses_\w+")
    assert term.close() == 0
    assert "thinking…" in out  # the spinner, while the answer had not started
    assert "bold" in out and "**bold**" not in out  # rendered, not Markdown source
    assert "`code`" not in out
    assert "• one" in out or "- one" not in out  # a rendered list
    assert "[completed:" in out


def test_chat_keeps_the_session_cancels_on_ctrl_c_and_leaves_on_exit(world: CliWorld) -> None:
    world.server.enqueue(
        text_response("First answer."),
        text_response("word " * 200, pieces=200).with_delay(0.05),  # about 10 s: cancelled
        text_response("Third answer."),
    )
    term = Terminal(world, "chat")
    term.read_until("›")
    term.send("hello\n")
    term.read_until("First answer.")
    term.read_until(r"session: ses_\w+")
    term.send("a long one\n")
    term.read_until("word word word")
    term.send("\x03")  # Ctrl-C: cancels the answer, not the chat
    term.read_until(r"cancelled")
    term.send("/cost\n")
    term.read_until(r"run\(s\)")
    term.send("and now?\n")
    out = term.read_until("Third answer.")
    term.send("/exit\n")
    assert term.close() == 0
    sessions = set(re.findall(r"session: (ses_\w+)", out))
    assert len(sessions) == 1, out  # every message went to the same session
    third = world.server.requests[2].json["messages"]
    assert [m["role"] for m in third if m["role"] == "user"][0:1] == ["user"]
    assert any("hello" in str(m.get("content")) for m in third)  # the history was kept


def test_run_without_a_message_opens_the_chat_on_a_terminal_only(world: CliWorld) -> None:
    world.server.enqueue(text_response("Hi there."))
    term = Terminal(world, "run")
    term.read_until("›")
    term.send("hello\n")
    term.read_until("Hi there.")
    term.read_until(r"›[^›]*›")  # the prompt is back before Ctrl-D is typed, as for a person
    term.send("\x04")  # Ctrl-D leaves
    assert term.close() == 0
    piped = world.run("run")
    assert piped.returncode == 2 and "missing MESSAGE" in piped.stderr
