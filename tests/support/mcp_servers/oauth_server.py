"""The contract server behind OAuth 2.1, with its own small authorization server, on one
loopback port the OS picks: no Node.js, no network. Usage:

    oauth_server.py --log FILE [--ttl SECONDS] [--client ID:SECRET] [--transport http|sse]

It prints its port on one line once it listens. Served:

- ``/.well-known/oauth-protected-resource/mcp`` (RFC 9728) naming this origin as the
  authorization server; ``/.well-known/oauth-authorization-server`` (RFC 8414);
- ``/register`` (RFC 7591: public clients only), ``/authorize`` (PKCE S256 required, the
  redirect URI must be a registered one, the ``resource`` must be this server's ``/mcp``;
  approves at once and redirects with the code), ``/token`` (authorization_code with the
  verifier checked, refresh_token rotating the refresh token, client_credentials for the
  ``--client`` given, in HTTP Basic);
- ``/mcp`` (streamable HTTP) or ``/sse`` + ``/messages/`` (SSE): the contract server, every
  request needing a live bearer token, else 401 with a ``WWW-Authenticate: Bearer`` challenge;
- ``POST /admin/expire``: every access token issued so far stops working (the refresh tokens
  do not), so a test can see a client refresh on 401.

Every step is one JSON line in the log (grant types, what was checked, the Authorization
headers it was sent, never shortened), so a test can assert what the client did.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import secrets
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio
import uvicorn
from contract_server import app as mcp_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route


class AuthServer:
    def __init__(self, log: Path, ttl: int, client: tuple[str, str] | None) -> None:
        self.log_path = log
        self.ttl = ttl
        self.machine = client
        self.base = ""
        self.endpoint = "/mcp"
        self.clients: dict[str, list[str]] = {}
        self.codes: dict[str, dict[str, Any]] = {}
        self.access: dict[str, float] = {}
        self.refresh: dict[str, str] = {}

    def log(self, **entry: Any) -> None:
        with self.log_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")

    @property
    def resource(self) -> str:
        return f"{self.base}{self.endpoint}"

    async def prm(self, request: Request) -> Response:
        self.log(step="prm")
        return JSONResponse(
            {
                "resource": self.resource,
                "authorization_servers": [self.base],
                "scopes_supported": ["mcp"],
                "bearer_methods_supported": ["header"],
            }
        )

    async def asm(self, request: Request) -> Response:
        self.log(step="asm")
        return JSONResponse(
            {
                "issuer": self.base,
                "authorization_endpoint": f"{self.base}/authorize",
                "token_endpoint": f"{self.base}/token",
                "registration_endpoint": f"{self.base}/register",
                "response_types_supported": ["code"],
                "grant_types_supported": [
                    "authorization_code",
                    "refresh_token",
                    "client_credentials",
                ],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none", "client_secret_basic"],
                "scopes_supported": ["mcp"],
            }
        )

    async def register(self, request: Request) -> Response:
        body = await request.json()
        uris = [str(u) for u in body.get("redirect_uris") or []]
        if not uris or not all(u.startswith("http://127.0.0.1:") for u in uris):
            self.log(step="register", refused="redirect_uris")
            return JSONResponse({"error": "invalid_redirect_uri"}, status_code=400)
        client_id = f"client-{secrets.token_hex(4)}"
        self.clients[client_id] = uris
        self.log(step="register", client_id=client_id, redirect_uris=uris)
        return JSONResponse(
            {
                "client_id": client_id,
                "redirect_uris": uris,
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
            },
            status_code=201,
        )

    async def authorize(self, request: Request) -> Response:
        q = request.query_params
        problems = []
        if q.get("client_id") not in self.clients:
            problems.append("client_id")
        elif q.get("redirect_uri") not in self.clients[q["client_id"]]:
            problems.append("redirect_uri")
        if q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            problems.append("pkce")
        if q.get("resource") != self.resource:
            problems.append("resource")
        if q.get("response_type") != "code":
            problems.append("response_type")
        self.log(step="authorize", problems=problems, scope=q.get("scope"))
        if problems:
            return JSONResponse({"error": "invalid_request", "problems": problems}, 400)
        code = secrets.token_urlsafe(16)
        self.codes[code] = {
            "client_id": q["client_id"],
            "challenge": q["code_challenge"],
            "redirect_uri": q["redirect_uri"],
        }
        target = q["redirect_uri"] + "?" + urlencode({"code": code, "state": q.get("state", "")})
        return RedirectResponse(target, status_code=302)

    def _issue(self, kind: str) -> Response:
        access = f"at-{secrets.token_urlsafe(24)}"
        refresh = f"rt-{secrets.token_urlsafe(24)}"
        self.access[access] = time.time() + self.ttl
        self.refresh[refresh] = access
        body: dict[str, Any] = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.ttl,
            "scope": "mcp",
        }
        if kind != "client_credentials":
            body["refresh_token"] = refresh
        return JSONResponse(body)

    async def token(self, request: Request) -> Response:
        form = await request.form()
        grant = form.get("grant_type")
        if grant == "authorization_code":
            entry = self.codes.pop(str(form.get("code")), None)
            verifier = str(form.get("code_verifier") or "")
            digest = hashlib.sha256(verifier.encode()).digest()
            challenge = base64.urlsafe_b64encode(digest).decode().rstrip("=")
            problems = []
            if entry is None:
                problems.append("code")
            else:
                if challenge != entry["challenge"]:
                    problems.append("code_verifier")
                if form.get("redirect_uri") != entry["redirect_uri"]:
                    problems.append("redirect_uri")
            if form.get("resource") != self.resource:
                problems.append("resource")
            self.log(step="token", grant=grant, problems=problems)
            if problems:
                return JSONResponse({"error": "invalid_grant", "problems": problems}, 400)
            return self._issue(grant)
        if grant == "refresh_token":
            old = str(form.get("refresh_token"))
            ok = old in self.refresh
            self.log(step="token", grant=grant, problems=[] if ok else ["refresh_token"])
            if not ok:
                return JSONResponse({"error": "invalid_grant"}, 400)
            del self.refresh[old]
            return self._issue(grant)
        if grant == "client_credentials":
            header = request.headers.get("authorization", "")
            expected = None
            if self.machine is not None:
                pair = f"{self.machine[0]}:{self.machine[1]}".encode()
                expected = "Basic " + base64.b64encode(pair).decode()
            ok = expected is not None and header == expected
            self.log(step="token", grant=grant, problems=[] if ok else ["client"])
            if not ok:
                return JSONResponse({"error": "invalid_client"}, 401)
            return self._issue(grant)
        self.log(step="token", grant=grant, problems=["grant_type"])
        return JSONResponse({"error": "unsupported_grant_type"}, 400)

    async def expire(self, request: Request) -> Response:
        for token in self.access:
            self.access[token] = 0.0
        self.log(step="expire")
        return JSONResponse({"expired": len(self.access)})


def build(auth: AuthServer, transport: str) -> Any:
    oauth = Starlette(
        routes=[
            Route("/.well-known/oauth-protected-resource/mcp", auth.prm),
            Route("/.well-known/oauth-protected-resource/sse", auth.prm),
            Route("/.well-known/oauth-authorization-server", auth.asm),
            Route("/register", auth.register, methods=["POST"]),
            Route("/authorize", auth.authorize),
            Route("/token", auth.token, methods=["POST"]),
            Route("/admin/expire", auth.expire, methods=["POST"]),
        ]
    )
    served = mcp_app.streamable_http_app() if transport == "http" else mcp_app.sse_app()
    paths = {route.path for route in oauth.routes}  # type: ignore[attr-defined]

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await served(scope, receive, send)
            return
        if scope["path"] in paths:
            await oauth(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = headers.get(b"authorization", b"").decode()
        token = given[7:] if given.startswith("Bearer ") else ""
        live = auth.access.get(token, 0.0) > time.time()
        auth.log(
            step="mcp", method=scope["method"], path=scope["path"], authorization=given, ok=live
        )
        if not live:
            meta = f"{auth.base}/.well-known/oauth-protected-resource{auth.endpoint}"
            challenge = f'Bearer error="invalid_token", resource_metadata="{meta}"'
            response = JSONResponse(
                {"error": "invalid_token"},
                status_code=401,
                headers={"WWW-Authenticate": challenge},
            )
            await response(scope, receive, send)
            return
        await served(scope, receive, send)

    return asgi


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--ttl", type=int, default=3600)
    parser.add_argument("--client")
    parser.add_argument("--transport", default="http", choices=["http", "sse"])
    args = parser.parse_args(argv)
    client = tuple(args.client.split(":", 1)) if args.client else None
    auth = AuthServer(Path(args.log), args.ttl, client)  # type: ignore[arg-type]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    auth.base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    auth.endpoint = "/mcp" if args.transport == "http" else "/sse"
    server = uvicorn.Server(uvicorn.Config(build(auth, args.transport), log_level="warning"))
    sys.stdout.write(f"{sock.getsockname()[1]}\n")
    sys.stdout.flush()
    anyio.run(server.serve, [sock])


if __name__ == "__main__":
    main(sys.argv[1:])
