"""`soong-agent --version` answers before the CLI is imported (issue 32: a fast first
answer), with the installed distribution's version, and the same as the CLI's own option."""

from __future__ import annotations

import os
import subprocess
from importlib.metadata import version

import pytest

import soong_agent
from tests.e2e.conftest import CLI

pytestmark = pytest.mark.e2e


def run(*args: str, importtime: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"PYTHONPROFILEIMPORTTIME": "1"} if importtime else {})}
    return subprocess.run(
        [str(CLI), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_the_version_is_the_installed_one_and_needs_no_cli_import() -> None:
    assert soong_agent.__version__ == version("soong-agent")
    quick = run("--version", importtime=True)
    assert quick.returncode == 0
    assert quick.stdout == f"soong-agent {soong_agent.__version__}\n"
    imported = {line.split("|")[-1].strip() for line in quick.stderr.splitlines()}
    assert "soong_agent" in imported
    assert not {"typer", "pydantic", "soong_agent.entrypoints.cli.main"} & imported
    assert run("-V").stdout == quick.stdout
    # with other arguments typer's own --version answers the same
    assert run("--version", "run").stdout == quick.stdout
