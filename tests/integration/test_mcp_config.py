"""`load_mcp_servers`: `${home}/mcp.json` files on disk, both shapes (ours and Claude's), and the
one-line errors naming file, server and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from soong_agent.adapters.mcp import load_mcp_servers, parse_mcp_servers
from soong_agent.ports.errors import ConfigError
from soong_agent.ports.mcp import McpOAuth, McpServerSpec


def _write(home: Path, document: Any) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "mcp.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def _error(home: Path, document: Any, disabled: tuple[str, ...] = ()) -> str:
    path = _write(home, document)
    with pytest.raises(ConfigError) as caught:
        load_mcp_servers(home, disabled)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message[len(f"{path}: ") :]


def test_a_missing_file_means_no_servers(tmp_path: Path) -> None:
    assert load_mcp_servers(tmp_path, []) == []


def test_every_field_of_our_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_TOKEN", "from-the-environment")
    _write(
        tmp_path,
        {
            "mcp_servers": {
                "git": {
                    "transport": "stdio",
                    "command": "uvx",
                    "args": ["mcp-server-git", "--repository", "."],
                    "env": {"LOG": "debug"},
                    "env_from": ["GIT_TOKEN"],
                    "cwd": "/tmp",
                },
                "remote": {
                    "transport": "http",
                    "url": "https://example.com/mcp",
                    "headers": {"Authorization": "Bearer x"},
                },
                "events": {"transport": "sse", "url": "http://127.0.0.1:3001/sse"},
            }
        },
    )
    assert load_mcp_servers(tmp_path, []) == [
        McpServerSpec(
            name="git",
            transport="stdio",
            command="uvx",
            args=("mcp-server-git", "--repository", "."),
            env={"LOG": "debug", "GIT_TOKEN": "from-the-environment"},
            cwd="/tmp",
        ),
        McpServerSpec(
            name="remote",
            transport="http",
            url="https://example.com/mcp",
            headers={"Authorization": "Bearer x"},
        ),
        McpServerSpec(
            name="events", transport="sse", url="http://127.0.0.1:3001/sse", oauth=McpOAuth()
        ),
    ]


def test_claude_files_are_read_with_their_defaults(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "server-fs"], "env": {"A": "1"}},
                "web": {"url": "https://example.com/mcp"},
                "old": {"type": "sse", "url": "https://example.com/sse", "headers": {"K": "v"}},
                "quiet": {"command": "x", "disabled": True},
                "noted": {"command": "y", "description": "ignored", "alwaysAllow": ["t"]},
            }
        },
    )
    specs = load_mcp_servers(tmp_path, [])
    assert [(s.name, s.transport) for s in specs] == [
        ("fs", "stdio"),
        ("web", "http"),
        ("old", "sse"),
        ("noted", "stdio"),
    ]
    assert specs[0].args == ("-y", "server-fs")
    assert specs[2].headers == {"K": "v"}


def test_disabled_servers_are_left_out(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "mcp_servers": {
                "a": {"transport": "stdio", "command": "a"},
                "b": {"transport": "stdio", "command": "b"},
            }
        },
    )
    assert [s.name for s in load_mcp_servers(tmp_path, ["a", "zzz"])] == ["b"]


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            "{",
            "not valid JSON at line 1, column 2: Expecting property name enclosed in double quotes",
        ),
        ([], "expected a JSON object, found an array"),
        ({"servers": {}}, "servers: unknown key (expected mcp_servers or mcpServers)"),
        ({"mcp_servers": []}, "mcp_servers: expected an object of servers, found an array"),
        ({"mcp_servers": {"Git": {"command": "x"}}}, "mcp_servers.Git: bad server name"),
        ({"mcp_servers": {"git": "x"}}, "mcp_servers.git: expected an object, found a string"),
        (
            {"mcp_servers": {"git": {"args": ["x"]}}},
            "mcp_servers.git: give a command (a stdio server) or a url",
        ),
        (
            {"mcp_servers": {"git": {"transport": "ws", "url": "ws://x"}}},
            "mcp_servers.git.transport: the ws transport is not supported (use stdio, http or sse)",
        ),
        (
            {"mcpServers": {"git": {"type": "ws", "url": "ws://x"}}},
            "mcpServers.git.transport: the ws transport is not supported (use stdio, http or sse)",
        ),
        (
            {"mcp_servers": {"git": {"transport": "grpc"}}},
            "mcp_servers.git.transport: expected one of stdio, http, sse, found 'grpc'",
        ),
        (
            {"mcp_servers": {"git": {"transport": "stdio"}}},
            "mcp_servers.git.command: required for a stdio server",
        ),
        (
            {"mcp_servers": {"git": {"transport": "stdio", "command": "x", "url": "http://a"}}},
            "mcp_servers.git.url: not used by a stdio server",
        ),
        (
            {"mcp_servers": {"git": {"transport": "http"}}},
            "mcp_servers.git.url: required for an http server",
        ),
        (
            {"mcp_servers": {"git": {"transport": "sse", "url": "ftp://example.com"}}},
            "mcp_servers.git.url: expected an http:// or https:// URL",
        ),
        (
            {"mcp_servers": {"git": {"transport": "http", "url": "http://a", "command": "x"}}},
            "mcp_servers.git.command: not used by an http server",
        ),
        (
            {"mcp_servers": {"git": {"transport": "stdio", "command": "x", "port": 1}}},
            "mcp_servers.git.port: unknown field",
        ),
        (
            {"mcp_servers": {"git": {"transport": "stdio", "command": "x", "args": "a b"}}},
            "mcp_servers.git.args: Input should be a valid list",
        ),
        (
            {"mcp_servers": {"git": {"transport": "stdio", "command": "x", "env": {"A": 1}}}},
            "mcp_servers.git.env.A: Input should be a valid string",
        ),
        (
            {"mcp_servers": {"git": {"transport": "stdio", "command": "x", "env": {"A-B": "1"}}}},
            "mcp_servers.git.env: 'A-B' is not a valid variable name",
        ),
        (
            {"mcpServers": {"git": {"type": "stdio", "transport": "stdio", "command": "x"}}},
            "mcpServers.git.type: give type or transport, not both",
        ),
        (
            {"mcp_servers": {"git": {"command": "x", "description": "d"}}},
            "mcp_servers.git.description: unknown field",
        ),
        (
            {
                "mcp_servers": {"a": {"transport": "stdio", "command": "x"}},
                "mcpServers": {"a": {"command": "y"}},
            },
            "mcpServers.a: the server is declared twice",
        ),
    ],
)
def test_mistakes_are_one_line_naming_file_server_and_field(
    tmp_path: Path, document: Any, expected: str
) -> None:
    assert _error(tmp_path, document).startswith(expected)


def test_env_from_names_the_missing_variable_and_no_value_is_quoted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SOONG_TEST_MISSING_VAR", raising=False)
    document = {
        "mcp_servers": {
            "git": {
                "transport": "stdio",
                "command": "x",
                "env": {"TOKEN": "literal-secret-1234"},
                "env_from": ["SOONG_TEST_MISSING_VAR"],
            }
        }
    }
    message = _error(tmp_path, document)
    assert message == (
        "mcp_servers.git.env_from: environment variable SOONG_TEST_MISSING_VAR is not set"
    )
    wrong_type = {
        "mcp_servers": {"git": {"transport": "http", "url": "http://a", "headers": {"K": 12345678}}}
    }
    assert "12345678" not in _error(tmp_path, wrong_type)


def test_only_the_home_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    _write(project, {"mcp_servers": {"evil": {"transport": "stdio", "command": "rm"}}})
    monkeypatch.chdir(project)
    assert load_mcp_servers(tmp_path / "home", []) == []


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").mkdir()
    with pytest.raises(ConfigError, match=r"mcp.json: cannot be read: it is a directory$"):
        load_mcp_servers(tmp_path, [])


def test_a_server_without_a_transport_is_stdio_for_a_command_and_http_for_a_url() -> None:
    document = {
        "mcp_servers": {
            "local": {"command": "x", "args": ["-v"]},
            "remote": {"url": "https://mcp.example.com/mcp"},
        }
    }
    local, remote = parse_mcp_servers(document, source=Path("/h/mcp.json"))
    assert (local.transport, local.command, local.args) == ("stdio", "x", ("-v",))
    assert (remote.transport, remote.url) == ("http", "https://mcp.example.com/mcp")


def test_oauth_settings_are_read_with_the_secret_from_the_environment(tmp_path: Path) -> None:
    document = {
        "mcp_servers": {
            "tracker": {
                "url": "https://tracker.example.com/mcp",
                "oauth": {
                    "client_id": "soong",
                    "client_secret_env": "TRACKER_SECRET",
                    "scopes": ["issues:read", "issues:write"],
                    "redirect_port": 8976,
                },
            },
            "machine": {
                "url": "https://m.example.com/mcp",
                "oauth": {
                    "grant": "client_credentials",
                    "client_id": "bot",
                    "client_secret_env": "TRACKER_SECRET",
                },
            },
            "plain": {"url": "https://plain.example.com/mcp", "oauth": False},
        }
    }
    specs = parse_mcp_servers(document, source="mcp.json", environ={"TRACKER_SECRET": "s3cr3t-v"})
    tracker, machine, plain = specs
    assert tracker.oauth is not None and machine.oauth is not None
    assert tracker.oauth.client_id == "soong"
    assert tracker.oauth.client_secret == "s3cr3t-v"
    assert tracker.oauth.scopes == ("issues:read", "issues:write")
    assert tracker.oauth.redirect_port == 8976
    assert "s3cr3t-v" in tracker.secrets()
    assert "s3cr3t-v" not in repr(tracker)
    assert machine.oauth.grant == "client_credentials"
    assert plain.oauth is None


def test_no_oauth_travels_in_clear_to_another_machine() -> None:
    """Tokens, refresh tokens and client secrets never go over plain http to another host:
    OAuth asked for there is refused, and left out it stays off; plain http to this machine
    (a local server) keeps it."""
    with pytest.raises(ConfigError, match=r"t\.oauth: needs an https:// URL"):
        parse_mcp_servers(
            {"mcp_servers": {"t": {"url": "http://tracker.example.com/mcp", "oauth": True}}},
            source="mcp.json",
        )
    document = {
        "mcp_servers": {
            "remote": {"url": "http://tracker.example.com/mcp"},
            "local": {"url": "http://127.0.0.1:8123/mcp"},
            "named": {"url": "http://localhost:8123/mcp"},
        }
    }
    remote, local, named = parse_mcp_servers(document, source="mcp.json")
    assert remote.oauth is None
    assert local.oauth is not None and named.oauth is not None


@pytest.mark.parametrize(
    ("oauth", "message"),
    [
        (
            {"client_id": "a", "client_secret_env": "MISSING_ONE"},
            "mcp_servers.t.oauth.client_secret_env: environment variable MISSING_ONE is not set",
        ),
        (
            {"grant": "client_credentials"},
            "mcp_servers.t.oauth.client_id: required for the client_credentials grant",
        ),
        ({"scope": ["a"]}, "mcp_servers.t.oauth.scope: unknown field"),
        (
            {"client_metadata_url": "http://x.example/c.json"},
            "mcp_servers.t.oauth.client_metadata_url: expected an https:// URL with a path",
        ),
        ({"grant": "password"}, "mcp_servers.t.oauth.grant: "),
    ],
)
def test_bad_oauth_settings_name_the_field(oauth: dict[str, Any], message: str) -> None:
    document = {"mcp_servers": {"t": {"url": "https://t.example.com/mcp", "oauth": oauth}}}
    with pytest.raises(ConfigError) as caught:
        parse_mcp_servers(document, source="mcp.json", environ={})
    assert message in str(caught.value)


def test_oauth_on_a_stdio_server_is_refused() -> None:
    document = {"mcp_servers": {"t": {"command": "x", "oauth": {}}}}
    with pytest.raises(ConfigError, match=r"mcp_servers.t.oauth: not used by a stdio server"):
        parse_mcp_servers(document, source="mcp.json", environ={})


def test_the_enterprise_grant_needs_its_idp_and_a_confidential_client() -> None:
    """identity_assertion (SEP-990): the IdP's token endpoint and the user's ID token (from the
    environment, a secret), and a confidential client of the authorization server named."""
    oauth = {
        "grant": "identity_assertion",
        "client_id": "soong",
        "client_secret_env": "AS_SECRET",
        "issuer": "https://as.example.com",
        "idp_token_endpoint": "https://idp.example.com/token",
        "idp_client_id": "soong-at-idp",
        "id_token_env": "ID_TOKEN",
    }
    environ = {"AS_SECRET": "as-s3cret", "ID_TOKEN": "eyJ.id.token"}
    document = {"mcp_servers": {"t": {"url": "https://t.example.com/mcp", "oauth": oauth}}}
    [spec] = parse_mcp_servers(document, source="mcp.json", environ=environ)
    assert spec.oauth is not None and spec.oauth.grant == "identity_assertion"
    assert spec.oauth.id_token == "eyJ.id.token" and "eyJ.id.token" in spec.secrets()
    assert "eyJ.id.token" not in repr(spec) and "as-s3cret" not in repr(spec)
    for missing in ("issuer", "idp_token_endpoint", "id_token_env", "client_secret_env"):
        partial = {k: v for k, v in oauth.items() if k != missing}
        entry = {"mcp_servers": {"t": {"url": "https://t.example.com/mcp", "oauth": partial}}}
        with pytest.raises(ConfigError, match=f"t.oauth.{missing}: required for the identity"):
            parse_mcp_servers(entry, source="mcp.json", environ=environ)
    clear = {**oauth, "idp_token_endpoint": "http://idp.example.com/token"}
    entry = {"mcp_servers": {"t": {"url": "https://t.example.com/mcp", "oauth": clear}}}
    with pytest.raises(ConfigError, match="idp_token_endpoint: expected an https:// URL"):
        parse_mcp_servers(entry, source="mcp.json", environ=environ)
