"""A cache of the functions `dataclasses` writes, kept between runs of the command line.

Every `@dataclass` has its methods (`__init__`, `__repr__`, `__eq__`, …) written as source text
and compiled when its module is imported: on the way to a run's first request ~900 of them,
compiled afresh by every process, ~0.1 s of its start. This keeps what they compile to, like
the `.pyc` files of the modules themselves: keyed by the exact source text, in a file of the
user's cache folder per interpreter version (`$XDG_CACHE_HOME/soong-agent/` or
`~/.cache/soong-agent/`), read once, when the first dataclass is made, and written when
something new was compiled.

Only the command line uses it: `dataclasses` is given its own `exec`, which runs the cached
code of a text it has seen (and compiles and notes one it has not); anything that is not
such a text goes to the real `exec`. A cache file that cannot be read is as good as none, and
one that cannot be written only costs the next start the compiling.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import importlib.util
import marshal
import os
import sys
from pathlib import Path
from types import CodeType
from typing import Any

_HEADER = b"soong-agent dataclass code\n" + importlib.util.MAGIC_NUMBER
_MAX_ENTRIES = 20_000
"""Past this (texts of dataclasses long gone, after many upgrades), a save keeps only what
this process used and compiled."""


class DataclassCodeCache:
    """Compiled dataclass methods by source text; see the module."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.known: dict[str, CodeType] = {}
        self.new: dict[str, CodeType] = {}
        self.used: set[str] = set()
        self._loaded = False

    def load(self) -> None:
        """Read the file, if there is a usable one (another version's or a damaged one is
        ignored and replaced at the next `save`)."""
        self._loaded = True
        try:
            with open(self.path, "rb") as file:
                # code is run from it: only a file of this user's is trusted
                if hasattr(os, "getuid") and os.fstat(file.fileno()).st_uid != os.getuid():
                    return
                data = file.read()
        except OSError:  # none yet, or unreadable: start empty
            return
        if not data.startswith(_HEADER):
            return
        try:
            table = marshal.loads(data[len(_HEADER) :])
        except (EOFError, ValueError, TypeError):  # damaged: rebuilt at the next save
            return
        if isinstance(table, dict):
            self.known = {
                k: v for k, v in table.items() if isinstance(k, str) and isinstance(v, CodeType)
            }

    def exec(self, source: Any, globals: Any = None, locals: Any = None, /) -> None:
        """`exec`, with the code of a source text compiled once across runs."""
        if isinstance(source, str):
            if not self._loaded:  # read at the first dataclass made: a `--help` makes none
                self.load()
            code = self.known.get(source) or self.new.get(source)
            if code is not None:
                self.used.add(source)
            else:
                # as `exec` would compile it there: no future flag of this module inherited
                code = compile(source, "<string>", "exec", dont_inherit=True)
                self.new[source] = code
            source = code
        builtins.exec(source, globals, locals)

    def install(self) -> None:
        """Make `dataclasses` compile through this cache (in this process)."""
        dataclasses.exec = self.exec  # type: ignore[attr-defined]

    def save(self) -> None:
        """Write the file when something was compiled that it does not hold (atomically: a
        process reading it meanwhile sees the old or the new one)."""
        if not self.new:
            return
        table = {**self.known, **self.new}
        if len(table) > _MAX_ENTRIES:
            table = {k: v for k, v in table.items() if k in self.used or k in self.new}
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            import tempfile  # (only a start that compiled something writes)

            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".dataclasses-")
        except OSError:  # a read-only cache folder: the next start compiles again
            return
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(_HEADER + marshal.dumps(table))
            os.replace(tmp, self.path)
        except OSError:  # a full disk, say: nothing half-written is left behind
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return
        self.known, self.new = table, {}


def cache_path(env: dict[str, str] | os._Environ[str], user_home: str) -> Path:
    """The cache file of this interpreter: `$XDG_CACHE_HOME` (else `~/.cache`)/soong-agent/;
    a relative `XDG_CACHE_HOME` is ignored, as the XDG rules say."""
    folder = env.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(folder):
        folder = os.path.join(user_home, ".cache")
    tag = sys.implementation.cache_tag or "python"
    return Path(folder) / "soong-agent" / f"dataclasses.{tag}.marshal"


def start() -> DataclassCodeCache:
    """Install the cache of this user and interpreter (the command line's start); its file is
    read when the first dataclass is made."""
    cache = DataclassCodeCache(cache_path(os.environ, os.path.expanduser("~")))
    cache.install()
    return cache
