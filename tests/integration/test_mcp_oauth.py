"""OAuth 2.1 for HTTP and SSE MCP servers (MCP-3) against a real server on loopback: the
contract server behind its own authorization server (`oauth_server.py`), in a subprocess.

The browser's part is played by the test: the `authorize` callable fetches the authorization
URL and follows its redirect to the hub's loopback listener, as a browser would.
"""

from __future__ import annotations

import json
import stat
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest

from soong_agent.adapters.mcp import SdkMcpHub
from soong_agent.ports.mcp import McpOAuth, McpServerSpec
from tests.support.mcp_servers.oauth_http import OAuthServer, oauth_server

NAME = "tracker"


async def browser(server: str, url: str) -> None:
    """What a person's browser does: open the authorization URL (the test server approves at
    once) and follow its redirect to the loopback listener."""
    async with httpx.AsyncClient(timeout=10) as client:
        answer = await client.get(url)
        assert answer.status_code == 302, answer.text
        landed = await client.get(answer.headers["location"])
        assert landed.status_code == 200, landed.text


@pytest.fixture
def server(tmp_path: Path) -> Iterator[OAuthServer]:
    with oauth_server(tmp_path, client="bot:machine-secret-5e1") as running:
        yield running


def spec(url: str, oauth: McpOAuth | None = None, transport: str = "http") -> McpServerSpec:
    return McpServerSpec(NAME, transport, url=url, oauth=oauth or McpOAuth())  # type: ignore[arg-type]


@asynccontextmanager
async def running_hub(
    home: Path, *specs: McpServerSpec, authorize=None
) -> AsyncIterator[SdkMcpHub]:  # type: ignore[no-untyped-def]
    hub = SdkMcpHub(list(specs), startup_timeout_s=20, auth_home=home, authorize=authorize)
    try:
        hub.start()
        await hub.wait_ready(20)
        yield hub
    finally:
        with anyio.fail_after(30):
            await hub.aclose()


