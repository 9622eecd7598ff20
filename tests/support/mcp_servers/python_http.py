"""Runs `http_server.py` (the contract server over streamable HTTP or SSE, no Node.js) in a
subprocess for a test: `with python_server("sse") as server: ... server.url`."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Literal

import pytest

from tests.support.mcp_servers import HERE

HTTP_SERVER = HERE / "http_server.py"
Transport = Literal["http", "sse"]
START_TIMEOUT_S = 20.0


@dataclass
class PythonServer:
    """A running `http_server.py`: its endpoint and its process."""

    url: str
    process: subprocess.Popen[str]


@contextmanager
def python_server(transport: Transport) -> Iterator[PythonServer]:
    """Start `http_server.py` over `transport` and yield it once it listens (it prints its
    port after binding); its process group is killed afterwards."""
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, str(HTTP_SERVER), transport],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
        try:
            assert process.stdout is not None
            ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
            port = process.stdout.readline().strip() if ready else ""
            if not port.isdigit():
                log.seek(0)
                err = log.read().decode(errors="replace")
                pytest.fail(f"http_server.py {transport} did not start: {port!r} {err[-800:]}")
            path = "mcp" if transport == "http" else "sse"
            yield PythonServer(f"http://127.0.0.1:{port}/{path}", process)
        finally:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
