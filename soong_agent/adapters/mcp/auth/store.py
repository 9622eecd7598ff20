"""Each server's OAuth tokens and registered client, in one file under the home (MCP-3).

`${home}/mcp-auth/<server>.json`, mode 0600 in a folder of mode 0700, written atomically (a new
file renamed over the old). It holds the server's URL too: tokens of a server whose URL changed
are not sent to the new URL. Nothing else in soong-agent stores or shows these values.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata, OAuthToken
from pydantic import ValidationError

log = logging.getLogger(__name__)

AUTH_DIR = "mcp-auth"
_FORMAT = 1


def token_path(home: Path, server: str) -> Path:
    """Where `server`'s tokens are kept under `home`."""
    return home / AUTH_DIR / f"{server}.json"


class TokenFile:
    """The SDK's `TokenStorage` over one server's file. `url` is the server's URL: a file
    written for another URL reads as empty. `expires_at` is when the access token runs out
    (None: unknown), kept so a token loaded later is refreshed before it is sent stale."""

    def __init__(self, path: Path, url: str) -> None:
        self.path = path
        self.url = url
        self._doc: dict[str, Any] | None = None

    # --- the SDK's TokenStorage ------------------------------------------------------------

    async def get_tokens(self) -> OAuthToken | None:
        raw = self._read().get("tokens")
        if raw is None:
            return None
        try:
            token = OAuthToken.model_validate(raw)
        except ValidationError:
            log.warning("%s: the stored tokens are malformed, ignored", self.path)
            return None
        expires_at = self._read().get("expires_at")
        if isinstance(expires_at, int | float):
            token.expires_in = int(expires_at - time.time())
        return token

    async def set_tokens(self, tokens: OAuthToken) -> None:
        doc = dict(self._read())
        doc["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        doc["expires_at"] = time.time() + tokens.expires_in if tokens.expires_in else None
        self._write(doc)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        raw = self._read().get("client")
        if raw is None:
            return None
        try:
            return OAuthClientInformationFull.model_validate(raw)
        except ValidationError:
            log.warning("%s: the stored client registration is malformed, ignored", self.path)
            return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        doc = dict(self._read())
        doc["client"] = client_info.model_dump(mode="json", exclude_none=True)
        self._write(doc)

    # --- ours --------------------------------------------------------------------------------

    def server_metadata(self) -> OAuthMetadata | None:
        """The authorization server's metadata as discovered at the login (its token endpoint
        and issuer): a later process refreshes there, never at a guess."""
        raw = self._read().get("server_metadata")
        if raw is None:
            return None
        try:
            return OAuthMetadata.model_validate(raw)
        except ValidationError:
            log.warning("%s: the stored server metadata is malformed, ignored", self.path)
            return None

    def set_server_metadata(self, metadata: OAuthMetadata) -> None:
        doc = dict(self._read())
        kept = metadata.model_dump(mode="json", exclude_none=True)
        if doc.get("server_metadata") != kept:
            doc["server_metadata"] = kept
            self._write(doc)

    def has_tokens(self) -> bool:
        """Whether an access token is stored for this URL."""
        return self._read().get("tokens") is not None

    def values(self) -> tuple[str, ...]:
        """The secret values held (tokens, client secret), for scrubbing text meant for people."""
        doc = self._read()
        tokens = doc.get("tokens") or {}
        client = doc.get("client") or {}
        found = (
            tokens.get("access_token"),
            tokens.get("refresh_token"),
            client.get("client_secret"),
        )
        return tuple(value for value in found if isinstance(value, str) and value)

    def forget_tokens(self) -> None:
        """Drop the tokens, keep the registered client (a new login reuses it)."""
        doc = dict(self._read())
        if doc.pop("tokens", None) is not None:
            doc.pop("expires_at", None)
            self._write(doc)

    def remove(self) -> bool:
        """Delete the file; whether there was one."""
        self._doc = None
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def _read(self) -> dict[str, Any]:
        if self._doc is not None:
            return self._doc
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)  # a link there is not read
            with os.fdopen(fd, encoding="utf-8") as handle:
                raw = json.load(handle)
        except FileNotFoundError:
            raw = {}
        except (OSError, ValueError) as exc:
            log.warning("%s cannot be read, ignored: %s", self.path, exc)
            raw = {}
        if not isinstance(raw, dict) or raw.get("format") != _FORMAT or raw.get("url") != self.url:
            raw = {}
        self._doc = raw
        return raw

    def _write(self, doc: dict[str, Any]) -> None:
        doc["format"] = _FORMAT
        doc["url"] = self.url
        self._doc = doc
        folder = self.path.parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = os.lstat(folder)
        if stat.S_ISLNK(found.st_mode) or not stat.S_ISDIR(found.st_mode):
            raise OSError(f"{folder} is not a folder of its own (a link?): tokens not written")
        if found.st_uid != os.getuid():
            raise OSError(f"{folder} belongs to another user: tokens not written")
        if stat.S_IMODE(found.st_mode) & 0o077:
            folder.chmod(0o700)
        # a new file of its own (O_EXCL, mode 0600), renamed over the old one
        fd, name = tempfile.mkstemp(dir=folder, prefix=f".{self.path.name}.", suffix=".tmp")
        temporary = Path(name)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(doc, handle)
            os.replace(temporary, self.path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
