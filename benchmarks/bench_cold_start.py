"""Cold start: `soong-agent --help`, `import soong_agent`, and process start to first request byte.

Run: python benchmarks/bench_cold_start.py
Targets: --help ≤ 200 ms, import ≤ 150 ms, first request byte of `run` ≤ 500 ms.
"""

from __future__ import annotations

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
    report("soong-agent --help", [wall([CLI, "--help"]) for _ in range(REPEATS)], 200)
    report(
        "python -c 'import soong_agent'",
        [wall([sys.executable, "-c", "import soong_agent"]) for _ in range(REPEATS)],
        150,
    )
    report("run: process start → first byte", first_byte_times(REPEATS), 500)


if __name__ == "__main__":
    main()
