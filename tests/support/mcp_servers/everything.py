"""`@modelcontextprotocol/server-everything` (npm), the reference server of every MCP feature, run
with npx from the git-ignored `.aimock/` prefix that `.ci/run` installs it into (with aimock).

It serves stdio (`mcp-server-everything stdio`), streamable HTTP (`streamableHttp`, at
`http://127.0.0.1:$PORT/mcp`) and SSE (`sse`, at `/sse`). Tests that use it skip, saying why,
when Node.js/npx or the package is absent.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
PREFIX = REPO_ROOT / ".aimock"
PACKAGE = "@modelcontextprotocol/server-everything"
VERSION = "2026.8.31"
INSTALL_COMMAND = f"npm install --prefix .aimock --no-audit --no-fund {PACKAGE}@{VERSION}"
_START_TIMEOUT_S = 20.0


def everything_command(transport: str = "stdio") -> list[str]:
    """The argv that runs the server on `transport`; skips (saying why) without npx or the
    package."""
    npx = shutil.which("npx")
    if shutil.which("node") is None or npx is None:
        pytest.skip(f"{PACKAGE} tests need Node.js and npx on PATH")
    if not (PREFIX / "node_modules" / PACKAGE / "package.json").is_file():
        pytest.skip(f"{PACKAGE} is not installed in {PREFIX}: run `{INSTALL_COMMAND}`")
    return [npx, "--no-install", "--prefix", str(PREFIX), "mcp-server-everything", transport]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def everything_over_http(transport: str) -> Iterator[str]:
    """Run the server with `transport` ("streamableHttp" or "sse") on a free loopback port and
    yield its endpoint URL; the process group is killed afterwards."""
    argv = everything_command(transport)
    port = _free_port()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            argv,
            env={**os.environ, "PORT": str(port)},
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + _START_TIMEOUT_S
            while True:
                with suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    err = log.read().decode(errors="replace")
                    pytest.fail(f"{PACKAGE} {transport} did not start: {err[-500:]}")
                time.sleep(0.05)
            yield f"http://127.0.0.1:{port}/" + ("mcp" if transport == "streamableHttp" else "sse")
        finally:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
