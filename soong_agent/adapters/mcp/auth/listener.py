"""The loopback redirect listener of an OAuth login (MCP-3, RFC 8252 §7.3).

An HTTP server on 127.0.0.1 that waits for the authorization server's redirect to
`/callback`. It is for one login only: it answers the redirect that carries the expected
`state` (with the code, or with the server's `error`), then closes; a request with another
state, or none, is refused (400) and the listener goes on waiting, so a stray or forged
request can neither end the login nor slip a code in.
"""

from __future__ import annotations

import asyncio
import html
import logging
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)

CALLBACK_PATH = "/callback"
HOST = "127.0.0.1"
_MAX_REQUEST = 16_384


class AuthorizationRefused(Exception):
    """The authorization server redirected back with an error (the user said no, …)."""


@dataclass(frozen=True, slots=True)
class Redirect:
    """What the authorization server sent back: the code, the state, the issuer (RFC 9207)."""

    code: str
    state: str
    iss: str | None = None


class RedirectListener:
    """Listens on `127.0.0.1:port` (0: any free port) for one redirect with `state`."""

    def __init__(self, port: int = 0) -> None:
        self._port = port
        self._server: asyncio.Server | None = None
        self._state: str | None = None
        self._result: asyncio.Future[Redirect] | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the redirect listener is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def redirect_uri(self) -> str:
        return f"http://{HOST}:{self.port}{CALLBACK_PATH}"

    async def start(self) -> None:
        """Bind the port (OSError when it is taken)."""
        self._result = asyncio.get_running_loop().create_future()
        self._server = await asyncio.start_server(self._serve, HOST, self._port)

    def expect(self, state: str) -> None:
        """The state the redirect must carry (from the authorization URL)."""
        self._state = state

    async def wait(self, timeout_s: float) -> Redirect:
        """The redirect, once it came; `TimeoutError` after `timeout_s`,
        `AuthorizationRefused` when the server sent an error. Closes the listener."""
        if self._result is None:
            raise RuntimeError("the redirect listener is not started")
        try:
            return await asyncio.wait_for(asyncio.shield(self._result), timeout_s)
        finally:
            await self.close()

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, body = await self._answer(reader)
            page = f"<!doctype html><title>soong-agent</title><p>{html.escape(body)}</p>".encode()
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n"
                f"Content-Length: {len(page)}\r\nConnection: close\r\n\r\n".encode()
                + page
            )
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            log.debug("redirect listener: a request broke off: %s", exc)
        finally:
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[str, str]:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > _MAX_REQUEST:
            return "431 Request Header Fields Too Large", "Request too large."
        first = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = first.split(" ")
        if len(parts) != 3 or parts[0] != "GET":
            return "405 Method Not Allowed", "Only the authorization redirect is served here."
        target = urlsplit(parts[1])
        if target.path != CALLBACK_PATH:
            return "404 Not Found", "Not found."
        query = {key: values[0] for key, values in parse_qs(target.query).items()}
        result = self._result
        if result is None or result.done():
            return "410 Gone", "This login is over."
        if self._state is None or query.get("state") != self._state:
            log.warning("redirect listener: refused a redirect whose state does not match")
            return "400 Bad Request", "The state does not match this login: refused."
        if "error" in query:
            reason = query["error"]
            if query.get("error_description"):
                reason += f": {query['error_description']}"
            result.set_exception(AuthorizationRefused(reason))
            return "200 OK", f"The authorization server refused: {reason}. You may close this tab."
        code = query.get("code")
        if not code:
            return "400 Bad Request", "The redirect carries no code."
        result.set_result(Redirect(code=code, state=self._state, iss=query.get("iss")))
        return "200 OK", "soong-agent is authorized. You may close this tab."
