"""SdkMcpHub against real servers: the PyPI servers `mcp-server-time` and `mcp-server-git`, the
npm reference server `@modelcontextprotocol/server-everything` over stdio, streamable HTTP and
SSE (marked e2e: they start node; skipped, saying why, without Node.js or the package), and the
tiny line server's failure modes: exits at start, never answers, writes garbage, crashes, dies
again and again. Processes are found through a marker argument in /proc.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import anyio
import pytest

from soong_agent.adapters.mcp import RestartPolicy, SdkMcpHub
from soong_agent.ports.mcp import McpError, McpServerSpec, ServerHealth
from tests.support.mcp_servers import contract_spec, line_spec, processes_with
from tests.support.mcp_servers.everything import everything_command, everything_over_http

MakeHub = Callable[..., SdkMcpHub]


@pytest.fixture
async def make_hub() -> AsyncIterator[MakeHub]:
    """Build hubs (closed at the end of the test, even when it fails)."""
    made: list[SdkMcpHub] = []

    def make(specs: Sequence[McpServerSpec], **options: object) -> SdkMcpHub:
        options.setdefault("startup_timeout_s", 10.0)
        hub = SdkMcpHub(specs, **options)  # type: ignore[arg-type]
        made.append(hub)
        return hub

    yield make
    for hub in made:
        with anyio.fail_after(30):
            await hub.aclose()


def _health(hub: SdkMcpHub, server: str) -> ServerHealth:
    return next(h for h in hub.health() if h.server == server)


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: pip install -e '.[dev]' installs it")


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    with anyio.fail_after(timeout_s):
        while not condition():
            await anyio.sleep(0.02)


# --- real servers --------------------------------------------------------------------------------


async def test_mcp_server_time_over_stdio(make_hub: MakeHub) -> None:
    _require("mcp_server_time")
    spec = McpServerSpec("time", "stdio", command=sys.executable, args=("-m", "mcp_server_time"))
    hub = make_hub([spec])
    hub.start()
    await hub.wait_ready(15)
    health = _health(hub, "time")
    assert (health.state, health.tool_count) == ("ready", 2), health
    assert health.startup_ms is not None and health.startup_ms > 0
    tools = {tool.name: tool for tool in hub.tools()}
    assert set(tools) == {"get_current_time", "convert_time"}
    assert tools["get_current_time"].read_only is True
    assert "timezone" in tools["get_current_time"].input_schema["properties"]
    result = await hub.call_tool("time", "get_current_time", {"timezone": "Etc/UTC"}, timeout_s=10)
    assert not result.is_error
    assert result.structured is not None and result.structured["timezone"] == "Etc/UTC"
    bad = await hub.call_tool(
        "time", "get_current_time", {"timezone": "Nowhere/Else"}, timeout_s=10
    )
    assert bad.is_error


async def test_mcp_server_git_over_stdio(make_hub: MakeHub, tmp_path: Path) -> None:
    _require("mcp_server_git")
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "a.txt").write_text("a\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first commit of the test"], check=True)
    (repo / "a.txt").write_text("changed\n")
    spec = McpServerSpec(
        "git",
        "stdio",
        command=sys.executable,
        args=("-m", "mcp_server_git", "--repository", str(repo)),
    )
    hub = make_hub([spec])
    hub.start()
    await hub.wait_ready(15)
    assert _health(hub, "git").state == "ready"
    names = {tool.name for tool in hub.tools()}
    assert {"git_status", "git_log", "git_diff_unstaged"} <= names
    log = await hub.call_tool("git", "git_log", {"repo_path": str(repo)}, timeout_s=15)
    assert "first commit of the test" in log.content[0].text
    diff = await hub.call_tool("git", "git_diff_unstaged", {"repo_path": str(repo)}, timeout_s=15)
    assert "+changed" in diff.content[0].text


async def _exercise_everything(hub: SdkMcpHub, server: str) -> None:
    await hub.wait_ready(20)
    health = _health(hub, server)
    assert health.state == "ready", health
    names = {tool.name for tool in hub.tools() if tool.server == server}
    assert {"echo", "get-sum", "get-tiny-image", "get-resource-links"} <= names
    echo = await hub.call_tool(server, "echo", {"message": "hi"}, timeout_s=10)
    assert echo.content[0].text == "Echo: hi"
    image = await hub.call_tool(server, "get-tiny-image", {}, timeout_s=10)
    assert any(c.kind == "image" and c.mime_type == "image/png" and c.data for c in image.content)
    links = await hub.call_tool(server, "get-resource-links", {"count": 2}, timeout_s=10)
    assert [c.kind for c in links.content].count("resource") == 2
    assert hub.has_resources(server)
    resources = await hub.list_resources(server, timeout_s=10)
    assert resources
    first = await hub.read_resource(server, resources[0].uri, timeout_s=10)
    assert first.content and first.content[0].uri == resources[0].uri


@pytest.mark.e2e
async def test_server_everything_over_stdio(make_hub: MakeHub) -> None:
    command, *args = everything_command("stdio")
    hub = make_hub([McpServerSpec("everything", "stdio", command=command, args=tuple(args))])
    hub.start()
    await _exercise_everything(hub, "everything")


@pytest.mark.e2e
@pytest.mark.parametrize(("transport", "mode"), [("http", "streamableHttp"), ("sse", "sse")])
async def test_server_everything_over_the_network(
    make_hub: MakeHub, transport: str, mode: str
) -> None:
    with everything_over_http(mode) as url:
        spec = McpServerSpec(
            "everything", transport, url=url, headers={"X-Test-Token": "token-never-shown"}
        )  # type: ignore[arg-type]
        hub = make_hub([spec])
        hub.start()
        await _exercise_everything(hub, "everything")
        await hub.aclose()
        assert _health(hub, "everything").state == "stopped"


# --- start-up ------------------------------------------------------------------------------------


async def test_servers_start_concurrently(make_hub: MakeHub) -> None:
    specs = [line_spec(f"slow{i}", "slow-start", "1.0") for i in range(3)]
    hub = make_hub(specs)
    started = time.monotonic()
    hub.start()
    await hub.wait_ready(10)
    elapsed = time.monotonic() - started
    assert [h.state for h in hub.health()] == ["ready"] * 3
    assert elapsed < 2.5, f"three 1 s starts took {elapsed:.2f} s: not concurrent"


async def test_a_server_that_exits_at_start_is_failed_with_its_exit_code_and_stderr(
    make_hub: MakeHub,
) -> None:
    hub = make_hub([line_spec("broken", "exit")])
    hub.start()
    await hub.wait_ready(10)
    health = _health(hub, "broken")
    assert health.state == "failed"
    assert health.exit_code == 3
    assert health.detail == "exited with code 3 during start-up: line_server: giving up"
    assert health.stderr_tail == (
        "line_server: reading config",
        "line_server: bad config",
        "line_server: giving up",
    )
    assert hub.tools() == []


async def test_a_server_that_never_answers_fails_at_the_startup_timeout_and_is_killed(
    make_hub: MakeHub,
) -> None:
    marker = f"hang-{uuid.uuid4().hex}"
    hub = make_hub([line_spec("hang", "hang", marker=marker)], startup_timeout_s=1.0)
    started = time.monotonic()
    hub.start()
    await _until(lambda: bool(processes_with(marker)), 5)
    await hub.wait_ready(10)
    elapsed = time.monotonic() - started
    health = _health(hub, "hang")
    assert health.state == "failed"
    assert health.detail == "no answer to initialize within 1 s: line_server: hanging"
    assert 0.9 < elapsed < 3, elapsed
    await _until(lambda: not processes_with(marker), 5)


async def test_a_server_that_writes_garbage_is_failed(make_hub: MakeHub) -> None:
    marker = f"garbage-{uuid.uuid4().hex}"
    hub = make_hub([line_spec("garbage", "garbage", marker=marker)])
    hub.start()
    await hub.wait_ready(10)
    health = _health(hub, "garbage")
    assert health.state == "failed"
    assert health.detail == (
        "wrote garbage on stdout (not JSON-RPC): 'Hello, this is not JSON-RPC'"
    )
    await _until(lambda: not processes_with(marker), 5)


async def test_a_missing_command_is_failed(make_hub: MakeHub) -> None:
    spec = McpServerSpec("ghost", "stdio", command="no-such-mcp-server-here")
    hub = make_hub([spec])
    hub.start()
    await hub.wait_ready(5)
    assert _health(hub, "ghost").state == "failed"
    assert _health(hub, "ghost").detail == "command not found on PATH: no-such-mcp-server-here"


async def test_an_unreachable_http_server_is_failed(make_hub: MakeHub) -> None:
    spec = McpServerSpec(
        "remote", "http", url="http://user:pw@127.0.0.1:9/mcp?key=1", headers={"A": "Bearer xyz1"}
    )
    hub = make_hub([spec])
    hub.start()
    await hub.wait_ready(15)
    health = _health(hub, "remote")
    assert health.state == "failed"
    assert health.detail.startswith("cannot reach http://127.0.0.1:9/mcp: ")
    assert "pw" not in health.detail and "key=1" not in health.detail


# --- running servers -----------------------------------------------------------------------------


async def test_a_crashed_server_is_restarted_with_backoff(make_hub: MakeHub) -> None:
    hub = make_hub(
        [line_spec("crashy", "crash-second")],
        restart=RestartPolicy(initial_backoff_s=0.2),
    )
    heard: list[ServerHealth] = []
    hub.add_listener(heard.append)
    hub.start()
    await hub.wait_ready(10)
    first = await hub.call_tool("crashy", "ping", {}, timeout_s=5)
    assert first.content[0].text == "pong 1"
    with pytest.raises(McpError, match="'crashy' stopped during call tool 'ping'"):
        await hub.call_tool("crashy", "ping", {}, timeout_s=5)
    await _until(lambda: [h.state for h in heard][-1:] == ["ready"] and len(heard) > 2)
    states = [h.state for h in heard]
    assert states == ["starting", "ready", "crashed", "restarting", "starting", "ready"]
    crashed = heard[2]
    assert crashed.exit_code == 7
    assert crashed.detail == "exited with code 7: line_server: crashing on call 2"
    assert crashed.stderr_tail == ("line_server: crashing on call 2",)
    restarting = heard[3]
    assert (restarting.attempt, restarting.backoff_s) == (1, 0.2)
    again = await hub.call_tool("crashy", "ping", {}, timeout_s=5)
    assert again.content[0].text == "pong 1"


async def test_calls_during_a_restart_say_so_and_restarts_give_up(make_hub: MakeHub) -> None:
    hub = make_hub(
        [line_spec("dying", "die-after", "0.1")],
        restart=RestartPolicy(max_attempts=2, initial_backoff_s=0.3),
    )
    heard: list[ServerHealth] = []
    hub.add_listener(heard.append)
    hub.start()
    await _until(lambda: _health(hub, "dying").state == "restarting")
    with pytest.raises(McpError, match="'dying' is restarting after a crash"):
        await hub.call_tool("dying", "ping", {}, timeout_s=1)
    assert [t.name for t in hub.tools()] == ["ping"]  # the last list stays while it restarts
    await _until(lambda: _health(hub, "dying").state == "failed", 15)
    states = [h.state for h in heard]
    assert states.count("crashed") == 3
    assert [h.backoff_s for h in heard if h.state == "restarting"] == [0.3, 0.6]
    final = _health(hub, "dying")
    assert final.detail.startswith("gave up after 2 restarts: exited with code 9")
    assert final.exit_code == 9
    assert hub.tools() == []


async def test_aclose_leaves_no_process_behind(make_hub: MakeHub) -> None:
    marker = f"close-{uuid.uuid4().hex}"
    specs = [
        contract_spec("sdk", marker=marker),
        line_spec("plain", "ok", marker=marker),
        line_spec("slow", "slow-start", "30", marker=marker),
        line_spec("hang", "hang", marker=marker),
    ]
    hub = make_hub(specs, startup_timeout_s=20.0)
    hub.start()
    await _until(lambda: _health(hub, "sdk").state == "ready", 15)
    assert len(processes_with(marker)) >= 4
    started = time.monotonic()
    await hub.aclose()
    assert time.monotonic() - started < 8
    assert processes_with(marker) == []
    assert {h.state for h in hub.health()} == {"stopped"}


# --- the discovery cache -------------------------------------------------------------------------


async def test_the_discovery_cache_offers_tools_at_once_then_the_live_list(
    make_hub: MakeHub, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    spec = line_spec("slowish", "slow-start", "0.5", env={"TOKEN": "env-secret-value"})
    first = make_hub([spec], cache_dir=cache)
    first.start()
    await first.wait_ready(10)
    await first.aclose()
    files = list(cache.glob("*.json"))
    assert [f.name for f in files] == [f"{spec.fingerprint()}.json"]
    assert "env-secret-value" not in files[0].read_text()

    second = make_hub([spec], cache_dir=cache)
    heard: list[ServerHealth] = []
    second.add_listener(heard.append)
    started = time.monotonic()
    second.start()
    assert [t.name for t in second.tools()] == ["ping"]
    assert (_health(second, "slowish").state, _health(second, "slowish").from_cache) == (
        "starting",
        True,
    )
    await second.wait_ready(10)
    assert time.monotonic() - started < 0.3  # the cached list counts as ready
    await _until(lambda: _health(second, "slowish").state == "ready")
    assert not _health(second, "slowish").from_cache
    assert heard[0].from_cache and heard[0].detail == "starting; 1 tool from the discovery cache"


async def test_the_discovery_cache_expires_and_follows_the_spec(
    make_hub: MakeHub, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    spec = line_spec("plain", "ok")
    now = [1_000_000.0]
    first = make_hub([spec], cache_dir=cache, cache_ttl_s=60, clock=lambda: now[0])
    first.start()
    await first.wait_ready(10)
    await first.aclose()
    saved = json.loads(next(cache.glob("*.json")).read_text())
    assert saved["saved_at"] == now[0] and saved["tools"][0]["name"] == "ping"

    now[0] += 61
    expired = make_hub([spec], cache_dir=cache, cache_ttl_s=60, clock=lambda: now[0])
    expired.start()
    assert expired.tools() == []
    changed = line_spec("plain", "ok", env={"OTHER": "1"})
    other = make_hub([changed], cache_dir=cache, cache_ttl_s=3600, clock=lambda: now[0])
    other.start()
    assert other.tools() == []
    (cache / f"{changed.fingerprint()}.json").write_text("{not json")
    broken = make_hub([changed], cache_dir=cache, cache_ttl_s=3600, clock=lambda: now[0])
    broken.start()
    assert broken.tools() == []


# --- secrets -------------------------------------------------------------------------------------


async def test_env_values_and_headers_never_appear_in_health_or_errors(make_hub: MakeHub) -> None:
    secret = "s3cret-value-9f8e7d"
    leaky = line_spec("leaky", "exit", env={"LEAK": secret})
    remote = McpServerSpec(
        "remote",
        "http",
        url="http://127.0.0.1:9/mcp",
        headers={"Authorization": f"Bearer {secret}"},
    )
    hub = make_hub([leaky, remote])
    seen: list[str] = []
    hub.add_listener(lambda h: seen.append(repr(h)))
    hub.start()
    await hub.wait_ready(15)
    health = _health(hub, "leaky")
    assert "line_server: LEAK=[redacted]" in health.stderr_tail
    for server in ("leaky", "remote"):
        with pytest.raises(McpError) as caught:
            await hub.call_tool(server, "ping", {}, timeout_s=1)
        seen.append(str(caught.value))
    seen.extend(repr(h) for h in hub.health())
    assert seen and not [text for text in seen if secret in text]
