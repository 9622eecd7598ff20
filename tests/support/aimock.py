"""Run aimock (npm `@copilotkit/aimock`), a third-party mock of the OpenAI, Anthropic and Ollama
APIs, as a loopback subprocess scripted by fixture files.

aimock is installed into the repository's git-ignored `.aimock/` folder by `.ci/run` (or by hand
with `INSTALL_COMMAND`); `SOONG_AIMOCK_BIN` may name another `aimock` executable instead. Tests
skip only when Node.js is absent; with Node present a missing install is a failure, so CI cannot
silently skip these tests.

Fixtures use aimock's JSON format, `{"match": {...}, "response": {...}}`: every provider route
(`/v1/chat/completions`, `/v1/messages`, `/api/chat`) is normalised to a Chat Completions request
and the first fixture that matches answers, streamed in that provider's wire format.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

AIMOCK_VERSION = "1.43.0"
REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_DIR = REPO_ROOT / ".aimock"
INSTALL_COMMAND = (
    f"npm install --prefix .aimock --no-audit --no-fund @copilotkit/aimock@{AIMOCK_VERSION}"
)
_CLI_SCRIPT = INSTALL_DIR / "node_modules" / "@copilotkit" / "aimock" / "dist" / "aimock-cli.js"
_START_TIMEOUT_S = 20.0
# Loopback only: never route the helper's own requests through an HTTP proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def require_aimock() -> list[str]:
    """The command that starts aimock; skips without Node, fails when aimock is not installed."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("aimock tests need Node.js: `node` is not on PATH")
    override = os.environ.get("SOONG_AIMOCK_BIN")
    if override:
        found = shutil.which(override)
        if found is None:
            pytest.fail(f"SOONG_AIMOCK_BIN={override!r} is not an executable file")
        return [found]
    if not _CLI_SCRIPT.is_file():
        _install()
    return [node, str(_CLI_SCRIPT)]


def _install() -> None:
    """Install the pinned aimock from the npm registry once (the README's `pytest` needs no
    separate step); a failure fails the test with npm's own words."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail(f"aimock is not installed in {INSTALL_DIR} and npm is missing to install it")
    argv = [npm, *INSTALL_COMMAND.split()[1:]]
    done = subprocess.run(
        argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode != 0 or not _CLI_SCRIPT.is_file():
        pytest.fail(
            f"could not install aimock with `{INSTALL_COMMAND}` (exit {done.returncode}): "
            f"{done.stderr.strip()[-500:]}"
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class AimockServer:
    """One running aimock process on 127.0.0.1; `base_url` is its origin (no path)."""

    def __init__(self, process: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
        self.process = process
        self.base_url = base_url
        self.log = log

    def _get(self, path: str) -> Any:
        with _OPENER.open(self.base_url + path, timeout=5) as response:
            return json.loads(response.read())

    def journal(self) -> list[dict[str, Any]]:
        """Every request aimock received, oldest first.

        Each entry has `path`, `body` (normalised to a Chat Completions request whatever the
        provider route) and `response` (`status` and the matched `fixture`, None on a miss).
        """
        entries: list[dict[str, Any]] = self._get("/__aimock/journal")
        return entries

    def describe(self) -> str:
        """The journal and aimock's own log, for assertion messages."""
        try:
            journal = json.dumps(self.journal(), indent=1)[:6000]
        except (OSError, ValueError) as exc:
            journal = f"(journal unavailable: {exc})"
        return f"aimock journal:\n{journal}\naimock log:\n{self.log.read_text(errors='replace')}"

    def stop(self) -> None:
        """Terminate aimock's process group (it was started in a session of its own)."""
        if self.process.poll() is not None:
            return  # already exited and reaped: its pid may belong to someone else by now
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)


def _wait_until_healthy(server: AimockServer) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"aimock exited with code {server.process.returncode} before answering:\n"
                + server.log.read_text(errors="replace")
            )
        try:
            if server._get("/health").get("status") == "ok":
                return
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"aimock did not answer {server.base_url}/health within {_START_TIMEOUT_S:.0f}s:\n"
                + server.log.read_text(errors="replace")
            )
        time.sleep(0.05)


@contextmanager
def aimock_server(fixtures: list[dict[str, Any]], workdir: Path) -> Iterator[AimockServer]:
    """Write `fixtures` into `workdir`, start aimock on a free loopback port, stop it on exit.

    Call inside a test (not at collection): without Node it skips, without aimock it fails.
    """
    command = require_aimock()
    workdir.mkdir(parents=True, exist_ok=True)
    fixture_file = workdir / "fixtures.json"
    fixture_file.write_text(json.dumps({"fixtures": fixtures}, indent=1), encoding="utf-8")
    config_file = workdir / "aimock.json"
    config_file.write_text(
        json.dumps({"llm": {"fixtures": str(fixture_file), "logLevel": "warn"}}), encoding="utf-8"
    )
    log = workdir / "aimock.log"
    argv = [*command, "--config", str(config_file), "--host", "127.0.0.1"]
    for attempt in range(3):
        port = _free_port()
        with log.open("wb") as log_handle:
            process = subprocess.Popen(
                [*argv, "--port", str(port)],
                stdin=subprocess.DEVNULL,
                stdout=log_handle,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                start_new_session=True,
            )
        server = AimockServer(process, f"http://127.0.0.1:{port}", log)
        try:
            _wait_until_healthy(server)
            break
        except RuntimeError:
            server.stop()
            # Another process took the free port between our probe and aimock's bind: retry.
            if "EADDRINUSE" not in log.read_text(errors="replace") or attempt == 2:
                raise
    try:
        yield server
    finally:
        server.stop()
