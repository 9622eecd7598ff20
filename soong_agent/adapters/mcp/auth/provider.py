"""The `httpx2.Auth` of one HTTP or SSE server (MCP-3), built from its `McpOAuth` settings on
the `mcp` SDK's providers.

- authorization code with PKCE (`LoginProvider`): RFC 9728 protected-resource metadata and
  RFC 8414 / OpenID discovery, dynamic client registration (RFC 7591), a client ID metadata
  document where the server supports one, or the client of `mcp.json`; the `resource`
  parameter (RFC 8707); the redirect comes back to a loopback listener on 127.0.0.1. Only an
  `authorize` callable (the login command, an SDK caller) can take a person through it: with
  none, a server that wants a login raises `LoginRequired`;
- the client-credentials grant (client secret or `private_key_jwt`) for machine-to-machine
  servers, which needs nobody.

On top of the SDK's flow: a token loaded from the file is refreshed before it expires
(`EXPIRY_MARGIN_S`), and a 401 to a token with a refresh token first tries a refresh, before
a new authorization.
"""

from __future__ import annotations

import json
import logging
import socket
import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata
from pydantic import AnyUrl

from soong_agent.adapters.mcp.auth.listener import CALLBACK_PATH, HOST, RedirectListener
from soong_agent.adapters.mcp.auth.store import TokenFile
from soong_agent.ports.mcp import McpOAuth, McpServerSpec

log = logging.getLogger(__name__)

Authorize = Callable[[str, str], Awaitable[None]]
"""Takes a person through an authorization: called with the server's name and the
authorization URL; the redirect then comes to the loopback listener."""

EXPIRY_MARGIN_S = 60
"""A stored access token this close to its expiry is refreshed before it is sent."""
LOGIN_TIMEOUT_S = 300.0
"""How long a login waits for the redirect."""


class LoginRequired(Exception):
    """The server wants an OAuth login and nobody is there to make it."""

    def __init__(self, server: str) -> None:
        super().__init__(f"mcp server {server!r} needs login (run: soong-agent mcp login {server})")
        self.server = server


class _StoredExpiry:
    """Mixin: a token read from the file carries its expiry (the SDK takes a loaded token as
    valid for ever), less a margin, so it is refreshed before it runs out; and the
    authorization server's metadata found at the login comes back with it, so a refresh in a
    later process goes to that server's token endpoint (without it the SDK would send the
    refresh token and client secret to the MCP server's own origin)."""

    context: Any

    async def _initialize(self) -> None:
        await super()._initialize()  # type: ignore[misc]
        tokens = self.context.current_tokens
        if tokens is not None and tokens.expires_in is not None:
            self.context.update_token_expiry(tokens)
            if self.context.token_expiry_time is not None:
                self.context.token_expiry_time -= EXPIRY_MARGIN_S
        storage = self.context.storage
        if self.context.oauth_metadata is None and isinstance(storage, TokenFile):
            self.context.oauth_metadata = storage.server_metadata()

    async def _handle_token_response(self, response: httpx2.Response) -> None:
        await super()._handle_token_response(response)  # type: ignore[misc]
        self._remember_metadata()

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        refreshed: bool = await super()._handle_refresh_response(response)  # type: ignore[misc]
        self._remember_metadata()
        return refreshed

    async def _refresh_token(self) -> httpx2.Request:
        """A refresh goes to the token endpoint of the server that issued the tokens: without
        its metadata (a file from before it was kept) and with a client registered at another
        origin, the refresh token and secret are not guessed at the MCP server's origin: the
        user logs in again."""
        if self.context.oauth_metadata is None:
            client = self.context.client_info
            issuer = getattr(client, "issuer", None) if client is not None else None
            if issuer and _origin(str(issuer)) != _origin(str(self.context.server_url)):
                raise LoginRequired(self._server_name())
        request: httpx2.Request = await super()._refresh_token()  # type: ignore[misc]
        return request

    def _server_name(self) -> str:
        storage = self.context.storage
        return storage.path.stem if isinstance(storage, TokenFile) else str(self.context.server_url)

    def _remember_metadata(self) -> None:
        storage, metadata = self.context.storage, self.context.oauth_metadata
        if metadata is not None and isinstance(storage, TokenFile):
            storage.set_server_metadata(metadata)


