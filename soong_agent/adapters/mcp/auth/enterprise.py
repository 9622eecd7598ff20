"""Enterprise-managed authorization (SEP-990) for an MCP server (MCP-3): the user's ID token from
the enterprise identity provider is exchanged at the IdP's token endpoint for an identity
assertion authorization grant, an ID-JAG (RFC 8693 token exchange), which the MCP server's
authorization server — the one `mcp.json` names, never one the server points to — takes for an
access token (RFC 7523 jwt-bearer, through the `mcp` SDK's provider). The ID token, the ID-JAG
and both client secrets are sent only to the endpoints they belong to, and never shown."""

from __future__ import annotations

from typing import Any

import httpx2
from mcp.client.auth import OAuthFlowError
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

from soong_agent.adapters.mcp.auth.store import TokenFile
from soong_agent.ports.mcp import McpOAuth

__all__ = ["enterprise_auth"]

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
EXCHANGE_TIMEOUT_S = 30.0


def enterprise_auth(
    url: str, oauth: McpOAuth, storage: TokenFile, scope: str | None
) -> httpx2.Auth:
    """The auth of an `identity_assertion` server (its settings checked by the config)."""
    assert oauth.client_id and oauth.client_secret and oauth.issuer

    async def fetch_id_jag(audience: str, resource: str) -> str:
        return await exchange_id_token(oauth, audience=audience, resource=resource, scope=scope)

    method = oauth.token_endpoint_auth_method
    return IdentityAssertionOAuthProvider(
        server_url=url,
        storage=storage,
        client_id=oauth.client_id,
        client_secret=oauth.client_secret,
        issuer=oauth.issuer,
        assertion_provider=fetch_id_jag,
        scope=scope,
        token_endpoint_auth_method=(
            method
            if method in ("client_secret_basic", "client_secret_post")
            else "client_secret_basic"
        ),
    )


async def exchange_id_token(
    oauth: McpOAuth, *, audience: str, resource: str, scope: str | None
) -> str:
    """The ID-JAG the identity provider issues for the user's ID token, for the authorization
    server `audience` and the MCP server `resource`; OAuthFlowError saying why when it refuses."""
    assert oauth.idp_token_endpoint and oauth.id_token
    data = {
        "grant_type": TOKEN_EXCHANGE,
        "subject_token": oauth.id_token,
        "subject_token_type": ID_TOKEN,
        "requested_token_type": ID_JAG,
        "audience": audience,
        "resource": resource,
    }
    if scope:
        data["scope"] = scope
    auth: Any = None
    if oauth.idp_client_id and oauth.idp_client_secret:
        auth = httpx2.BasicAuth(oauth.idp_client_id, oauth.idp_client_secret)
    elif oauth.idp_client_id:
        data["client_id"] = oauth.idp_client_id
    async with httpx2.AsyncClient(timeout=EXCHANGE_TIMEOUT_S, follow_redirects=False) as client:
        try:
            response = await client.post(oauth.idp_token_endpoint, data=data, auth=auth)
        except httpx2.HTTPError as exc:
            raise OAuthFlowError(
                f"the identity provider at {oauth.idp_token_endpoint} cannot be reached: "
                f"{type(exc).__name__}"
            ) from None
    body = _json(response)
    token = body.get("access_token")
    if response.status_code != 200 or not isinstance(token, str) or not token:
        reason = body.get("error_description") or body.get("error") or "no token in its answer"
        raise OAuthFlowError(
            f"the identity provider refused the token exchange (HTTP {response.status_code}): "
            f"{str(reason)[:200]}"
        )
    return token


def _json(response: httpx2.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
