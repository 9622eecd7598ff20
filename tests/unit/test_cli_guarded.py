"""Every CLI command body runs under `guarded`: an expected error is one line and its exit code,
and so is a bug of ours (exit 1, `internal error: …`), never a traceback unless asked for."""

from __future__ import annotations

import pytest

from soong_agent.entrypoints.cli.common import guarded
from soong_agent.ports.errors import ConfigError


def broken() -> int:
    raise KeyError("what a bug")


def test_an_expected_error_is_one_line_and_its_code(capsys: pytest.CaptureFixture[str]) -> None:
    def refuse() -> int:
        raise ConfigError("config.toml: model.name: expected text")

    assert guarded(refuse) == 2
    assert capsys.readouterr().err == (
        "soong-agent: error: config.toml: model.name: expected text\n"
    )


def test_a_bug_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SOONG_AGENT_DEBUG", raising=False)
    assert guarded(broken) == 1
    err = capsys.readouterr().err
    assert err == "soong-agent: error: internal error: KeyError: 'what a bug'\n"


def test_the_traceback_only_when_asked_for(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOONG_AGENT_DEBUG", "1")
    assert guarded(broken) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.endswith("internal error: KeyError: 'what a bug'\n")
