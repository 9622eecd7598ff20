"""`soong-agent mcp login|logout|status` against an OAuth-protected MCP server on loopback
(MCP-3), as a user runs them: the test plays the browser (it reads the URL `login
--no-browser` prints, opens it, and follows the redirect to the CLI's loopback listener)."""

from __future__ import annotations

import json
import queue
import stat
import subprocess
import threading
from pathlib import Path

import httpx

from tests.e2e.conftest import CLI, CliWorld
from tests.support.mcp_servers.oauth_http import oauth_server


def _read_url(process: subprocess.Popen[str], lines: list[str], limit_s: float = 60) -> str:
    """The authorization URL `login` prints on stderr (every line read is kept in `lines`)."""
    assert process.stderr is not None
    found: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if line.strip().startswith("http://"):
                found.put(line.strip())

    threading.Thread(target=read, daemon=True).start()
    try:
        return found.get(timeout=limit_s)
    except queue.Empty:
        raise AssertionError(f"no authorization URL printed: {''.join(lines)}") from None


def test_login_status_and_logout(world: CliWorld, tmp_path: Path) -> None:
    with oauth_server(tmp_path) as server:
        (world.home / "mcp.json").write_text(
            json.dumps({"mcp_servers": {"tracker": {"url": server.url}}})
        )
        before = world.run("mcp", "status", timeout=120)
        assert before.returncode == 1
        assert "needs login (run: soong-agent mcp login tracker)" in before.stdout
        assert "-32603" not in before.stdout

        process = subprocess.Popen(
            [str(CLI), "mcp", "login", "tracker", "--no-browser"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=world.env,
            cwd=world.project,
        )
        try:
            err_lines: list[str] = []
            url = _read_url(process, err_lines)
            answer = httpx.get(url, timeout=10)
            assert answer.status_code == 302
            landed = httpx.get(answer.headers["location"], timeout=10)
            assert landed.status_code == 200
            out = process.stdout.read() if process.stdout is not None else ""
            process.wait(timeout=120)
            err = "".join(err_lines)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert process.returncode == 0, err
        assert "MCP server 'tracker' authorized" in out
        tokens = world.home / "mcp-auth" / "tracker.json"
        assert stat.S_IMODE(tokens.stat().st_mode) == 0o600
        access = json.loads(tokens.read_text())["tokens"]["access_token"]
        assert access not in out + err

        after = world.run("mcp", "status", timeout=120)
        assert after.returncode == 0, after.stdout + after.stderr
        assert "tracker" in after.stdout and "ready" in after.stdout
        assert access not in after.stdout + after.stderr

        out_ = world.run("mcp", "logout", "tracker")
        assert out_.returncode == 0
        assert "logged out" in out_.stdout
        assert not tokens.exists()
        again = world.run("mcp", "status", timeout=120)
        assert "needs login" in again.stdout


def test_login_names_what_is_wrong(world: CliWorld) -> None:
    (world.home / "mcp.json").write_text(
        json.dumps(
            {
                "mcp_servers": {
                    "local": {"command": "true"},
                    "plain": {"url": "http://127.0.0.1:9/mcp", "oauth": False},
                }
            }
        )
    )
    missing = world.run("mcp", "login", "nope")
    assert missing.returncode == 2
    assert "no MCP server 'nope'" in missing.stderr
    stdio = world.run("mcp", "login", "local")
    assert stdio.returncode == 2 and "stdio server" in stdio.stderr
    off = world.run("mcp", "logout", "plain")
    assert off.returncode == 2 and "OAuth turned off" in off.stderr
