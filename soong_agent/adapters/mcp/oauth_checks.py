"""Checks of `mcp.json`'s OAuth settings (MCP-3): no OAuth over plain http to another machine,
and what the enterprise-managed grant (SEP-990) needs."""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

from soong_agent.ports.errors import ConfigError

__all__ = ["check_identity_assertion", "in_clear"]


def in_clear(url: str) -> bool:
    """Whether `url` is plain http to another machine (no OAuth over it)."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "http":
        return False
    host = (parts.hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def check_identity_assertion(parsed: Any, secret: str | None, where: str) -> None:
    """What the enterprise-managed grant (SEP-990) needs: a confidential client of the
    authorization server it names, and the identity provider's token endpoint and ID token."""
    needed = {
        "client_id": parsed.client_id,
        "client_secret_env": secret,
        "issuer": parsed.issuer,
        "idp_token_endpoint": parsed.idp_token_endpoint,
        "id_token_env": parsed.id_token_env,
    }
    for name, value in needed.items():
        if not value:
            raise ConfigError(f"{where}.{name}: required for the identity_assertion grant")
    for name in ("issuer", "idp_token_endpoint"):
        url = str(getattr(parsed, name))
        if not re.match(r"https?://[^/\s]+", url) or in_clear(url):
            raise ConfigError(f"{where}.{name}: expected an https:// URL, not {url!r}")
