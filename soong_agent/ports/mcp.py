"""MCP servers as the runtime sees them (MCP-1): their tools, their calls, their health.

`McpHub` is the one object that owns every configured server of a runtime: it starts them
concurrently, keeps each one's tool list (from the discovery cache first, then live), restarts a
crashed stdio server with backoff, and reports every change of a server's state to its
listeners. Nothing of the `mcp` SDK crosses this port: tools, results and states are plain data.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

ServerState = Literal["starting", "ready", "failed", "crashed", "restarting", "stopped"]
"""`starting`: being launched and initialised; `ready`: its tools are known and callable;
`failed`: it could not start or answered garbage (not retried); `crashed`: a running server
died (a restart follows while attempts remain); `restarting`: waiting `backoff_s` before the
next attempt; `stopped`: closed by the runtime."""

Transport = Literal["stdio", "http", "sse"]


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool a server offers, under the server's own name for it."""

    server: str
    name: str
    description: str
    input_schema: Mapping[str, Any]
    read_only: bool | None = None
    """The server's `readOnlyHint` annotation, when it gave one."""


@dataclass(frozen=True, slots=True)
class McpContent:
    """One piece of a call's result: text, an image (base64 `data` with its `mime_type`), or a
    resource (its `uri`, and its text when it is text)."""

    kind: Literal["text", "image", "audio", "resource"]
    text: str = ""
    mime_type: str | None = None
    data: str | None = None
    uri: str | None = None


@dataclass(frozen=True, slots=True)
class McpCallResult:
    """What a tool call returned; `is_error` is the server's own `isError`."""

    content: tuple[McpContent, ...]
    is_error: bool = False
    structured: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class McpResource:
    """One resource a server lists."""

    server: str
    uri: str
    name: str
    description: str = ""
    mime_type: str | None = None


@dataclass(frozen=True, slots=True)
class ServerHealth:
    """A server's state at one moment, with what explains it.

    `detail` is one line for people (the failure's reason, "3 tools", …). `tool_count` and
    `version` are set once ready; `exit_code` and `stderr_tail` once crashed or failed;
    `attempt` and `backoff_s` while restarting; `startup_ms` is how long the last start took.
    `from_cache`: the tool list is the discovery cache's, the live one has not arrived yet.
    """

    server: str
    state: ServerState
    transport: Transport
    detail: str = ""
    tool_count: int | None = None
    version: str | None = None
    exit_code: int | None = None
    stderr_tail: tuple[str, ...] = ()
    attempt: int | None = None
    backoff_s: float | None = None
    startup_ms: float | None = None
    from_cache: bool = False


class McpError(Exception):
    """A call could not be made or did not finish: the server is down, failed, unknown, the
    call timed out, or the server broke the protocol. The message says which, in one line."""


HealthListener = Callable[[ServerHealth], None]


@dataclass(frozen=True, slots=True)
class ElicitationRequest:
    """A server's `elicitation/create` (MCP-4): in `form` mode the answer's fields are
    described by `schema` (a flat JSON schema of strings, numbers, booleans and enums); in `url`
    mode the user is asked to open `url` (nothing is sent back but the action)."""

    server: str
    message: str
    mode: Literal["form", "url"]
    schema: Mapping[str, Any] | None = None
    url: str | None = None


@dataclass(frozen=True, slots=True)
class ElicitationAnswer:
    """What the user said: `accept` (with `content` in form mode), `decline` or `cancel`."""

    action: Literal["accept", "decline", "cancel"]
    content: Mapping[str, Any] | None = None


Elicitor = Callable[[ElicitationRequest], Awaitable[ElicitationAnswer]]
"""Puts a server's question to the user."""


@dataclass(frozen=True, slots=True)
class SamplingRequest:
    """A server's `sampling/createMessage` (MCP-4): `messages` as (role, text) pairs."""

    server: str
    messages: tuple[tuple[str, str], ...]
    system_prompt: str | None = None
    max_tokens: int = 1024
    temperature: float | None = None


@dataclass(frozen=True, slots=True)
class SamplingAnswer:
    """The model's answer to a sampling request."""

    text: str
    model: str
    stop_reason: str = "endTurn"


class SamplingDeclined(Exception):
    """A sampling request is not answered: the message says why in one line (a deny rule,
    the user said no, nobody to ask, no run under way); the server gets it as the error."""


Sampler = Callable[[SamplingRequest], Awaitable[SamplingAnswer | None]]
"""Answers a sampling request once the user approved it; None, or `SamplingDeclined` with
the reason: declined."""


