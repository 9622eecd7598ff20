"""Reads the MCP servers of `${SOONG_AGENT_HOME}/mcp.json` (MCP-1); a project's file is never read.

The file holds `{"mcp_servers": {"<name>": {...}}}`. The key `mcpServers` (Claude Desktop and
Claude Code files) is accepted too: there `type` may stand for `transport`. In both, an entry
with `command` and no transport is a stdio server, one with `url` and no transport an HTTP one.

    transport   "stdio" | "http" (streamable HTTP) | "sse"
    command     stdio: the program to run (looked up on PATH)
    args        stdio: its arguments
    cwd         stdio: its working directory
    env         stdio: variables given to it, literal values
    env_from    stdio: names of variables copied from the agent's environment
    url         http/sse: the endpoint, http:// or https://
    headers     http/sse: headers sent with every request
    oauth       http/sse: how to authorize (MCP-3): false (never), or an object of
                grant ("authorization_code" | "client_credentials"), client_id,
                client_secret_env, private_key_env, signing_algorithm,
                token_endpoint_auth_method, scopes, client_metadata_url, redirect_port,
                issuer. Left out, a server without an Authorization header may ask for an
                OAuth login (a registered client is made on the fly)

Every mistake is a `ConfigError` of one line naming the file, the server and the field
(`/home/me/.soong-agent/mcp.json: mcp_servers.git.url: …`). Values of `env`, `env_from` and
`headers` are secrets: no message quotes them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from soong_agent.adapters.mcp.oauth_checks import check_identity_assertion, in_clear
from soong_agent.ports.defaults import no_entries, no_items
from soong_agent.ports.errors import ConfigError
from soong_agent.ports.mcp import McpOAuth, McpServerSpec, Transport

SERVER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
"""What a server may be called: it becomes part of tool names (`mcp__<server>__<tool>`)."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_CLAUDE_IGNORED = frozenset({"description", "timeout", "alwaysAllow", "autoApprove"})
"""Fields of Claude Desktop / Claude Code / Cline entries that mean nothing here and are
ignored (under `mcpServers` only). `disabled: true` is honoured: the server is left out."""

_TRANSPORTS: tuple[Transport, ...] = ("stdio", "http", "sse")


class _Entry(BaseModel):
    """One server entry as written; checked further by `_spec`."""

    # built when an mcp.json is first read, not at import (most homes have none)
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    transport: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=no_items)
    url: str | None = None
    env: dict[str, str] = Field(default_factory=no_entries)
    env_from: list[str] = Field(default_factory=no_items)
    headers: dict[str, str] = Field(default_factory=no_entries)
    cwd: str | None = None
    oauth: bool | dict[str, Any] | None = None


