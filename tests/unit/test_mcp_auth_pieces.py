"""The OAuth pieces of the MCP client on their own (MCP-3): the loopback redirect listener
(state checked, one use, the server's error passed on) and the token file (0600, bound to the
server's URL, the registration kept when the tokens are dropped)."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import httpx
import pytest
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from soong_agent.adapters.mcp.auth.listener import AuthorizationRefused, RedirectListener
from soong_agent.adapters.mcp.auth.store import TokenFile


async def _get(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=5) as client:
        return await client.get(url)


async def test_the_listener_refuses_a_wrong_state_and_serves_one_redirect() -> None:
    listener = RedirectListener()
    await listener.start()
    listener.expect("the-state")
    base = listener.redirect_uri
    waiting = asyncio.ensure_future(listener.wait(10))
    forged = await _get(f"{base}?code=evil&state=other")
    assert forged.status_code == 400
    assert "state does not match" in forged.text
    missing = await _get(f"{base}?code=evil")
    assert missing.status_code == 400
    assert not waiting.done()
    good = await _get(f"{base}?code=the-code&state=the-state")
    assert good.status_code == 200
    redirect = await waiting
    assert (redirect.code, redirect.state) == ("the-code", "the-state")
    with pytest.raises(httpx.ConnectError):  # one use: the listener is gone
        await _get(f"{base}?code=again&state=the-state")


async def test_the_listener_passes_on_the_servers_refusal() -> None:
    listener = RedirectListener()
    await listener.start()
    listener.expect("s")
    waiting = asyncio.ensure_future(listener.wait(10))
    answer = await _get(f"{listener.redirect_uri}?error=access_denied&state=s")
    assert answer.status_code == 200
    with pytest.raises(AuthorizationRefused, match="access_denied"):
        await waiting


async def test_the_listener_gives_up_after_its_timeout() -> None:
    listener = RedirectListener()
    await listener.start()
    listener.expect("s")
    with pytest.raises(TimeoutError):
        await listener.wait(0.01)


async def test_the_token_file_is_private_and_bound_to_the_url(tmp_path: Path) -> None:
    path = tmp_path / "home" / "mcp-auth" / "t.json"
    store = TokenFile(path, "https://a.example/mcp")
    await store.set_client_info(OAuthClientInformationFull(client_id="c-1", redirect_uris=None))
    await store.set_tokens(
        OAuthToken(access_token="at-123456", refresh_token="rt-123456", expires_in=3600)
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    again = TokenFile(path, "https://a.example/mcp")
    tokens = await again.get_tokens()
    assert tokens is not None and tokens.access_token == "at-123456"
    assert tokens.expires_in is not None and 3500 < tokens.expires_in <= 3600
    assert set(again.values()) == {"at-123456", "rt-123456"}
    elsewhere = TokenFile(path, "https://b.example/mcp")
    assert await elsewhere.get_tokens() is None  # never sent to another URL
    again.forget_tokens()
    assert await TokenFile(path, "https://a.example/mcp").get_tokens() is None
    client = await TokenFile(path, "https://a.example/mcp").get_client_info()
    assert client is not None and client.client_id == "c-1"
    assert again.remove() and not path.exists()


async def test_the_token_file_refuses_a_linked_folder_and_reads_no_linked_file(
    tmp_path: Path,
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    home = tmp_path / "home"
    home.mkdir()
    (home / "mcp-auth").symlink_to(elsewhere)
    tokens = OAuthToken(access_token="AT-1", token_type="Bearer")
    linked = TokenFile(home / "mcp-auth" / "tracker.json", "https://mcp.example/mcp")
    with pytest.raises(OSError, match="not a folder of its own"):
        await linked.set_tokens(tokens)
    assert list(elsewhere.iterdir()) == []
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o755  # not chmod-ed through the link
    own = tmp_path / "own" / "mcp-auth"
    own.mkdir(parents=True)
    planted = tmp_path / "planted.json"
    planted.write_text('{"format": 1, "url": "https://mcp.example/mcp", "tokens": {}}')
    (own / "tracker.json").symlink_to(planted)
    assert TokenFile(own / "tracker.json", "https://mcp.example/mcp").has_tokens() is False


async def test_without_the_servers_metadata_a_refresh_is_not_sent_to_the_mcp_origin(
    tmp_path: Path,
) -> None:
    """Tokens kept before the authorization server's metadata was (a client registered at
    auth.example.net): the refresh token and secret never go to the MCP server's origin."""

    import httpx2

    from soong_agent.adapters.mcp.auth.provider import LoginRequired, build_auth
    from soong_agent.ports.mcp import McpOAuth, McpServerSpec

    url = "https://mcp.example.com/mcp"
    file = TokenFile(tmp_path / "mcp-auth" / "tracker.json", url)
    await file.set_tokens(
        OAuthToken(access_token="AT", token_type="Bearer", refresh_token="RT", expires_in=30)
    )
    await file.set_client_info(
        OAuthClientInformationFull.model_validate(
            {
                "client_id": "cid",
                "client_secret": "SECRET",
                "redirect_uris": ["http://127.0.0.1:5555/callback"],
                "issuer": "https://auth.example.net",
            }
        )
    )
    assert file.server_metadata() is None
    auth = build_auth(
        McpServerSpec("tracker", "http", url=url, oauth=McpOAuth()), file, authorize=None
    )
    flow = auth.async_auth_flow(httpx2.Request("POST", url))
    with pytest.raises(LoginRequired, match="mcp login tracker"):
        await flow.__anext__()


async def test_a_legacy_servers_issuer_on_its_own_origin_is_read_as_that_origin() -> None:
    """2025-03-26 servers (no protected-resource metadata) may name an issuer with a path on
    their own origin; one on another origin is left for the SDK to refuse."""
    import httpx2

    from soong_agent.adapters.mcp.auth.provider import _legacy_metadata

    server = "http://mcp.example.test:8080/mcp"
    sent = httpx2.Request(
        "GET", "http://mcp.example.test:8080/.well-known/oauth-authorization-server"
    )
    same = httpx2.Response(200, json={"issuer": "http://mcp.example.test:8080/oauth"}, request=sent)
    read = await _legacy_metadata(sent, same, server)
    assert read.json()["issuer"] == "http://mcp.example.test:8080"
    other = httpx2.Response(200, json={"issuer": "http://evil.example.test/oauth"}, request=sent)
    assert (await _legacy_metadata(sent, other, server)).json()["issuer"] == (
        "http://evil.example.test/oauth"
    )
    elsewhere = httpx2.Request(
        "GET", "http://as.example.test/.well-known/oauth-authorization-server"
    )
    kept = httpx2.Response(200, json={"issuer": "http://as.example.test/oauth"}, request=elsewhere)
    assert (await _legacy_metadata(elsewhere, kept, server)).json()["issuer"].endswith("/oauth")
