"""The installed `soong-agent` CLI against a real model server: llama-cpp-python's OpenAI-compatible
server running SmolLM2-135M-Instruct on 127.0.0.1 (see `tests/support/llama_server.py`).

Fakes answer what we script; a real server also judges what we send. These tests guard against
the `"content": null` defect (an assistant message with tool calls and no text, which llama.cpp
refuses with HTTP 500) that the lenient fakes accepted. One server is started for the whole
module; the model is tiny and `max_output_tokens` small, so answers are quick and their wording is
never asserted, only the run's shape (exit codes, the session line, the stored transcript, the
usage summary).

The model never calls a tool on its own, so the tool-call case forces one with
`--tool-choice list_dir` (a tool choice naming the function is the only kind llama.cpp enforces,
through a grammar; `"required"` is not enforced).

Only the OpenAI Chat Completions adapter is covered here: llama.cpp speaks only the OpenAI
protocol, so the Ollama-style (`/api/chat`) and Anthropic-style (`/v1/messages`) adapters cannot
be tested against this server (the aimock tests cover their wire formats).

The tests skip only when the llama-cpp-python wheel is missing (set `SOONG_LLAMA_WHEEL`); a venv
that cannot be built or a server that does not start is an error.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import CLI
from tests.support.llama_server import (
    DEFAULT_N_CTX,
    LlamaServer,
    find_wheel,
    llama_server,
    prepare_venv,
    wheel_search_locations,
)

pytestmark = [pytest.mark.e2e, pytest.mark.real_server]

N_CTX = DEFAULT_N_CTX
TIMEOUT_S = 120
SESSION_LINE = re.compile(r"^session: (ses_\w+)$")


@pytest.fixture(scope="module")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    wheel = find_wheel()
    if wheel is None:
        pytest.skip(
            f"llama-cpp-python wheel not found at {' or '.join(wheel_search_locations())}; "
            "set SOONG_LLAMA_WHEEL"
        )
    venv = prepare_venv(wheel)  # LlamaSetupError (pip failed) is an error, not a skip
    with llama_server(venv, tmp_path_factory.mktemp("llama-logs"), n_ctx=N_CTX) as server:
        yield server


@dataclass
class RealWorld:
    """A temp home whose config.toml points at the real server, and a small project folder."""

    server: LlamaServer
    home: Path
    project: Path
    env: dict[str, str]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(CLI), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.project,
            timeout=TIMEOUT_S,
            check=False,
        )
        if self.server.process.poll() is not None:
            pytest.fail(
                f"the llama.cpp server died during `soong-agent {' '.join(args)}`; "
                f"stderr tail:\n{self.server.stderr_tail()}"
            )
        return result


@pytest.fixture(scope="module")
def world(real_server: LlamaServer, tmp_path_factory: pytest.TempPathFactory) -> RealWorld:
    root = tmp_path_factory.mktemp("real-server")
    home, project, user = root / "home", root / "project", root / "user"
    for folder in (home, project, user):
        folder.mkdir()
    (project / "README.md").write_text("# Demo\n\nA tiny project.\n", encoding="utf-8")
    (project / "main.py").write_text("print('hello')\n", encoding="utf-8")
    (home / "config.toml").write_text(
        "[runtime]\n"
        "max_turns = 6\n"
        "max_continuations = 0\n"
        "[model]\n"
        'provider = "openai"\n'
        f'base_url = "{real_server.base_url}"\n'
        'api_key_env = ""\n'
        'name = "smollm2"\n'
        f"context_window = {N_CTX}\n"
        "max_output_tokens = 64\n"
        "temperature = 0.0\n"
        "timeout_ms = 90000\n"
        "[model.retry]\n"
        "max_attempts = 1\n",
        encoding="utf-8",
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(user),
        "LANG": "C.UTF-8",
        "SOONG_AGENT_HOME": str(home),
        "PYTHONIOENCODING": "utf-8",
    }
    return RealWorld(server=real_server, home=home, project=project, env=env)


def describe(result: subprocess.CompletedProcess[str], server: LlamaServer) -> str:
    return (
        f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}\n"
        f"server stderr tail:\n{server.stderr_tail()[-1500:]}"
    )


def session_id_of(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stdout.rstrip("\n").splitlines()
    match = SESSION_LINE.match(lines[-1]) if lines else None
    assert match, f"stdout does not end with a `session: ses_…` line:\n{result.stdout}"
    return match.group(1)


def completed_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("[completed:")]
    assert lines, f"no `[completed: …]` line on stderr:\n{stderr}"
    return lines[-1]


@dataclass
class Conversation:
    """A forced tool call, then (when it printed a session id) a second turn and one more resume
    of the same session."""

    first: subprocess.CompletedProcess[str]
    session_id: str | None
    later: list[subprocess.CompletedProcess[str]]

    def require_session(self, server: LlamaServer) -> str:
        assert self.session_id, describe(self.first, server)
        return self.session_id


FIRST_MESSAGE = "List the files in this project folder."
SECOND_MESSAGE = "Which of those files is the Python script?"
THIRD_MESSAGE = "Thanks. Say goodbye in five words."


@pytest.fixture(scope="module")
def plain(world: RealWorld) -> subprocess.CompletedProcess[str]:
    return world.run("run", "Say hello in one short sentence.")


@pytest.fixture(scope="module")
def conversation(world: RealWorld) -> Conversation:
    first = world.run("run", "--tool-choice", "list_dir", FIRST_MESSAGE)
    match = re.search(r"^session: (ses_\w+)$", first.stdout, re.MULTILINE)
    sid = match.group(1) if first.returncode == 0 and match else None
    later = (
        [world.run("run", "--session-id", sid, text) for text in (SECOND_MESSAGE, THIRD_MESSAGE)]
        if sid
        else []
    )
    return Conversation(first=first, session_id=sid, later=later)


def test_plain_answer_streams_and_ends_with_the_session_line(
    world: RealWorld, plain: subprocess.CompletedProcess[str]
) -> None:
    assert plain.returncode == 0, describe(plain, world.server)
    answer = plain.stdout.rstrip("\n").splitlines()[:-1]
    assert "".join(answer).strip(), f"no streamed answer before the session line:\n{plain.stdout}"
    session_id_of(plain)
    assert "Traceback" not in plain.stderr


def test_forced_tool_call_then_second_turn_and_resume(
    world: RealWorld, conversation: Conversation
) -> None:
    # The tool-call turn's assistant message has no text. The request after the tool result
    # (same run) and every resume re-send it, and llama.cpp answers HTTP 500 when its content
    # is null.
    first = conversation.first
    assert first.returncode == 0, describe(first, world.server)
    sid = conversation.require_session(world.server)
    assert "list_dir" in first.stderr, describe(first, world.server)
    calls = re.search(r"\[completed: (\d+) model call", first.stderr)
    assert calls and int(calls.group(1)) >= 2, describe(first, world.server)
    assert len(conversation.later) == 2
    for result in conversation.later:
        assert result.returncode == 0, describe(result, world.server)
        assert session_id_of(result) == sid
        assert "Traceback" not in result.stderr


def test_sessions_show_prints_both_turns(world: RealWorld, conversation: Conversation) -> None:
    shown = world.run("sessions", "show", conversation.require_session(world.server))
    assert shown.returncode == 0, describe(shown, world.server)
    text = shown.stdout
    assert FIRST_MESSAGE in text and SECOND_MESSAGE in text, text
    assert text.index(FIRST_MESSAGE) < text.index("list_dir") < text.index(SECOND_MESSAGE)


def test_usage_is_marked_estimated_without_a_usage_chunk(
    world: RealWorld, plain: subprocess.CompletedProcess[str], conversation: Conversation
) -> None:
    # llama.cpp sends no usage chunk, even with stream_options.include_usage.
    for result in (plain, conversation.first, *conversation.later):
        assert result.returncode == 0, describe(result, world.server)
        assert "estimated" in completed_line(result.stderr), result.stderr
