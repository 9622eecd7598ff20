"""The store's worker thread: calls in order on one thread, failures said, nothing queued lost
at close or at interpreter exit."""

from __future__ import annotations

import gc
import logging
import subprocess
import sys
import threading
import weakref
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


class _Payload:
    """Something a call is handed (a result list, say), watched through a weak reference."""


def test_the_thread_keeps_nothing_of_a_finished_call() -> None:
    worker = SerialWorker("soong-test")
    done = threading.Event()
    payload = _Payload()
    watch = weakref.ref(payload)
    worker.submit(lambda p: done.set(), payload)
    assert done.wait(10)
    del payload
    for _ in range(100):  # the thread drops the call once it has run (no sleep needed mostly)
        gc.collect()
        if watch() is None:
            break
        threading.Event().wait(0.01)
    assert watch() is None
    worker.stop()


def test_a_worker_dropped_without_stop_ends_its_thread() -> None:
    worker = SerialWorker("soong-dropped")
    ran = threading.Event()
    worker.submit(ran.set)
    assert ran.wait(10)
    thread = next(t for t in threading.enumerate() if t.name == "soong-dropped")
    del worker
    gc.collect()
    thread.join(10)
    assert not thread.is_alive()
