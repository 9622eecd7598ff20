"""Low-level file I/O the file adapters share (sandboxed files, task log, mailbox): whole reads
and writes on a descriptor and durable directory entries. Not an adapter family: any may
import it."""

from __future__ import annotations

import os
from pathlib import Path

_CHUNK = 1 << 20


def read_all(fd: int, max_bytes: int | None = None) -> bytes:
    """Everything from the descriptor's position to the end, or its first `max_bytes` bytes."""
    chunks: list[bytes] = []
    remaining = max_bytes
    while remaining is None or remaining > 0:
        chunk = os.read(fd, _CHUNK if remaining is None else min(_CHUNK, remaining))
        if not chunk:
            break
        chunks.append(chunk)
        if remaining is not None:
            remaining -= len(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    """All of `data` (`os.write` may write part of it)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_dir(folder: Path) -> None:
    """Make a new directory entry durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
