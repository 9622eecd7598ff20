"""Paths as the OS sandbox sees them (SBX-3): what is at a path, and whether one lies below
another."""

from __future__ import annotations

import os
import stat
from typing import Literal

PathKind = Literal["dir", "file", "symlink", "other"]

DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
"""Device files every command may write (``> /dev/null``)."""


def path_kind(path: str) -> PathKind | None:
    """What is at `path` without following a final symlink; None when nothing is."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def is_within(path: str, root: str) -> bool:
    """Whether the absolute `path` is `root` or lies below it."""
    return path == root or path.startswith(root.rstrip("/") + "/")
