"""`soong-agent run` against aimock, a third-party mock server, for every provider.

One scenario (a short text plus a `write_file` call, then a final answer after the tool result)
runs through the installed CLI three times; only `[model]` in `config.toml` changes. aimock serves
all three wire formats from the same fixtures (see tests/support/aimock.py).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import CLI
from tests.support.aimock import AimockServer, aimock_server

pytestmark = pytest.mark.e2e

PROMPT = "create hello.txt"
FIRST_TEXT = "I will create hello.txt now."
FINAL_TEXT = "Done: hello.txt now says hi."
KEY_VAR = "SOONG_AIMOCK_KEY"

FIXTURES: list[dict[str, Any]] = [
    {
        "match": {"userMessage": PROMPT, "toolName": "write_file", "hasToolResult": False},
        "response": {
            "content": FIRST_TEXT,
            "toolCalls": [
                {
                    "id": "call_hello",
                    "name": "write_file",
                    "arguments": {"path": "hello.txt", "content": "hi"},
                }
            ],
        },
    },
    {
        "match": {"userMessage": PROMPT, "hasToolResult": True},
        "response": {"content": FINAL_TEXT},
    },
]


@dataclass(frozen=True)
class Provider:
    name: str
    model: str
    path: str  # appended to aimock's origin to make base_url
    route: str  # the route the provider's requests must arrive on


PROVIDERS = [
    Provider("openai", "gpt-4o-mini", "/v1", "/v1/chat/completions"),
    Provider("anthropic", "claude-sonnet-4-5", "", "/v1/messages"),
    Provider("ollama", "llama3.2", "", "/api/chat"),
]


def config_toml(provider: Provider, origin: str) -> str:
    """The same config for every provider except the values in `[model]`."""
    return (
        "[model]\n"
        f'provider = "{provider.name}"\n'
        f'base_url = "{origin}{provider.path}"\n'
        f'name = "{provider.model}"\n'
        f'api_key_env = "{KEY_VAR}"\n'
        "\n"
        "[model.retry]\n"
        "max_attempts = 1\n"
    )


@pytest.fixture
def start_aimock(tmp_path: Path) -> Iterator[Callable[[list[dict[str, Any]]], AimockServer]]:
    """Starts aimock inside the test body, so a missing install fails the test itself."""
    with ExitStack() as stack:

        def start(fixtures: list[dict[str, Any]]) -> AimockServer:
            return stack.enter_context(aimock_server(fixtures, tmp_path / "aimock"))

        yield start


@pytest.mark.parametrize("provider", PROVIDERS, ids=[p.name for p in PROVIDERS])
def test_text_tool_call_then_answer(
    provider: Provider,
    start_aimock: Callable[[list[dict[str, Any]]], AimockServer],
    tmp_path: Path,
) -> None:
    server = start_aimock(FIXTURES)
    home, project, user = tmp_path / "home", tmp_path / "project", tmp_path / "user"
    for folder in (home, project, user):
        folder.mkdir()
    (home / "config.toml").write_text(config_toml(provider, server.base_url), encoding="utf-8")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(user),
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "SOONG_AGENT_HOME": str(home),
        KEY_VAR: "dummy-key-for-aimock",
    }

    result = subprocess.run(
        [str(CLI), "run", PROMPT],
        input="1\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=project,
        timeout=60,
        check=False,
    )

    context = f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}\n{server.describe()}"
    assert result.returncode == 0, context
    assert (project / "hello.txt").read_text(encoding="utf-8") == "hi", context
    assert FIRST_TEXT in result.stdout, context
    assert FINAL_TEXT in result.stdout, context
    assert result.stdout.index(FIRST_TEXT) < result.stdout.index(FINAL_TEXT), context
    assert "write_file" in result.stderr, context

    journal = server.journal()
    assert [entry["path"] for entry in journal] == [provider.route] * 2, context
    assert [entry["response"]["status"] for entry in journal] == [200, 200], context
    matched = [entry["response"]["fixture"]["match"]["hasToolResult"] for entry in journal]
    assert matched == [False, True], context
    second = journal[1]["body"]
    assert second["model"] == provider.model, context
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1, context
    assert "hello.txt" in str(tool_messages[0]["content"]), context