class LoginProvider(_StoredExpiry, OAuthClientProvider):
    """Authorization code + PKCE, with refresh on 401 and the configured scopes."""

    def __init__(
        self,
        *,
        server_url: str,
        client_metadata: OAuthClientMetadata,
        storage: TokenFile,
        redirect: _Redirects,
        client_metadata_url: str | None,
        fixed_client: OAuthClientInformationFull | None,
        scopes: tuple[str, ...],
    ) -> None:
        super().__init__(
            server_url,
            client_metadata,
            storage,
            redirect_handler=redirect.send,
            callback_handler=redirect.receive,
            client_metadata_url=client_metadata_url,
        )
        self._fixed_client = fixed_client
        self._scopes = scopes

    async def _initialize(self) -> None:
        await super()._initialize()
        if self._fixed_client is not None:
            self.context.client_info = self._fixed_client

    async def _perform_authorization(self) -> httpx2.Request:
        if self._scopes:
            asked = (self.context.client_metadata.scope or "").split()
            self.context.client_metadata.scope = " ".join(dict.fromkeys([*asked, *self._scopes]))
        return await super()._perform_authorization()

    async def _auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = super()._auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            refreshed = False
            while True:
                response = yield outgoing
                if (
                    outgoing is request
                    and response.status_code == 401
                    and not refreshed
                    and self.context.can_refresh_token()
                ):
                    refreshed = True
                    refresh_response = yield await self._refresh_token()
                    if await self._handle_refresh_response(refresh_response):
                        self._add_auth_header(request)
                        response = yield request
                if self.context.auth_server_url is None:
                    response = await _legacy_metadata(outgoing, response, self.context.server_url)
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()


async def _legacy_metadata(
    sent: httpx2.Request, answer: httpx2.Response, server_url: str
) -> httpx2.Response:
    """A server of the 2025-03-26 protocol (no protected-resource metadata) serves its
    authorization server's metadata at its own origin's well-known URL, and may name an issuer
    with a path on that same origin (``https://host/oauth``). The SDK holds the issuer to the
    origin (RFC 8414 §3.3) and would refuse the server; an issuer on the very origin the
    metadata came from is read as that origin, so such a server works. Any other issuer (another
    origin) is left for the SDK to refuse."""
    if sent.url.path != "/.well-known/oauth-authorization-server" or answer.status_code != 200:
        return answer
    await answer.aread()
    try:
        metadata = json.loads(answer.content)
    except ValueError:
        return answer
    issuer = metadata.get("issuer") if isinstance(metadata, dict) else None
    origin = _origin(server_url)
    if not isinstance(issuer, str) or _origin(issuer) != origin or _origin(str(sent.url)) != origin:
        return answer
    parts = urlsplit(issuer)
    if parts.path in ("", "/"):
        return answer
    metadata["issuer"] = f"{parts.scheme}://{parts.netloc}"
    return httpx2.Response(
        answer.status_code,
        headers={"content-type": "application/json"},
        json=metadata,
        request=sent,
    )


class _Redirects:
    """The two halves of the browser step for the SDK: `send` starts the loopback listener and
    hands the authorization URL to `authorize`; `receive` waits for the redirect."""

    def __init__(self, server: str, port: int, authorize: Authorize | None, timeout_s: float):
        self.server = server
        self.port = port
        self._authorize = authorize
        self._timeout_s = timeout_s
        self._listener: RedirectListener | None = None
        self.on_login_needed: Callable[[], None] | None = None

    @property
    def uri(self) -> str:
        return f"http://{HOST}:{self.port}{CALLBACK_PATH}"

    async def send(self, url: str) -> None:
        if self._authorize is None:
            if self.on_login_needed is not None:
                self.on_login_needed()
            raise LoginRequired(self.server)
        state = parse_qs(urlsplit(url).query).get("state", [""])[0]
        listener = RedirectListener(self.port)
        try:
            await listener.start()
        except OSError as exc:
            raise OSError(
                f"cannot listen for the login redirect on {HOST}:{self.port}: {exc.strerror}"
            ) from None
        listener.expect(state)
        self._listener = listener
        try:
            await self._authorize(self.server, url)
        except BaseException:
            await listener.close()
            self._listener = None
            raise

    async def receive(self) -> AuthorizationCodeResult:
        listener, self._listener = self._listener, None
        if listener is None:
            raise RuntimeError("no authorization is under way")
        try:
            redirect = await listener.wait(self._timeout_s)
        except TimeoutError:
            raise TimeoutError(
                f"no login redirect came back within {self._timeout_s:g} s"
            ) from None
        return AuthorizationCodeResult(code=redirect.code, state=redirect.state, iss=redirect.iss)


