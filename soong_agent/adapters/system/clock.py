"""The real clock and id generator."""

from __future__ import annotations

import os
import random
import time


class SystemClock:
    """Wall-clock and monotonic time from the `time` module (its functions themselves: the
    loop reads the clock about ten times a turn, and a method around each costs a frame)."""

    now = staticmethod(time.time)
    monotonic = staticmethod(time.monotonic)


class RandomIds:
    """Ids that sort by creation time: a prefix, 8 hex digits of seconds, 12 random hex digits.

    The random part comes from a generator seeded from the OS once per instance: ids must be
    unique, not secret, and a system call per message id would cost more than the rest.
    """

    def __init__(self) -> None:
        self._random = random.Random(os.urandom(16))

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{int(time.time()):08x}{self._random.getrandbits(48):012x}"
