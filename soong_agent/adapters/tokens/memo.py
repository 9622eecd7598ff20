"""Counts of long texts kept between processes (the system prompt is the same run after run):
a small JSON file of content hashes and their o200k_base counts, so a new process knows the
exact size of a prompt it has seen without loading the tokenizer's tables (~0.3 s)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path

MIN_CHARS = 2_048
"""Shorter texts are not kept: counting them is not worth a look-up, nor a line."""
MAX_ENTRIES = 256
"""Past this, the oldest counts are dropped when a new one is saved."""


def text_key(text: str) -> str:
    """The key of a text: a 128-bit BLAKE2b of its UTF-8 (surrogates passed through)."""
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class CountMemo:
    """The counts of one file, read at the first look-up; a file that cannot be read is as
    good as none, and one that cannot be written only costs the next process a count."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._counts: dict[str, int] | None = None
        self._lock = threading.Lock()

    def get(self, text: str) -> int | None:
        """The kept count of `text`, or None (a short text is never kept)."""
        if len(text) < MIN_CHARS:
            return None
        return self._load().get(text_key(text))

    def put(self, text: str, count: int) -> None:
        """Keep the count of `text` (a long one) and save the file when it is new."""
        if len(text) < MIN_CHARS:
            return
        key = text_key(text)
        with self._lock:
            counts = self._load()
            if counts.get(key) == count:
                return
            counts.pop(key, None)
            counts[key] = count
            while len(counts) > MAX_ENTRIES:
                del counts[next(iter(counts))]
            snapshot = dict(counts)
        self._save(snapshot)

    def _load(self) -> dict[str, int]:
        counts = self._counts
        if counts is None:
            counts = self._counts = _read(self.path)
        return counts

    def _save(self, counts: dict[str, int]) -> None:
        with contextlib.suppress(OSError):  # no cache folder, a full disk: counted next time
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=".o200k-", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as file:
                    json.dump(counts, file, separators=(",", ":"))
                os.replace(temp, self.path)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
                raise


def _read(path: Path) -> dict[str, int]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as file:
            data = json.loads(file.read(1 << 20))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        k: v
        for k, v in data.items()
        if isinstance(k, str) and type(v) is int and v >= 0 and len(k) == 32
    }
