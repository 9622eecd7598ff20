"""Builds an `AgentRuntime` for a benchmark the way an SDK user would: a home with a config
file, a project folder, the caller's model and Python tools."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from soong_agent import AgentRuntime
from soong_agent.ports.model import ModelProvider
from soong_agent.ports.storage import SessionStore

CONFIG = """\
[model]
provider = "openai"
name = "bench"
api_key_env = ""
{model_extra}
{extra}
"""


def bench_runtime(
    folder: Path,
    *,
    model: ModelProvider,
    tools: Sequence[Any],
    session_store: SessionStore | None = None,
    model_extra: str = "",
    extra: str = "",
) -> AgentRuntime:
    """A runtime whose home and project are folders under `folder`."""
    home, project = folder / "home", folder / "project"
    home.mkdir(parents=True, exist_ok=True)
    project.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        CONFIG.format(model_extra=model_extra, extra=extra), encoding="utf-8"
    )
    return AgentRuntime(
        project_dir=project, home=home, model=model, session_store=session_store, tools=tools
    )
