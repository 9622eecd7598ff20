"""The client the MCP conformance suite (`@modelcontextprotocol/conformance`, client mode)
launches: `python -m tests.support.mcp_conformance_client SERVER_URL`.

The suite names the scenario in `MCP_CONFORMANCE_SCENARIO` and gives what a scenario needs
(a pre-registered client, a private key) in `MCP_CONFORMANCE_CONTEXT`. This driver goes through
soong-agent's own client code paths: a runtime whose home (a temporary one) has the server in its
`mcp.json`, and whose scripted model calls the server's tool, through the permission engine and
the tool pipeline, as any run does (OAuth token files under that home). The browser's part of
an authorization is played by `follow_redirect` (the runtime's `mcp_authorize`): it opens the
authorization URL and follows the redirect to the loopback listener (the suite's authorization
server approves at once). A server's questions are accepted with the form's defaults.

Exit 0 when the scenario's steps ran, 1 (with the reason on stderr) when one failed; the suite
itself judges what it saw.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from soong_agent import AgentRuntime
from soong_agent.ports.mcp import ElicitationAnswer, ElicitationRequest, McpError
from soong_agent.ports.model import ModelRequest
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config

SERVER = "conf"
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
TIMEOUT_S = 20.0

CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "sse-retry": ("test_reconnection", {}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
}
"""The tool each scenario wants called (an auth scenario: its server's first tool)."""


async def follow_redirect(server: str, url: str) -> None:
    """A browser approving at once: open `url`, follow its redirect to the loopback listener."""
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
        answer = await client.get(url)
        location = answer.headers.get("location")
        if answer.status_code not in (301, 302, 303, 307, 308) or not location:
            raise RuntimeError(f"the authorization server answered {answer.status_code}")
        await client.get(location)


async def accept_defaults(request: ElicitationRequest) -> ElicitationAnswer:
    """Accept a form as it stands: the hub fills in the schema's defaults."""
    return ElicitationAnswer("accept", {})


def server_entry(
    url: str, scenario: str, context: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The `mcp.json` entry of the scenario's server, and the environment it reads."""
    entry: dict[str, Any] = {"url": url}
    environ: dict[str, str] = {}
    if not scenario.startswith("auth/"):
        return entry, environ
    oauth: dict[str, Any] = {}
    if "private_key_pem" in context:
        environ["CONFORMANCE_KEY"] = context["private_key_pem"]
        oauth = {
            "grant": "client_credentials",
            "client_id": context["client_id"],
            "private_key_env": "CONFORMANCE_KEY",
            "token_endpoint_auth_method": "private_key_jwt",
            "signing_algorithm": context.get("signing_algorithm", "RS256"),
        }
    elif scenario.startswith("auth/client-credentials"):
        environ["CONFORMANCE_SECRET"] = context["client_secret"]
        oauth = {
            "grant": "client_credentials",
            "client_id": context["client_id"],
            "client_secret_env": "CONFORMANCE_SECRET",
        }
    else:
        oauth = {"client_metadata_url": CLIENT_METADATA_URL}
        if "client_id" in context:
            oauth["client_id"] = context["client_id"]
        if context.get("client_secret"):
            environ["CONFORMANCE_SECRET"] = context["client_secret"]
            oauth["client_secret_env"] = "CONFORMANCE_SECRET"
    entry["oauth"] = oauth
    return entry, environ


async def authorization_server_of(url: str) -> str:
    """The MCP server's authorization server, as an administrator setting up enterprise-managed
    authorization reads it once from the server's protected-resource metadata (the client
    itself never takes it from the server: it is configuration)."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
        for path in (f"/.well-known/oauth-protected-resource{parts.path}", ""):
            answer = await client.get(f"{origin}{path or '/.well-known/oauth-protected-resource'}")
            if answer.status_code == 200:
                return str(answer.json()["authorization_servers"][0])
    raise RuntimeError(f"no protected-resource metadata at {origin}")


async def enterprise_entry(
    url: str, context: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The `mcp.json` entry of an enterprise-managed (SEP-990) server: the IdP's ID token and
    token endpoint, and a confidential client of the authorization server named."""
    oauth = {
        "grant": "identity_assertion",
        "client_id": context["client_id"],
        "client_secret_env": "CONFORMANCE_SECRET",
        "issuer": await authorization_server_of(url),
        "idp_token_endpoint": context["idp_token_endpoint"],
        "idp_client_id": context["idp_client_id"],
        "id_token_env": "CONFORMANCE_ID_TOKEN",
    }
    environ = {
        "CONFORMANCE_SECRET": context["client_secret"],
        "CONFORMANCE_ID_TOKEN": context["idp_id_token"],
    }
    return {"url": url, "oauth": oauth}, environ


async def run(url: str, scenario: str, context: dict[str, Any], home: Path) -> None:
    """One run of a runtime whose `mcp.json` declares the scenario's server: its scripted
    model calls the server's tool (the scenario's, or the first), through the permission
    engine, as any run would."""
    if "idp_id_token" in context:
        entry, environ = await enterprise_entry(url, context)
    else:
        entry, environ = server_entry(url, scenario, context)
    os.environ.update(environ)  # where mcp.json's *_env settings are read
    (home / "mcp.json").write_text(json.dumps({"mcp_servers": {SERVER: entry}}), "utf-8")
    write_minimal_config(home, '[tools]\ndefer_threshold = 1000\n[permissions]\nmode = "bypass"\n')
    project = home / "project"
    project.mkdir()
    prefix = f"mcp__{SERVER}__"
    wanted = CALLS.get(scenario)

    def call_the_tool(request: ModelRequest) -> ScriptedResponse:
        offered = [tool.name for tool in request.tools if tool.name.startswith(prefix)]
        if wanted is not None:
            return ScriptedResponse.tool_calls((prefix + wanted[0], wanted[1]))
        if not offered:
            return ScriptedResponse.text(f"the server offers no tool ({offered})")
        return ScriptedResponse.tool_calls((offered[0], {}))

    model = ScriptedModel([call_the_tool, ScriptedResponse.text("done")])
    async with AgentRuntime(
        project, home, model=model, mcp_authorize=follow_redirect, elicitation=accept_defaults
    ) as runtime:
        run = await runtime.run("call the server's tool")
        results = [event async for event in run.events() if event.type == "tool_result"]
        ended = await run.wait()
        [health] = runtime._container.adapters.mcp_hub().health()
        if health.state != "ready":
            raise RuntimeError(f"{SERVER} is {health.state}: {health.detail}")
        if ended.status != "completed":  # (a server without tools: no call, nothing wrong)
            raise RuntimeError(f"the run ended {ended.status}: {ended.reason}")
        for result in results:
            shown = f"{'error: ' if result.is_error else ''}{result.content[:200]}"
            sys.stderr.write(f"{result.name}: {shown}\n")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m tests.support.mcp_conformance_client SERVER_URL\n")
        return 2
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    with tempfile.TemporaryDirectory(prefix="soong-conformance-") as home:
        try:
            asyncio.run(run(argv[0], scenario, context, Path(home)))
        except (McpError, RuntimeError) as exc:
            sys.stderr.write(f"{scenario}: {exc}\n")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
