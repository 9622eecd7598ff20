"""Cold start: `soong-agent --version` and `--help`, `import soong_agent`, process start to the
first request byte, and the wall time of a whole one-turn `run` against a server that answers at
once — with the default context window and with a small one (a local model's 8192 tokens).

Run: python benchmarks/bench_cold_start.py
Targets (issue 32), as ratios measured in one run, pair by pair (the machine's speed drifts):
`--version` ≤ 2× `python -c pass`; process start to the first request byte ≤ 4×
`python -c 'import httpx'`; an instant one-turn run ≤ 3× `soong-agent --help`, with either
window. Also: --help ≤ 200 ms, `import soong_agent` and `from soong_agent import AgentRuntime`
≤ 150 ms (whole process).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CLI = str(Path(sys.executable).with_name("soong-agent"))
REPEATS = 7


def wall(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, capture_output=True, check=True)
    return time.perf_counter() - start


_FLOOR = (
    "import sys; sys.modules.setdefault('httpx._main', None); "
    "import typer, pydantic, asyncio, sqlite3, json, httpx"
)
"""The third-party imports every run makes (httpx without its command-line module, as the
runtime imports it)."""


def paired(a: list[str], b: list[str], repeats: int) -> float:
    """The median of a/b over `repeats` pairs run in turn, A B A B ..."""
    ratios = []
    for _ in range(repeats):
        ratios.append(wall(a) / wall(b))
    return statistics.median(ratios)


def first_byte_times(repeats: int) -> list[float]:
    """Start `run` against a listener that only notes when the first byte of a request arrives."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    arrivals: list[float] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.recv(1)
            arrivals.append(time.perf_counter())
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        (home / "config.toml").write_text(
            "[model]\n"
            f'base_url = "http://127.0.0.1:{port}/v1"\n'
            'name = "bench"\napi_key_env = ""\n'
            "[model.retry]\nmax_attempts = 1\n"
        )
        env = {**os.environ, "SOONG_AGENT_HOME": str(home)}
        for _ in range(repeats):
            before = len(arrivals)
            start = time.perf_counter()
            subprocess.run(
                [CLI, "run", "--path", tmp, "hello"],
                env=env,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                check=False,
            )
            if len(arrivals) > before:
                times.append(arrivals[before] - start)
    server.close()
    return times


_ANSWER = (
    b"".join(
        b"data: " + json.dumps(chunk).encode() + b"\n\n"
        for chunk in (
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello!"}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}},
        )
    )
    + b"data: [DONE]\n\n"
)


def instant_server() -> tuple[socket.socket, int]:
    """A Chat Completions endpoint that answers every request at once with one short text."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_ANSWER), _ANSWER)
            )

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1]


def one_turn_and_help(repeats: int, window: int | None = None) -> tuple[list[float], list[float]]:
    """Wall times of a whole instant one-turn `run` and of `--help`, taken in turn; `window`:
    the model's `context_window` (None: the default)."""
    server, port = instant_server()
    runs: list[float] = []
    helps: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        extra = f"context_window = {window}\n" if window is not None else ""
        (home / "config.toml").write_text(
            f'[model]\nbase_url = "http://127.0.0.1:{port}/v1"\nname = "bench"\napi_key_env = ""\n'
            + extra
        )
        env = {**os.environ, "SOONG_AGENT_HOME": str(home)}
        wall([CLI, "run", "--path", tmp, "warm up"], env=env)  # creates the database
        for _ in range(repeats):
            runs.append(wall([CLI, "run", "--path", tmp, "hello"], env=env))
            helps.append(wall([CLI, "--help"]))
    server.close()
    return runs, helps


def report(name: str, samples: list[float], target_ms: float) -> None:
    best, median = min(samples) * 1000, statistics.median(samples) * 1000
    verdict = "ok" if median <= target_ms else "OVER"
    print(
        f"  {name:<34} best {best:6.1f} ms  median {median:6.1f} ms"
        f"  (target ≤ {target_ms:.0f} ms: {verdict})"
    )


def main() -> None:
    wall([CLI, "--help"])  # warm the file cache
    print(f"cold start ({REPEATS} runs each):")
    ratio = paired([CLI, "--version"], [sys.executable, "-c", "pass"], REPEATS)
    print(
        f"  {'soong-agent --version':<34} {ratio:4.2f}x `python -c pass`"
        f"  (target ≤ 2x: {'ok' if ratio <= 2 else 'OVER'})"
    )
    report("soong-agent --help", [wall([CLI, "--help"]) for _ in range(REPEATS)], 200)
    report(
        "python -c 'import soong_agent'",
        [wall([sys.executable, "-c", "import soong_agent"]) for _ in range(REPEATS)],
        150,
    )
    report(
        "from soong_agent import AgentRuntime",
        [
            wall([sys.executable, "-c", "from soong_agent import AgentRuntime"])
            for _ in range(REPEATS)
        ],
        150,
    )
    first = first_byte_times(REPEATS)
    httpx_s = statistics.median(
        wall([sys.executable, "-c", "import httpx"]) for _ in range(REPEATS)
    )
    report("run: process start → first byte", first, 500)
    ratio = statistics.median(first) / httpx_s
    print(
        f"  {'':<34} = {ratio:4.1f}x `python -c 'import httpx'` ({httpx_s * 1000:.1f} ms)"
        f"  (target ≤ 4x: {'ok' if ratio <= 4 else 'OVER'})"
    )
    floor = paired([sys.executable, "-c", _FLOOR], [CLI, "--help"], REPEATS)
    print(
        f"  {'floor: the libraries a run needs':<34} {floor:4.2f}x --help  (python importing "
        "typer, pydantic, asyncio, sqlite3 and httpx, nothing of soong-agent: what no run can "
        "go under)"
    )
    for window, label in ((None, "default window"), (8192, "context_window = 8192")):
        runs, helps = one_turn_and_help(REPEATS, window)
        ratio = statistics.median(r / h for r, h in zip(runs, helps, strict=True))
        run_ms, help_ms = statistics.median(runs) * 1000, statistics.median(helps) * 1000
        print(
            f"  run, one instant turn ({label}): median {run_ms:6.1f} ms"
            f"  vs --help {help_ms:6.1f} ms  ratio {ratio:4.1f}x"
            f"  (target ≤ 3x: {'ok' if ratio <= 3 else 'OVER'})"
        )


if __name__ == "__main__":
    main()
