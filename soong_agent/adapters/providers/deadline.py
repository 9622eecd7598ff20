"""The limit on a whole model call (`[model] timeout_ms`), held across its reads."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class CallTimedOut(Exception):
    """The call's deadline passed while it waited for the server, or before it could."""


class CallDeadline:
    """The moment a model call must be over, enforced where the call waits for the server.

    The provider's `stream` is an async generator, and `asyncio.timeout` cannot be held
    across its yields: the timer would cancel whatever the consumer happens to await in
    between. So the provider waits through `bound`, and one timer (per call, not per read)
    cancels the task only while it waits there; a deadline that passes while the consumer
    holds control is noticed by the next `bound`. A cancellation this deadline caused comes
    out of `bound` as `CallTimedOut`; any other (the user's) goes on as it came.
    """

    __slots__ = ("_cancelling", "_fired", "_handle", "_loop", "_task", "expired", "when")

    def __init__(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.when = loop.time() + timeout_s
        self.expired = False
        self._task: asyncio.Task[object] | None = None  # set while a `bound` call waits
        self._fired = False
        self._cancelling = 0
        self._handle = loop.call_at(self.when, self._expire)

    def left(self) -> float:
        """Seconds until the deadline (negative once past)."""
        return self.when - self._loop.time()

    async def bound(self, wait: Callable[[], Awaitable[T]]) -> T:
        """`await wait()`, cut off by the deadline (`CallTimedOut`)."""
        if self.expired:
            raise CallTimedOut
        task = self._task = asyncio.current_task()
        try:
            result = await wait()
        except asyncio.CancelledError:
            if self._taken_back(task):
                raise CallTimedOut from None
            raise
        finally:
            self._task = None
        if self._taken_back(task):  # the cancellation was swallowed below: still too late
            raise CallTimedOut
        return result

    def _taken_back(self, task: asyncio.Task[object] | None) -> bool:
        """Whether this deadline cancelled `task` and nobody else did (its request is then
        withdrawn, as `asyncio.timeout` does)."""
        if not self._fired:
            return False
        self._fired = False
        return task is not None and task.uncancel() <= self._cancelling

    def close(self) -> None:
        """Stop the timer (the call is over)."""
        self._handle.cancel()

    def _expire(self) -> None:
        self.expired = True
        task = self._task
        if task is not None:
            self._cancelling = task.cancelling()
            self._fired = True
            task.cancel()