def token_file(home: Path) -> Path:
    return home / "mcp-auth" / f"{NAME}.json"


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_a_login_with_pkce_through_the_loopback_listener(
    tmp_path: Path, transport: str
) -> None:
    home = tmp_path / "home"
    with oauth_server(tmp_path, transport=transport) as srv:
        async with running_hub(home, spec(srv.url, transport=transport), authorize=browser) as hub:
            [health] = hub.health()
            assert health.state == "ready", health.detail
            result = await hub.call_tool(NAME, "add", {"a": 2, "b": 3}, timeout_s=20)
            assert not result.is_error
        steps = [e["step"] for e in srv.log() if e["step"] != "mcp"]
        assert "prm" in steps and "asm" in steps and "register" in steps
        [authorize] = srv.log("authorize")
        assert authorize["problems"] == []  # PKCE S256, registered loopback URI, resource
        [token] = srv.log("token")
        assert token == {"step": "token", "grant": "authorization_code", "problems": []}
        assert any(e["ok"] for e in srv.log("mcp"))
    path = token_file(home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    stored = json.loads(path.read_text())
    assert stored["tokens"]["access_token"].startswith("at-")
    assert stored["url"] == srv.url


async def test_without_anyone_to_log_in_the_server_needs_login(
    tmp_path: Path, server: OAuthServer
) -> None:
    async with running_hub(tmp_path / "home", spec(server.url)) as hub:
        [health] = hub.health()
    assert health.state == "failed"
    assert health.detail == f"needs login (run: soong-agent mcp login {NAME})"
    assert not server.log("authorize")


async def test_an_expired_access_token_is_refreshed_on_401(
    tmp_path: Path, server: OAuthServer
) -> None:
    home = tmp_path / "home"
    async with running_hub(home, spec(server.url), authorize=browser) as hub:
        first = json.loads(token_file(home).read_text())["tokens"]["access_token"]
        server.expire_access_tokens()
        result = await hub.call_tool(NAME, "add", {"a": 1, "b": 1}, timeout_s=20)
        assert not result.is_error
    grants = [e["grant"] for e in server.log("token")]
    assert grants == ["authorization_code", "refresh_token"]
    assert len(server.log("authorize")) == 1  # no second login
    second = json.loads(token_file(home).read_text())["tokens"]["access_token"]
    assert second != first


async def test_a_token_about_to_expire_is_refreshed_before_it_is_sent(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with oauth_server(tmp_path, ttl=30) as srv:  # 30 s: inside the refresh margin
        async with running_hub(home, spec(srv.url), authorize=browser) as hub:
            assert hub.health()[0].state == "ready"
        old = json.loads(token_file(home).read_text())["tokens"]["access_token"]
        before = len(srv.log("mcp"))
        async with running_hub(home, spec(srv.url)) as hub:  # nobody to log in: not needed
            assert hub.health()[0].state == "ready", hub.health()[0].detail
        later = srv.log()[len(srv.log()) - (len(srv.log("mcp")) - before) - 1 :]
        assert [e["grant"] for e in srv.log("token")] == ["authorization_code", "refresh_token"]
        assert all(e["authorization"] != f"Bearer {old}" for e in later if e["step"] == "mcp")


async def test_client_credentials_need_nobody(tmp_path: Path, server: OAuthServer) -> None:
    home = tmp_path / "home"
    oauth = McpOAuth(
        grant="client_credentials", client_id="bot", client_secret="machine-secret-5e1"
    )
    async with running_hub(home, spec(server.url, oauth)) as hub:
        [health] = hub.health()
        assert health.state == "ready", health.detail
    assert [e["grant"] for e in server.log("token")] == ["client_credentials"]
    assert not server.log("authorize") and not server.log("register")
    assert stat.S_IMODE(token_file(home).stat().st_mode) == 0o600


async def test_a_refused_client_secret_is_a_clear_failure_that_hides_the_secret(
    tmp_path: Path, server: OAuthServer
) -> None:
    oauth = McpOAuth(grant="client_credentials", client_id="bot", client_secret="wrong-secret-9a")
    async with running_hub(tmp_path / "home", spec(server.url, oauth)) as hub:
        [health] = hub.health()
    assert health.state == "failed"
    assert "wrong-secret-9a" not in health.detail
    assert "Token exchange failed (401)" in health.detail, health.detail


async def test_an_http_error_is_shown_with_its_status(tmp_path: Path) -> None:
    with oauth_server(tmp_path) as srv:
        bad = McpServerSpec(NAME, "http", url=f"{srv.base}/nowhere", oauth=None)
        async with running_hub(tmp_path / "home", bad) as hub:
            [health] = hub.health()
    assert health.state == "failed"
    assert health.detail.startswith("HTTP 401 Unauthorized from "), health.detail


async def test_in_a_run_tokens_are_used_but_never_stored_or_shown(
    tmp_path: Path, server: OAuthServer
) -> None:
    from soong_agent import AgentRuntime, ApprovalRequest
    from soong_agent.ports.approval import Decision
    from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config

    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    write_minimal_config(home)
    (home / "mcp.json").write_text(json.dumps({"mcp_servers": {NAME: {"url": server.url}}}))
    async with running_hub(home, spec(server.url), authorize=browser) as hub:  # the login
        assert hub.health()[0].state == "ready"
    stored = json.loads(token_file(home).read_text())["tokens"]
    secrets = [stored["access_token"], stored["refresh_token"]]

    def allow(request: ApprovalRequest) -> Decision:
        return "allow_once"

    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls((f"mcp__{NAME}__add", {"a": 20, "b": 22})),
            ScriptedResponse.text("done"),
        ]
    )
    async with AgentRuntime(project, home, allow, model=model) as runtime:
        run = await runtime.run("add with the tracker")
        with anyio.fail_after(60):
            result = await run.wait()
        events = [e async for e in run.events()]
    assert result.status == "completed", result.reason
    [tool_result] = [e for e in events if e.type == "tool_result"]
    assert not tool_result.is_error and "42" in tool_result.content
    assert any(e["ok"] for e in server.log("mcp"))
    kept = [p for p in home.rglob("*") if p.is_file() and p != token_file(home)]
    for path in kept:
        data = path.read_bytes()
        assert not [s for s in secrets if s.encode() in data], path
    shown = "".join(repr(e) for e in events)
    assert not [s for s in secrets if s in shown]
