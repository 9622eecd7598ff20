"""One thread that runs a store's calls in order, for stores whose connection lives on it.

Lighter than a one-worker `ThreadPoolExecutor` on the path every turn takes: a call is one
`SimpleQueue.put`, with no `concurrent.futures.Future`, work item or executor lock around it; the
caller learns the outcome its own way (the SQLite store settles an asyncio future from the
call). The thread is a daemon that starts at the first call; whatever is queued when the
interpreter exits is still run (an exit hook stops every live worker in order), so a commit
handed over just before the end is not lost.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_Call = tuple[Callable[..., object], tuple[Any, ...]]
_LIVE: weakref.WeakSet[SerialWorker] = weakref.WeakSet()


class SerialWorker:
    """Runs submitted calls one after another on a thread of its own."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._stopped = False
        # a worker dropped without `stop` (a store never closed) still ends its thread: the
        # thread holds the queue only, never the worker
        weakref.finalize(self, self._queue.put, None)

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        """Queue `fn(*args)`; it should handle its own errors (one that escapes is logged).
        RuntimeError once the worker has been stopped."""
        if self._stopped:
            raise RuntimeError(f"the worker {self.name} has been stopped")
        if self._thread is None:
            self._start()
        self._queue.put((fn, args))

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is not None:
                return
            thread = threading.Thread(
                target=_serve, args=(self._queue, self.name), name=self.name, daemon=True
            )
            _LIVE.add(self)
            thread.start()
            self._thread = thread

    def stop(self) -> None:
        """Run what is queued, then end the thread and wait for it (idempotent)."""
        self._stopped = True
        thread = self._thread
        if thread is None:
            return
        if thread.is_alive():
            self._queue.put(None)
            if thread is not threading.current_thread():
                thread.join()
        _LIVE.discard(self)


def _serve(calls: queue.SimpleQueue[_Call | None], name: str) -> None:
    """The worker thread: each call in turn, until the end (None) comes."""
    while (call := calls.get()) is not None:
        _run(call, name)
        del call  # what the call held (its arguments, its result) is not kept while idle


def _run(call: _Call, name: str) -> None:
    fn, args = call
    try:
        fn(*args)
    except BaseException:  # the call's own handling failed: said, and the worker goes on
        log.exception("%s: a call failed outside its own error handling", name)


@atexit.register
def _stop_all() -> None:
    """At interpreter exit: the work handed over (a last commit) is done before the end."""
    for worker in list(_LIVE):
        worker.stop()
