"""The store's worker thread: calls in order on one thread, failures said, nothing queued lost
at close or at interpreter exit."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from soong_agent.adapters.storage.worker import SerialWorker


def test_calls_run_in_order_on_one_named_thread() -> None:
    worker = SerialWorker("soong-test")
    seen: list[tuple[int, str]] = []
    for i in range(50):
        worker.submit(lambda i=i: seen.append((i, threading.current_thread().name)))
    worker.stop()
    assert [i for i, _ in seen] == list(range(50))
    assert {name for _, name in seen} == {"soong-test"}


def test_a_failing_call_is_logged_and_the_next_one_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = SerialWorker("soong-test")
    done = threading.Event()

    def broken() -> None:
        raise ValueError("disk on fire")

    with caplog.at_level(logging.ERROR):
        worker.submit(broken)
        worker.submit(done.set)
        assert done.wait(10)
        worker.stop()
    assert "disk on fire" in caplog.text and "soong-test" in caplog.text


def test_stop_runs_what_is_queued_then_refuses_more() -> None:
    worker = SerialWorker("soong-test")
    gate, seen = threading.Event(), []
    worker.submit(gate.wait, 10)
    for i in range(3):
        worker.submit(seen.append, i)
    gate.set()
    worker.stop()
    assert seen == [0, 1, 2]
    with pytest.raises(RuntimeError, match="stopped"):
        worker.submit(seen.append, 9)
    worker.stop()  # again: nothing happens


def test_work_queued_just_before_the_interpreter_exits_is_still_done(tmp_path: Path) -> None:
    out = tmp_path / "written.txt"
    script = (
        "import time\n"
        "from soong_agent.adapters.storage.worker import SerialWorker\n"
        "w = SerialWorker('soong-exit')\n"
        f"w.submit(lambda: (time.sleep(0.3), open({str(out)!r}, 'w').write('late commit')))\n"
        "# the script ends at once: the worker is a daemon thread, stopped by the exit hook\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text() == "late commit"
