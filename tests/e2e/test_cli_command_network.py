"""SBX-4 end to end: with an allow-list in `[tools.network]`, the installed CLI's commands reach
the listed host through the filtering proxy and nothing else; a refusal reaches the model's
result and the run's events as `network_denied`, naming the host and the command; permissions
still decide whether a command runs; `sandbox check` shows the mode, the list and the proxy."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import pytest

from soong_agent.adapters.ossandbox import probe_host
from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response, tool_call_response
from tests.support.loopback_sites import PAGE, Site, static_site

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not any(s.works for s in probe_host().statuses), reason="no OS sandbox works on this host"
    ),
    pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed"),
]


@pytest.fixture
def sites() -> Iterator[tuple[Site, Site]]:
    with static_site() as allowed, static_site() as other:
        yield allowed, other


def configure(world: CliWorld, allowed: Site, extra: str = "") -> None:
    config = world.home / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8")
        + f'[tools.network]\nallowed_hosts = ["127.0.0.1:{allowed.port}"]\n'
        + extra,
        encoding="utf-8",
    )


def calls(world: CliWorld, *commands: str) -> None:
    world.server.enqueue(
        *[
            tool_call_response([(f"c{i}", "run_command", json.dumps({"command": command}))])
            for i, command in enumerate(commands)
        ],
        text_response("done"),
    )


def test_a_command_reaches_the_allowed_host_only(world: CliWorld, sites: tuple[Site, Site]) -> None:
    allowed, other = sites
    configure(world, allowed, '[permissions]\nmode = "bypass"\n')
    calls(world, f"curl -sS --fail {allowed.url}/", f"curl -sS --fail {other.url}/")
    result = world.run("run", "-o", "json", "fetch both")
    assert result.returncode == 0, result.stderr
    messages = world.server.requests[2].json["messages"]
    reached, refused = [m["content"] for m in messages if m["role"] == "tool"]
    assert PAGE.decode().strip() in reached
    assert "403" in refused
    assert f"refused a network connection to 127.0.0.1:{other.port}" in refused
    events = [json.loads(line) for line in result.stdout.splitlines()]
    (denied,) = [e for e in events if e.get("type") == "network_denied"]
    assert (denied["host"], denied["port"]) == ("127.0.0.1", other.port)
    assert denied["command"] == f"curl -sS --fail {other.url}/"
    assert other.accepted == []


def test_an_allowed_host_does_not_make_a_command_allowed(
    world: CliWorld, sites: tuple[Site, Site]
) -> None:
    allowed, _ = sites
    configure(world, allowed, '[permissions]\ndeny = ["run_command(prefix:curl)"]\n')
    calls(world, f"curl -sS {allowed.url}/")
    result = world.run("run", "fetch it")
    assert result.returncode == 0, result.stderr
    (only,) = [
        m["content"] for m in world.server.requests[1].json["messages"] if m["role"] == "tool"
    ]
    assert PAGE.decode().strip() not in only
    assert allowed.accepted == []


def test_sandbox_check_shows_the_network_mode_the_list_and_the_proxy(
    world: CliWorld, sites: tuple[Site, Site]
) -> None:
    allowed, _ = sites
    configure(world, allowed)
    result = world.run("sandbox", "check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'sandbox.network = "allowlist" (default, from tools.network)' in result.stdout
    assert f"127.0.0.1:{allowed.port}" in result.stdout
    assert "proxy: works, listening on 127.0.0.1:" in result.stdout


def test_under_landlock_the_allow_list_is_taken_only_when_set(
    world: CliWorld, sites: tuple[Site, Site]
) -> None:
    """Landlock lets a command reach the proxy's port on any address: the unset default is
    no network there, said by `sandbox check`, and a command gets nothing."""
    allowed, _ = sites
    configure(world, allowed)
    broken = world.home.parent / "broken-bwrap"  # bubblewrap fails here: Landlock is the best
    broken.mkdir()
    (broken / "bwrap").write_text("#!/bin/sh\nexit 1\n", encoding="utf-8")
    (broken / "bwrap").chmod(0o755)
    world.env["PATH"] = f"{broken}:{world.env['PATH']}"
    checked = world.run("sandbox", "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "sandbox.network = false (none) (default under Landlock" in checked.stdout
    calls(world, f"curl -sS --max-time 5 {allowed.url}/")
    result = world.run("run", "fetch it")
    assert result.returncode == 0, result.stderr
    assert allowed.accepted == []