def free_port() -> int:
    """A port of 127.0.0.1 free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _stored_port(storage: TokenFile) -> int | None:
    """The port of the loopback redirect URI the stored client was registered with."""
    client = storage._read().get("client") or {}
    for uri in client.get("redirect_uris") or ():
        parts = urlsplit(str(uri))
        if parts.hostname == HOST and parts.port:
            return parts.port
    return None


def build_auth(
    spec: McpServerSpec,
    storage: TokenFile,
    *,
    authorize: Authorize | None,
    on_login_needed: Callable[[], None] | None = None,
    timeout_s: float = LOGIN_TIMEOUT_S,
) -> httpx2.Auth:
    """The auth of `spec`'s requests (its `oauth` must be set)."""
    oauth = spec.oauth
    assert oauth is not None and spec.url is not None
    scope = " ".join(oauth.scopes) or None
    if oauth.grant == "client_credentials":
        return _machine_auth(spec.url, oauth, storage, scope)
    if oauth.grant == "identity_assertion":
        from soong_agent.adapters.mcp.auth.enterprise import enterprise_auth

        return enterprise_auth(spec.url, oauth, storage, scope)
    port = oauth.redirect_port or _stored_port(storage) or free_port()
    redirects = _Redirects(spec.name, port, authorize, timeout_s)
    redirects.on_login_needed = on_login_needed
    redirect_uri = AnyUrl(redirects.uri)
    fixed: OAuthClientInformationFull | None = None
    if oauth.client_id is not None:
        method = oauth.token_endpoint_auth_method or (
            "client_secret_basic" if oauth.client_secret else "none"
        )
        fixed = OAuthClientInformationFull(
            client_id=oauth.client_id,
            client_secret=oauth.client_secret,
            redirect_uris=[redirect_uri],
            token_endpoint_auth_method=method,
            grant_types=["authorization_code", "refresh_token"],
            scope=scope,
        )
    metadata = OAuthClientMetadata(
        client_name="soong-agent",
        redirect_uris=[redirect_uri],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
        scope=scope,
    )
    return LoginProvider(
        server_url=spec.url,
        client_metadata=metadata,
        storage=storage,
        redirect=redirects,
        client_metadata_url=oauth.client_metadata_url,
        fixed_client=fixed,
        scopes=oauth.scopes,
    )


class _MachineProvider(_StoredExpiry, ClientCredentialsOAuthProvider):
    """Client credentials with a client secret."""


class _JwtMachineProvider(_StoredExpiry, PrivateKeyJWTOAuthProvider):
    """Client credentials with a signed assertion (`private_key_jwt`)."""


def _machine_auth(url: str, oauth: McpOAuth, storage: TokenFile, scope: str | None) -> httpx2.Auth:
    assert oauth.client_id is not None
    with warnings.catch_warnings():
        # the SDK warns when no issuer is pinned; leaving it out is the user's choice here
        warnings.simplefilter("ignore")
        if oauth.private_key is not None:
            params = SignedJWTParameters(
                issuer=oauth.client_id,
                subject=oauth.client_id,
                signing_key=oauth.private_key,
                signing_algorithm=oauth.signing_algorithm,
            )
            return _JwtMachineProvider(
                server_url=url,
                storage=storage,
                client_id=oauth.client_id,
                assertion_provider=params.create_assertion_provider(),
                scope=scope,
                issuer=oauth.issuer,
            )
        assert oauth.client_secret is not None
        method = oauth.token_endpoint_auth_method
        return _MachineProvider(
            server_url=url,
            storage=storage,
            client_id=oauth.client_id,
            client_secret=oauth.client_secret,
            token_endpoint_auth_method=(
                method
                if method in ("client_secret_basic", "client_secret_post")
                else "client_secret_basic"
            ),
            scope=scope,
            issuer=oauth.issuer,
        )


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.netloc or "").lower()
