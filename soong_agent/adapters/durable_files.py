"""Low-level file writes the append-only file adapters share (task log, mailbox): whole writes
on a descriptor and durable directory entries. Not an adapter family: any may import it."""

from __future__ import annotations

import os
from pathlib import Path


def read_all(fd: int) -> bytes:
    """Everything from the descriptor's position to the end."""
    chunks: list[bytes] = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
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
