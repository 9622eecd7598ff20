"""A run that waits for something outside it — an answer to an approval, a queued worker's or
teammate's run, its teammates — holds no slot of the worker process running it (WORK-2).

`PARKED` is set by the worker for each run it holds (the run's task copies it); whoever waits
on the run's behalf wraps the wait in `parked()`, which tells the worker when the wait begins
and ends (waits may nest and overlap: the worker counts them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

__all__ = ["PARKED", "parked"]

PARKED: ContextVar[Callable[[bool], None] | None] = ContextVar("soong_agent_parked", default=None)
"""Told True while the current run waits, False when it goes on (set by the worker; None
elsewhere)."""


@contextlib.contextmanager
def parked() -> Iterator[None]:
    """The current run waits meanwhile (nothing happens outside a worker)."""
    park = PARKED.get()
    if park is not None:
        park(True)
    try:
        yield
    finally:
        if park is not None:
            park(False)
