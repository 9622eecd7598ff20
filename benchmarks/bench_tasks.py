"""The Task WAL (TASK-1): reading and folding a 100,000-record log, and append throughput.

A log of one task with steps added, claimed, heartbeated and completed in turn is written
straight to a file (valid JSON lines, as the log writes them), then read and folded through
`FileTaskLog` (a fresh instance each round: no cache), median of ROUNDS. Appends go through
`FileTaskLog.append` — lock, check the transition, write the line whole, fsync — on the temp
folder's file system; records per second over APPENDS appends.

    python benchmarks/bench_tasks.py [--records 100000] [--appends 300]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from soong_agent.adapters.tasks import FileTaskLog
from soong_agent.domain.tasks import fold
from soong_agent.ports.tasks import (
    StepAdded,
    StepClaimed,
    StepCompleted,
    StepHeartbeat,
    TaskCreated,
    TaskRecord,
)

ROUNDS = 5


def records(n: int) -> list[TaskRecord]:
    """One task; each step added, claimed, heartbeated once and completed (4 records)."""
    out: list[TaskRecord] = [TaskCreated(seq=1, at=0.0, actor="run_a", title="bench")]
    step = 0
    while len(out) < n:
        step += 1
        sid, at = f"s{step}", float(step)
        out += [
            StepAdded(seq=0, at=at, actor="run_a", step_id=sid, title=f"step {step}"),
            StepClaimed(
                seq=0, at=at, actor="run_a", step_id=sid, owner="run_a", lease_expires_at=at + 300
            ),
            StepHeartbeat(seq=0, at=at, actor="run_a", step_id=sid, lease_expires_at=at + 600),
            StepCompleted(seq=0, at=at, actor="run_a", step_id=sid, summary="done"),
        ]
    return [r.model_copy(update={"seq": i + 1}) for i, r in enumerate(out[:n])]


def main(n: int, appends: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        wal = root / "ses_bench" / "big.wal.jsonl"
        wal.parent.mkdir()
        wal.write_text("".join(r.model_dump_json() + "\n" for r in records(n)), encoding="utf-8")
        times = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            read = FileTaskLog(root).read("ses_bench", "big")
            result = fold(read.records)
            times.append((time.perf_counter() - started) * 1000)
        assert not result.problems, result.problems
        size = wal.stat().st_size / 1e6
        median = statistics.median(times)
        print(f"read + fold {n:,} records ({size:.1f} MB): median {median:.0f} ms")

        log = FileTaskLog(root)
        log.append("ses_app", "t", TaskCreated(seq=0, at=0.0, actor="run_a", title="appends"))
        started = time.perf_counter()
        for i in range(appends):
            log.append(
                "ses_app",
                "t",
                StepAdded(seq=0, at=float(i), actor="run_a", step_id=f"s{i}", title="x"),
            )
        took = time.perf_counter() - started
        rate = appends / took
        print(f"append with lock + check + fsync: {rate:,.0f} records/s ({appends} appends)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--appends", type=int, default=300)
    args = parser.parse_args()
    main(args.records, args.appends)