class _OAuthEntry(BaseModel):
    """An `oauth` object as written."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    grant: Literal["authorization_code", "client_credentials", "identity_assertion"] = (
        "authorization_code"
    )
    client_id: str | None = None
    client_secret_env: str | None = None
    private_key_env: str | None = None
    signing_algorithm: str = "RS256"
    token_endpoint_auth_method: (
        Literal["client_secret_basic", "client_secret_post", "private_key_jwt", "none"] | None
    ) = None
    scopes: list[str] = Field(default_factory=no_items)
    client_metadata_url: str | None = None
    redirect_port: int | None = Field(default=None, ge=1, le=65535)
    issuer: str | None = None
    idp_token_endpoint: str | None = None
    idp_client_id: str | None = None
    idp_client_secret_env: str | None = None
    id_token_env: str | None = None


def load_mcp_servers(home: Path, disabled: Sequence[str] = ()) -> list[McpServerSpec]:
    """The servers of `home/mcp.json`, in file order, less those named in `disabled`.

    A missing file means no servers. Raises `ConfigError` (one line: file, server, field) for a
    file that cannot be read, is not JSON, or declares a server wrongly; a name in `env_from`
    that is not set in the environment is such an error too.
    """
    path = home / "mcp.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except IsADirectoryError:
        raise ConfigError(f"{path}: cannot be read: it is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    return parse_mcp_servers(raw, source=str(path), disabled=disabled, environ=os.environ)


def oauth_secret_names(home: Path) -> set[str]:
    """The names of the variables `home/mcp.json` takes OAuth secrets from
    (`oauth.client_secret_env`, `oauth.private_key_env`): their values are secrets the
    runtime-wide scrubber hides and tools never get. Read leniently: a file that is missing or
    cannot be read names none (`load_mcp_servers` reports what is wrong with it)."""
    try:
        raw = json.loads((home / "mcp.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return set()
    names: set[str] = set()
    if not isinstance(raw, dict):
        return names
    for key in ("mcp_servers", "mcpServers"):
        servers = raw.get(key)
        if not isinstance(servers, dict):
            continue
        for entry in servers.values():
            oauth = entry.get("oauth") if isinstance(entry, dict) else None
            if not isinstance(oauth, dict):
                continue
            for field_name in ("client_secret_env", "private_key_env"):
                name = oauth.get(field_name)
                if isinstance(name, str) and _ENV_NAME.fullmatch(name):
                    names.add(name)
    return names


def parse_mcp_servers(
    raw: object,
    *,
    source: str,
    disabled: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> list[McpServerSpec]:
    """The servers of an already parsed `mcp.json` document (`source` names it in errors)."""
    env_source = os.environ if environ is None else environ
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a JSON object, found {_kind(raw)}")
    unknown = sorted(set(raw) - {"mcp_servers", "mcpServers"})
    if unknown:
        raise ConfigError(
            f"{source}: {unknown[0]}: unknown key (expected mcp_servers or mcpServers)"
        )
    specs: list[McpServerSpec] = []
    seen: set[str] = set()
    for key in ("mcp_servers", "mcpServers"):
        if key not in raw:
            continue
        servers = raw[key]
        if not isinstance(servers, dict):
            raise ConfigError(
                f"{source}: {key}: expected an object of servers, found {_kind(servers)}"
            )
        for name, entry in servers.items():
            where = f"{source}: {key}.{name}"
            if not SERVER_NAME.fullmatch(name):
                raise ConfigError(
                    f"{where}: bad server name: use lower-case letters, digits, '_' and '-', "
                    "starting with a letter or digit"
                )
            if name in seen:
                raise ConfigError(f"{where}: the server is declared twice")
            seen.add(name)
            spec = _spec(name, entry, where=where, claude=key == "mcpServers", environ=env_source)
            if spec is not None and name not in disabled:
                specs.append(spec)
    return specs


def _spec(
    name: str, entry: object, *, where: str, claude: bool, environ: Mapping[str, str]
) -> McpServerSpec | None:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected an object, found {_kind(entry)}")
    fields = dict(entry)
    if claude:
        if fields.pop("disabled", False) is True:
            return None
        for ignored in _CLAUDE_IGNORED:
            fields.pop(ignored, None)
        if "type" in fields:
            if "transport" in fields:
                raise ConfigError(f"{where}.type: give type or transport, not both")
            fields["transport"] = fields.pop("type")
    try:
        parsed = _Entry.model_validate(fields)
    except ValidationError as exc:
        raise ConfigError(f"{where}.{_pydantic_line(exc)}") from None
    transport = _transport(parsed, where=where)
    if transport == "stdio":
        for field_name in ("url", "headers", "oauth"):
            if field_name in fields:
                raise ConfigError(f"{where}.{field_name}: not used by a stdio server")
        if not parsed.command or not parsed.command.strip():
            raise ConfigError(f"{where}.command: required for a stdio server")
        env = dict(parsed.env)
        for var in parsed.env:
            if not _ENV_NAME.fullmatch(var):
                raise ConfigError(f"{where}.env: {var!r} is not a valid variable name")
        for var in parsed.env_from:
            if not _ENV_NAME.fullmatch(var):
                raise ConfigError(f"{where}.env_from: {var!r} is not a valid variable name")
            if var not in environ:
                raise ConfigError(f"{where}.env_from: environment variable {var} is not set")
            env[var] = environ[var]
        return McpServerSpec(
            name=name,
            transport="stdio",
            command=parsed.command,
            args=tuple(parsed.args),
            env=env,
            cwd=parsed.cwd,
        )
    for field_name in ("command", "args", "env", "env_from", "cwd"):
        if field_name in fields:
            raise ConfigError(f"{where}.{field_name}: not used by an {transport} server")
    if not parsed.url:
        raise ConfigError(f"{where}.url: required for an {transport} server")
    if not re.match(r"https?://[^/\s]+", parsed.url):
        raise ConfigError(f"{where}.url: expected an http:// or https:// URL")
    oauth = None
    if not in_clear(parsed.url):
        oauth = _oauth(parsed, where=f"{where}.oauth", environ=environ)
    elif parsed.oauth not in (None, False):  # tokens and secrets would travel unencrypted
        raise ConfigError(
            f"{where}.oauth: needs an https:// URL (plain http only to this machine), not "
            f"{parsed.url}"
        )
    return McpServerSpec(
        name=name,
        transport=transport,
        url=parsed.url,
        headers=dict(parsed.headers),
        oauth=oauth,
    )


def _oauth(entry: _Entry, *, where: str, environ: Mapping[str, str]) -> McpOAuth | None:
    """The server's OAuth settings: none when `oauth` is false, or when it is left out and the
    entry sends its own Authorization header; the defaults when it is left out or true."""
    raw = entry.oauth
    if raw is False:
        return None
    if raw is None or raw is True:
        has_auth = any(key.lower() == "authorization" for key in entry.headers)
        return None if has_auth and raw is None else McpOAuth()
    try:
        parsed = _OAuthEntry.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{where}.{_pydantic_line(exc)}") from None
    secret = _from_env(parsed.client_secret_env, f"{where}.client_secret_env", environ)
    key = _from_env(parsed.private_key_env, f"{where}.private_key_env", environ)
    method = parsed.token_endpoint_auth_method
    if method == "private_key_jwt" and key is None:
        raise ConfigError(f"{where}.private_key_env: required for private_key_jwt")
    if parsed.grant == "client_credentials":
        if not parsed.client_id:
            raise ConfigError(f"{where}.client_id: required for the client_credentials grant")
        if secret is None and key is None:
            raise ConfigError(
                f"{where}: the client_credentials grant needs client_secret_env or private_key_env"
            )
    if (secret is not None or key is not None) and not parsed.client_id:
        raise ConfigError(f"{where}.client_id: required with a client secret or key")
    idp_secret = _from_env(parsed.idp_client_secret_env, f"{where}.idp_client_secret_env", environ)
    id_token = _from_env(parsed.id_token_env, f"{where}.id_token_env", environ)
    if parsed.grant == "identity_assertion":
        check_identity_assertion(parsed, secret, where)
    url = parsed.client_metadata_url
    if url is not None and not re.match(r"https://[^/\s]+/\S+", url):
        raise ConfigError(f"{where}.client_metadata_url: expected an https:// URL with a path")
    for scope in parsed.scopes:
        if not scope or any(ch.isspace() for ch in scope):
            raise ConfigError(f"{where}.scopes: {scope!r} is not a scope (no spaces)")
    return McpOAuth(
        grant=parsed.grant,
        client_id=parsed.client_id,
        client_secret_env=parsed.client_secret_env,
        client_secret=secret,
        private_key_env=parsed.private_key_env,
        private_key=key,
        signing_algorithm=parsed.signing_algorithm,
        token_endpoint_auth_method=method,
        scopes=tuple(parsed.scopes),
        client_metadata_url=url,
        redirect_port=parsed.redirect_port,
        issuer=parsed.issuer,
        idp_token_endpoint=parsed.idp_token_endpoint,
        idp_client_id=parsed.idp_client_id,
        idp_client_secret_env=parsed.idp_client_secret_env,
        idp_client_secret=idp_secret,
        id_token_env=parsed.id_token_env,
        id_token=id_token,
    )


def _from_env(name: str | None, where: str, environ: Mapping[str, str]) -> str | None:
    if name is None:
        return None
    if not _ENV_NAME.fullmatch(name):
        raise ConfigError(f"{where}: {name!r} is not a valid variable name")
    value = environ.get(name)
    if not value:
        raise ConfigError(f"{where}: environment variable {name} is not set")
    return value


def _transport(entry: _Entry, *, where: str) -> Transport:
    """The entry's transport; when it names none, stdio for a `command` and (streamable)
    HTTP for a `url`, in either file shape."""
    given = entry.transport
    field_name = "transport"
    if given is None:
        if entry.command is not None:
            return "stdio"
        if entry.url is not None:
            return "http"
        raise ConfigError(
            f"{where}: give a command (a stdio server) or a url (an http or sse server)"
        )
    if given in ("ws", "websocket"):
        raise ConfigError(
            f"{where}.{field_name}: the {given} transport is not supported (use stdio, http or sse)"
        )
    for known in _TRANSPORTS:
        if given == known:
            return known
    raise ConfigError(f"{where}.{field_name}: expected one of stdio, http, sse, found {given!r}")


def _pydantic_line(exc: ValidationError) -> str:
    """`field: problem` for the first error, without the input value (it may be a secret)."""
    error = exc.errors(include_input=False, include_url=False)[0]
    location = ".".join(str(part) for part in error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{location}: unknown field"
    message: str = error["msg"]
    return f"{location}: {message}"


def _kind(value: Any) -> str:
    names: dict[type, Literal["an object", "an array", "a string", "a number", "a boolean"]] = {
        dict: "an object",
        list: "an array",
        str: "a string",
        int: "a number",
        float: "a number",
        bool: "a boolean",
    }
    if value is None:
        return "null"
    return names.get(type(value), type(value).__name__)