@runtime_checkable
class McpHub(Protocol):
    """Every MCP server of one runtime."""

    @property
    def servers(self) -> Sequence[str]:
        """The configured, enabled servers, in configuration order."""
        ...

    def start(self) -> None:
        """Start every server that is not running yet, concurrently, in the background (the
        call returns at once; idempotent). Needs a running event loop."""
        ...

    async def wait_ready(self, timeout_s: float) -> None:
        """Return once every server is ready, failed, or has a tool list from the cache, or
        once `timeout_s` has passed, whichever comes first (servers still starting go on in
        the background and join when ready)."""
        ...

    def tools(self) -> list[McpTool]:
        """Every tool known now: live lists, else cached ones (a server that failed has none)."""
        ...

    @property
    def generation(self) -> int:
        """Grows whenever `tools()` may have changed (a server became ready, a list changed)."""
        ...

    def health(self) -> list[ServerHealth]:
        """The current state of every server."""
        ...

    def add_listener(self, listener: HealthListener) -> Callable[[], None]:
        """Call `listener` on every state change from now on; returns the function that
        removes it. Listeners run on the event loop and must not block."""
        ...

    async def call_tool(
        self, server: str, tool: str, arguments: Mapping[str, Any], *, timeout_s: float
    ) -> McpCallResult:
        """Call `tool` of `server` (waiting up to the start-up timeout for a server still
        starting). Raises `McpError` when it cannot be done or `timeout_s` passes."""
        ...

    async def list_resources(self, server: str, *, timeout_s: float) -> list[McpResource]:
        """The server's resources (`McpError` when it has none or is down)."""
        ...

    async def read_resource(self, server: str, uri: str, *, timeout_s: float) -> McpCallResult:
        """One resource's content, as a result."""
        ...

    def has_resources(self, server: str) -> bool:
        """Whether the server announced the resources capability."""
        ...

    async def aclose(self) -> None:
        """Stop every server (a stdio server's process group is killed if it does not exit)."""
        ...


OAuthGrant = Literal["authorization_code", "client_credentials", "identity_assertion"]
TokenAuthMethod = Literal["client_secret_basic", "client_secret_post", "private_key_jwt", "none"]


@dataclass(frozen=True, slots=True)
class McpOAuth:
    """How the client authorizes with an HTTP or SSE server (MCP-3), from `mcp.json`'s
    `oauth` object. Every field may be left out: then the client registers itself (RFC 7591)
    or uses its client ID metadata document, and asks for the scopes the server names.

    `client_secret` is the value of the variable `client_secret_env` (a secret: never shown);
    `private_key` likewise for `private_key_jwt` (the PEM of `private_key_env`).

    ``identity_assertion`` (SEP-990, enterprise-managed authorization): the user's ID token from
    the enterprise identity provider (`id_token`, from `id_token_env`) is exchanged at the IdP's
    token endpoint for an identity assertion grant (RFC 8693), which the configured authorization
    server (`issuer`) takes for an access token (RFC 7523)."""

    grant: OAuthGrant = "authorization_code"
    client_id: str | None = None
    client_secret_env: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    private_key_env: str | None = None
    private_key: str | None = field(default=None, repr=False)
    signing_algorithm: str = "RS256"
    token_endpoint_auth_method: TokenAuthMethod | None = None
    scopes: tuple[str, ...] = ()
    client_metadata_url: str | None = None
    redirect_port: int | None = None
    issuer: str | None = None
    idp_token_endpoint: str | None = None
    idp_client_id: str | None = None
    idp_client_secret_env: str | None = None
    idp_client_secret: str | None = field(default=None, repr=False)
    id_token_env: str | None = None
    id_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """One server of `mcp.json`, validated. `env` holds literal values and those copied from
    the agent's environment (`env_from`); it and `headers` are secrets: never shown."""

    name: str
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    oauth: McpOAuth | None = None
    """How to authorize with an HTTP or SSE server (None: never; a stdio server has none)."""

    def secrets(self) -> tuple[str, ...]:
        """Every secret value of the spec: env values, header values, the OAuth client secret
        and private key."""
        found = [*self.env.values(), *self.headers.values()]
        if self.oauth is not None:
            oauth = self.oauth
            found += [
                v
                for v in (
                    oauth.client_secret,
                    oauth.private_key,
                    oauth.idp_client_secret,
                    oauth.id_token,
                )
                if v
            ]
        return tuple(found)

    def fingerprint(self) -> str:
        """A digest of everything that defines the server (for the discovery cache key);
        the secret values enter only through their hash."""
        import hashlib
        import json

        text = json.dumps(
            {
                "name": self.name,
                "transport": self.transport,
                "command": self.command,
                "args": list(self.args),
                "url": self.url,
                "env": sorted(self.env.items()),
                "headers": sorted(self.headers.items()),
                "cwd": self.cwd,
                "oauth": None
                if self.oauth is None
                else [self.oauth.grant, self.oauth.client_id, list(self.oauth.scopes)],
            },
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:32]
