"""What a run of an HTTP or SSE server needs beyond its URL (MCP-3): the OAuth auth of its
requests (tokens from `${home}/mcp-auth/<server>.json`), a record of its last HTTP error, and
the words for a start that failed on one (`needs login (run: …)`, `HTTP 503 …`)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path

import httpx2

from soong_agent.adapters.mcp.auth.provider import Authorize, LoginRequired, build_auth
from soong_agent.adapters.mcp.auth.store import TokenFile, token_path
from soong_agent.adapters.mcp.failures import describe
from soong_agent.adapters.mcp.state import RunEnd, ServerSlot
from soong_agent.adapters.mcp.text import Scrubber, one_line, safe_url
from soong_agent.adapters.mcp.transports import ResponseHook


def login_hint(server: str) -> str:
    return f"needs login (run: soong-agent mcp login {server})"


class ServerAccess:
    """The auth of every HTTP and SSE server of a hub. `home` holds the token files (None: no
    OAuth at all); `authorize` takes a person through a login (None: a server that wants one
    fails saying so)."""

    def __init__(self, home: Path | None, authorize: Authorize | None) -> None:
        self._home = home
        self.authorize = authorize

    def store(self, srv: ServerSlot) -> TokenFile | None:
        """`srv`'s token file (None for stdio, OAuth off, or no home)."""
        spec = srv.spec
        if self._home is None or spec.oauth is None or spec.url is None:
            return None
        return TokenFile(token_path(self._home, spec.name), spec.url)

    def auth_for(self, srv: ServerSlot) -> httpx2.Auth | None:
        """The auth of one run of `srv` (None when it has no OAuth); its scrubber learns the
        stored token values."""
        srv.needs_login = False
        srv.auth_error = None
        srv.http_error = None
        store = self.store(srv)
        if store is None:
            return None
        srv.scrub = Scrubber([*srv.spec.secrets(), *store.values()])

        def login_needed() -> None:
            srv.needs_login = True

        inner = build_auth(srv.spec, store, authorize=self.authorize, on_login_needed=login_needed)
        return _RecordingAuth(inner, srv)

    def response_hook(self, srv: ServerSlot) -> ResponseHook | None:
        """Records the status of every response of the server's own endpoint."""
        url = srv.spec.url
        if url is None:
            return None
        endpoint = url.split("#", 1)[0]

        async def hook(response: httpx2.Response) -> None:
            if str(response.request.url) != endpoint:
                return
            if response.status_code < 400:
                srv.http_error = None
                return
            challenge = response.headers.get("www-authenticate", "")
            srv.http_error = (
                response.status_code,
                response.reason_phrase,
                challenge.lower().startswith("bearer"),
            )

        return hook

    def failure(self, srv: ServerSlot) -> RunEnd | None:
        """Why a start failed when an HTTP answer says it better than the SDK's error."""
        if srv.needs_login:
            return RunEnd("error", login_hint(srv.name))
        if srv.auth_error is not None:
            return RunEnd("error", f"authorization failed: {srv.auth_error}")
        if srv.http_error is None:
            return None
        status, reason, bearer = srv.http_error
        oauth = srv.spec.oauth
        if status == 401 and bearer and oauth is not None:
            if oauth.grant in ("client_credentials", "identity_assertion"):
                return None  # nobody can log in: the token request's own error says more
            return RunEnd("error", login_hint(srv.name))
        where = safe_url(srv.spec.url)
        if status == 401 and srv.spec.oauth is None:
            return RunEnd(
                "error",
                f"HTTP 401 {reason} from {where}: the server wants authorization "
                '(its "headers" were refused, or "oauth" is false in mcp.json)',
            )
        return RunEnd("error", f"HTTP {status} {reason} from {where}")


class _RecordingAuth(httpx2.Auth):
    """`inner`, with the error its flow ended in kept on the slot (the SDK's transport turns it
    into a generic failure)."""

    requires_response_body = True

    def __init__(self, inner: httpx2.Auth, srv: ServerSlot) -> None:
        self._inner = inner
        self._srv = srv

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = self._inner.async_auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        except LoginRequired:
            raise
        except Exception as exc:
            self._srv.auth_error = one_line(self._srv.scrub(describe(exc)), 240)
            raise
        finally:
            await flow.aclose()
