"""The real clock and id generator."""

from __future__ import annotations

import os
import time


class SystemClock:
    """Wall-clock and monotonic time from the `time` module."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class RandomIds:
    """Ids that sort by creation time: a prefix, 8 hex digits of seconds, 12 random hex digits."""

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{int(time.time()):08x}{os.urandom(6).hex()}"
