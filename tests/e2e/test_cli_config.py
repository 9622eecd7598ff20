"""Bad configuration: one clear line naming the problem, exit code 2, no traceback."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response

pytestmark = pytest.mark.e2e


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize(
    ("config", "must_mention"),
    [
        ('[model]\nname = "m"\ntimeout_ms = "soon"\n', ["config.toml", "model.timeout_ms", "soon"]),
        ('[model]\nname = "m"\ntmeout_ms = 5\n', ["config.toml", "model.tmeout_ms"]),
        ('[model\nname = "m"\n', ["config.toml", "line 1"]),
        ('[model]\nprovider = "gemini"\n', ["model.provider", "gemini"]),
        ("[bogus]\nx = 1\n", ["bogus"]),
        ('[compact]\nmodel_profile = "nope"\n', ["nope", "compact.model_profile"]),
    ],
)
def test_bad_config_is_one_line_exit_2(
    world: CliWorld, config: str, must_mention: list[str]
) -> None:
    world.write_config(config)
    for args in (["run", "hi"], ["config", "check"]):
        result = world.run(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        line = one_error_line(result.stderr)
        for word in must_mention:
            assert word in line, (word, line)
    assert world.server.requests == []


def test_missing_config_file(world: CliWorld) -> None:
    (world.home / "config.toml").unlink()
    result = world.run("run", "hi")
    assert result.returncode == 2
    line = one_error_line(result.stderr)
    assert str(world.home / "config.toml") in line
    assert not (world.home / "config.toml").exists(), "nothing generates a config"


def test_missing_project_path(world: CliWorld) -> None:
    result = world.run("run", "--path", "/definitely/not/here", "hi")
    assert result.returncode == 2
    assert "/definitely/not/here" in one_error_line(result.stderr)


def test_missing_api_key_names_var_profile_and_source(world: CliWorld) -> None:
    del world.env["SOONG_TEST_KEY"]
    world.server.enqueue(text_response("never"))
    result = world.run("run", "hi")
    assert result.returncode == 2
    line = next(x for x in result.stderr.splitlines() if x.startswith("soong-agent: error"))
    assert "SOONG_TEST_KEY" in line and "main" in line and "config.toml" in line
    assert world.server.requests == []


def test_config_check_shows_values_and_sources(world: CliWorld) -> None:
    result = world.run("config", "check")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "fake-model" in out and "SOONG_TEST_KEY" in out
    assert "default" in out and "file" in out
    assert "sessions.sqlite" in out
