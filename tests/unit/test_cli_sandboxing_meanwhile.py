"""`soong-agent run` sets up the OS sandbox (probe, policy) on a thread while the rest of the run
is built; the container then hands out exactly that setup, or raises its error."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from soong_agent.entrypoints import factories
from soong_agent.entrypoints.cli.run_cmd import _set_up_sandboxing_meanwhile
from soong_agent.entrypoints.containers import CliContainer
from soong_agent.entrypoints.sdk import load
from soong_agent.ports.errors import ConfigError


def container_in(tmp_path: Path) -> tuple[CliContainer, object]:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    (home / "config.toml").write_text(
        '[model]\nprovider = "openai"\nname = "m"\napi_key_env = ""\n', encoding="utf-8"
    )
    loaded = load(project, home)
    return CliContainer(loaded=loaded), loaded


def test_the_runner_gets_the_setup_made_on_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    container, loaded = container_in(tmp_path)
    made: list[tuple[str, factories.CommandSandboxing]] = []
    real = factories.command_sandboxing

    def recorded(given: object, closables: object = None) -> factories.CommandSandboxing:
        assert given is loaded and isinstance(closables, list)  # the proxy closes with them
        made.append((threading.current_thread().name, real(loaded, closables)))
        return made[-1][1]

    monkeypatch.setattr(factories, "command_sandboxing", recorded)
    _set_up_sandboxing_meanwhile(container, loaded)
    sandboxing = container.adapters.command_sandboxing()
    assert [name for name, _ in made] == ["soong-sandbox-setup"]  # once, not on this thread
    assert sandboxing is made[0][1] and container.adapters.command_sandboxing() is sandboxing
    assert sandboxing.policy.project == str(loaded.project)  # type: ignore[attr-defined]


def test_an_error_of_the_setup_is_raised_where_it_is_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    container, loaded = container_in(tmp_path)

    def broken(_loaded: object, _closables: object = None) -> factories.CommandSandboxing:
        raise ConfigError("tools.allowed_write_roots: no such folder")

    monkeypatch.setattr(factories, "command_sandboxing", broken)
    _set_up_sandboxing_meanwhile(container, loaded)
    with pytest.raises(ConfigError, match="allowed_write_roots"):
        container.adapters.command_runner()
