"""Runs `oauth_server.py` (the contract server behind its own OAuth authorization server) in a
subprocess for a test, and reads its log: `with oauth_server(tmp_path) as server: server.url`."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.mcp_servers import HERE

OAUTH_SERVER = HERE / "oauth_server.py"
START_TIMEOUT_S = 20.0


@dataclass
class OAuthServer:
    """A running `oauth_server.py`: its MCP endpoint, its origin and its log."""

    url: str
    base: str
    log_path: Path
    process: subprocess.Popen[str]

    def log(self, step: str | None = None) -> list[dict[str, Any]]:
        """The server's log entries (of one step)."""
        if not self.log_path.exists():
            return []
        entries = [json.loads(line) for line in self.log_path.read_text().splitlines()]
        return [e for e in entries if step is None or e["step"] == step]

    def expire_access_tokens(self) -> None:
        httpx.post(f"{self.base}/admin/expire", timeout=10).raise_for_status()


@contextmanager
def oauth_server(
    folder: Path, *, ttl: int = 3600, client: str | None = None, transport: str = "http"
) -> Iterator[OAuthServer]:
    """Start `oauth_server.py` (log in `folder`) and yield it once it listens; its process
    group is killed afterwards."""
    log_path = folder / "oauth-server.log"
    command = [sys.executable, str(OAUTH_SERVER), "--log", str(log_path), "--ttl", str(ttl)]
    command += ["--transport", transport]
    if client is not None:
        command += ["--client", client]
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            start_new_session=True,
        )
        try:
            assert process.stdout is not None
            ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
            port = process.stdout.readline().strip() if ready else ""
            if not port.isdigit():
                errors.seek(0)
                err = errors.read().decode(errors="replace")
                pytest.fail(f"oauth_server.py did not start: {port!r} {err[-800:]}")
            base = f"http://127.0.0.1:{port}"
            path = "/mcp" if transport == "http" else "/sse"
            yield OAuthServer(f"{base}{path}", base, log_path, process)
        finally:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
