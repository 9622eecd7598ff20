"""The installed `soong-agent` CLI, run as a user would, against a loopback OpenAI-style server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.fake_openai import FakeOpenAIServer

CANARY = "sk-canary-7f3e9b1c2d4a-do-not-leak"
CLI = Path(sys.executable).with_name("soong-agent")


@dataclass
class CliWorld:
    """A temp home with config.toml, a project folder, and the server the config points at."""

    server: FakeOpenAIServer
    home: Path
    project: Path
    env: dict[str, str] = field(default_factory=dict)

    def write_config(self, text: str | None = None) -> Path:
        path = self.home / "config.toml"
        path.write_text(
            text
            if text is not None
            else (
                "[model]\n"
                'provider = "openai"\n'
                f'base_url = "{self.server.base_url}"\n'
                'api_key_env = "SOONG_TEST_KEY"\n'
                'name = "fake-model"\n'
                "[model.retry]\n"
                "initial_backoff_ms = 10\n"
            ),
            encoding="utf-8",
        )
        return path

    def run(
        self, *args: str, input: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(CLI), *args],
            input=input,
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.project,
            timeout=timeout,
            check=False,
        )


@pytest.fixture
def world(tmp_path: Path) -> Iterator[CliWorld]:
    home = tmp_path / "home"
    project = tmp_path / "project"
    fake_user_home = tmp_path / "user"
    for d in (home, project, fake_user_home):
        d.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(fake_user_home),
        "LANG": "C.UTF-8",
        "SOONG_AGENT_HOME": str(home),
        "SOONG_TEST_KEY": CANARY,
        "PYTHONIOENCODING": "utf-8",
    }
    with FakeOpenAIServer() as server:
        w = CliWorld(server=server, home=home, project=project, env=env)
        w.write_config()
        yield w
