"""Run every benchmark and print its figures: python benchmarks/run_all.py"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = [
    "bench_loop.py",
    "bench_runs.py",
    "bench_stream_parse.py",
    "bench_session_store.py",
    "bench_tokens.py",
    "bench_context.py",
    "bench_cold_start.py",
    "bench_agents.py",
    "bench_teams.py",
    "bench_mailbox.py",
    "bench_tasks.py",
    "bench_telemetry.py",
]


def main() -> int:
    failed = 0
    for name in BENCHMARKS:
        print(f"\n=== {name} ===", flush=True)
        failed |= subprocess.run([sys.executable, str(HERE / name)], check=False).returncode
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
