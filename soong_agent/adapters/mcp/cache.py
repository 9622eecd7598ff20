"""The discovery cache: each server's last tool list, so a runtime can offer the tools at once
while the server is still starting.

One JSON file per server under the cache folder, named by `McpServerSpec.fingerprint()` (so a
changed command, URL, env or header is a different entry, and no secret value is stored: only
tool definitions and a timestamp). An entry older than the TTL is not used. A file that cannot be
read or written is logged and treated as missing: the cache only ever saves time.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soong_agent.ports.mcp import McpServerSpec, McpTool

log = logging.getLogger(__name__)

_FORMAT = 1


@dataclass(frozen=True, slots=True)
class CachedDiscovery:
    """What a server offered when it was last ready."""

    tools: tuple[McpTool, ...]
    has_resources: bool
    version: str | None
    saved_at: float


class DiscoveryCache:
    """Per-server tool lists on disk; `directory=None` turns the cache off."""

    def __init__(
        self, directory: Path | None, ttl_s: float, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._directory = directory
        self._ttl_s = ttl_s
        self._clock = clock

    def path(self, spec: McpServerSpec) -> Path | None:
        """The file of `spec`'s entry (None when the cache is off)."""
        if self._directory is None:
            return None
        return self._directory / f"{spec.fingerprint()}.json"

    def load(self, spec: McpServerSpec) -> CachedDiscovery | None:
        """`spec`'s entry when there is one younger than the TTL."""
        path = self.path(spec)
        if path is None or self._ttl_s <= 0:
            return None
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("mcp discovery cache %s is unreadable, ignored: %s", path, exc)
            return None
        try:
            entry = _entry(spec.name, raw)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            log.warning("mcp discovery cache %s is malformed, ignored: %s", path, exc)
            return None
        age = self._clock() - entry.saved_at
        if age < 0 or age > self._ttl_s:
            return None
        return entry

    def save(
        self,
        spec: McpServerSpec,
        tools: Sequence[McpTool],
        *,
        has_resources: bool,
        version: str | None,
    ) -> None:
        """Replace `spec`'s entry atomically (a reader sees the old file or the new one)."""
        path = self.path(spec)
        if path is None:
            return
        document = {
            "format": _FORMAT,
            "server": spec.name,
            "saved_at": self._clock(),
            "has_resources": has_resources,
            "version": version,
            "tools": [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.input_schema,
                    "read_only": tool.read_only,
                }
                for tool in tools
            ],
        }
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps(document), encoding="utf-8")
            os.replace(temporary, path)
        except (OSError, TypeError, ValueError) as exc:
            log.warning("mcp discovery cache %s could not be written: %s", path, exc)
            temporary.unlink(missing_ok=True)


def _entry(server: str, raw: Any) -> CachedDiscovery:
    if raw.get("format") != _FORMAT:
        raise ValueError(f"format {raw.get('format')!r}")
    tools = tuple(
        McpTool(
            server=server,
            name=str(item["name"]),
            description=str(item.get("description") or ""),
            input_schema=dict(item["input_schema"]),
            read_only=item.get("read_only") if isinstance(item.get("read_only"), bool) else None,
        )
        for item in raw["tools"]
    )
    version = raw.get("version")
    return CachedDiscovery(
        tools=tools,
        has_resources=bool(raw.get("has_resources")),
        version=version if isinstance(version, str) else None,
        saved_at=float(raw["saved_at"]),
    )
