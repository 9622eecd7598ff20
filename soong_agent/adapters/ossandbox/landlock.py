"""Commands under Landlock (+ seccomp) (SBX-3): where user namespaces are refused.

Landlock restricts a thread and everything it starts, irreversibly. So commands are not
restricted one by one (a ``preexec_fn`` costs 10–24 ms a command and runs Python between fork
and exec); a dedicated spawner thread per policy restricts itself once, runs an event loop, and
every command under that policy is spawned and waited for on it (`LandlockSandbox.run` hands
the runner's `start` to that loop). What the thread applies to itself, and so to every command:

- Landlock file rules from `policy.landlock_rules` (read everywhere but the denied paths,
  write in the write roots and the tmp folder);
- without a network grant, a seccomp filter refusing ``socket()`` for every family but
  AF_UNIX (and ``io_uring_setup``, whose socket operations would bypass it), Landlock's TCP
  rules where the kernel has them (ABI 4), and its abstract-UNIX-socket scope (ABI 6);
- with ``sandbox.network = "allowlist"`` (SBX-4): TCP connections to the filtering proxy's
  loopback port only (Landlock's TCP rules) and no socket but AF_UNIX and AF_INET TCP
  (seccomp); the proxy variables are set through ``env`` in front of the command. Landlock
  cannot tell addresses apart, so the proxy's port on another address is reachable too (by
  IP: no name can be resolved); bubblewrap's network namespace has no such gap;
- the signal scope (ABI 6): a command cannot signal the agent;
- as root: every capability dropped from the thread's bounding, effective and permitted sets,
  so a command started as root has none (Landlock binds root too, the capabilities would
  not, e.g. for reading another process's memory).

A spawner thread lives in the agent's process, so a command could otherwise open
``/proc/<agent>/task/<spawner>/environ`` (the same Landlock domain): the agent process is
made non-dumpable when the first spawner starts, which closes ``/proc/<agent>/…`` to every
process without CAP_SYS_PTRACE (none of the commands has it).

Limits, as the kernel sets them (Landlock only grants, per file hierarchy): rules bind the
files that exist when a spawner starts (a file created later directly in a folder on the way
to a denied path, e.g. in ``~``, is not readable to commands); a denied folder's names can
be listed, not read; a denied path inside a writable folder (a ``.env`` in the project)
stays readable (`policy.landlock_unenforced`; ``sandbox check`` lists them), since hiding it
would take the right to write new files beside it. Bubblewrap has none of these limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import os
import shutil
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, get_args

from soong_agent.adapters.ossandbox.denials import find_denials
from soong_agent.adapters.ossandbox.landlock_rules import Right, landlock_rules
from soong_agent.adapters.ossandbox.network_filters import no_network_filter, proxied_filter
from soong_agent.adapters.ossandbox.proxied import (
    CommandProxy,
    forget_proxy_denials,
    proxy_denials,
    proxy_session,
    require_proxy,
    started,
)
from soong_agent.ports.ossandbox import (
    Mechanism,
    SandboxDenial,
    SandboxPolicy,
    SandboxUnavailable,
)

T = TypeVar("T")

_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_CAP_VERSION_3 = 0x20080522


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _drop_capabilities() -> None:
    """Empty this thread's bounding, effective, permitted and inheritable capability sets."""
    libc = _libc()
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as handle:
            last = int(handle.read().strip())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            code = ctypes.get_errno()
            if code != errno.EINVAL:
                raise OSError(code, f"dropping capability {cap}: {os.strerror(code)}")

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        ]

    header = Header(_CAP_VERSION_3, 0)
    data = (Data * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"capset: {os.strerror(code)}")


def protect_agent_process() -> None:
    """Make this process non-dumpable: its ``/proc/<pid>`` files (environ, mem) are closed to
    every process without CAP_SYS_PTRACE, a command in the spawner's domain included."""
    _libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def _access_flags(rights: frozenset[Right]) -> Any:
    from landlockpy import AccessFS

    flags = AccessFS.NONE
    for right in rights:
        flags |= AccessFS[right.upper()]
    return flags


def restrict_current_thread(
    policy: SandboxPolicy, *, drop_capabilities: bool = True, proxy_port: int | None = None
) -> None:
    """Apply `policy` to the calling thread and everything it starts from now on.

    With `proxy_port` (a proxied policy, SBX-4) the one network the thread keeps is a TCP
    connection to that port: Landlock's TCP rules allow connecting to it only (and binding
    nothing), seccomp refuses every socket but AF_UNIX and AF_INET TCP (so no UDP, no DNS,
    no raw socket, no IPv6).

    Raises SandboxUnavailable when Landlock (or, without a network grant, every way of
    refusing the network, or for `proxy_port` Landlock's TCP rules and seccomp) is missing.
    """
    try:
        import landlockpy
        from landlockpy import AccessFS, AccessNet, Scope
    except ImportError as exc:  # pragma: no cover - a dependency
        raise SandboxUnavailable(f"the Python package landlockpy is missing: {exc}") from exc
    abi = landlockpy.abi_version()
    if abi < 1:
        raise SandboxUnavailable("this kernel has no Landlock")
    known = AccessFS.NONE
    for right in get_args(Right):  # every right the policy speaks of
        known |= AccessFS[right.upper()]
    handled_fs = known & landlockpy.fs_for_abi(abi)
    handled_net = AccessNet.NONE
    scoped = Scope.SIGNAL if abi >= 6 else Scope.NONE
    seccomp_filter = None
    if not policy.network:
        handled_net = landlockpy.net_for_abi(abi)
        if abi >= 6:
            scoped |= Scope.ABSTRACT_UNIX_SOCKET
        seccomp_filter = no_network_filter() if proxy_port is None else proxied_filter()
        if proxy_port is not None and (
            seccomp_filter is None or not handled_net & AccessNet.CONNECT_TCP
        ):
            raise SandboxUnavailable(
                'sandbox.network = "allowlist" needs Landlock\'s TCP rules (ABI 4, Linux 6.7+; '
                f"this kernel has ABI {abi}) and seccomp filters "
                f"({'available' if seccomp_filter is not None else 'unavailable'} here)"
            )
        if seccomp_filter is None and not handled_net:
            raise SandboxUnavailable(
                "no way to refuse the network: seccomp filters are unavailable and this "
                f"kernel's Landlock (ABI {abi}) has no network rules"
            )
    with landlockpy.Ruleset(handled_fs=handled_fs, handled_net=handled_net, scoped=scoped) as rs:
        for rule in landlock_rules(policy):
            # a path that went away or cannot be opened gets no rule: it stays refused
            with contextlib.suppress(OSError):
                rs.allow_path(rule.path, _access_flags(rule.rights))
        if proxy_port is not None:
            rs.allow_port(proxy_port, AccessNet.CONNECT_TCP)
        if drop_capabilities and os.geteuid() == 0:
            _drop_capabilities()
        rs.restrict()
    if seccomp_filter is not None:
        seccomp_filter.load()


class _SpawnerThread:
    """A thread that restricted itself once and runs an event loop for the commands."""

    def __init__(self, name: str, restrict: Callable[[], None]) -> None:
        self._restrict = restrict
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.active = 0
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        """Start the thread and wait until it is restricted; raises what restricting raised."""
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            if isinstance(self._error, SandboxUnavailable):
                raise self._error
            raise SandboxUnavailable(
                f"Landlock could not be applied: {self._error}"
            ) from self._error

    def _main(self) -> None:
        try:
            self._restrict()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    def stop(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._loop.stop)

    async def call(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run `work()` on this thread's loop; cancelling the caller cancels it and waits for
        its end (so a runner's kill of the process group has happened before this returns)."""
        loop = self._loop
        assert loop is not None
        caller = asyncio.get_running_loop()
        done: asyncio.Future[T] = caller.create_future()
        tasks: list[asyncio.Task[T]] = []

        def settle(task: asyncio.Task[T]) -> None:
            if done.done():
                return
            if task.cancelled():
                done.cancel()
            elif (exc := task.exception()) is not None:
                done.set_exception(exc)
            else:
                done.set_result(task.result())

        def report(task: asyncio.Task[T]) -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop is gone
                caller.call_soon_threadsafe(settle, task)

        async def run() -> T:
            return await work()

        def begin() -> None:
            task = loop.create_task(run())
            task.add_done_callback(report)
            tasks.append(task)

        def cancel() -> None:
            for task in tasks:
                task.cancel()

        self.active += 1
        try:
            loop.call_soon_threadsafe(begin)
            try:
                return await asyncio.shield(done)
            except asyncio.CancelledError:
                loop.call_soon_threadsafe(cancel)
                with contextlib.suppress(BaseException):
                    await asyncio.shield(done)
                raise
        finally:
            self.active -= 1


class LandlockSandbox:
    """Runs each command from a spawner thread restricted to the command's policy.

    One spawner per distinct policy (a runtime has one or two: with and without network);
    at most `max_spawners` idle ones are kept. `protect_agent` makes the agent process
    non-dumpable when the first spawner starts (see the module documentation).
    """

    def __init__(
        self,
        *,
        max_spawners: int = 8,
        protect_agent: bool = True,
        proxy: CommandProxy | None = None,
        env_program: str | None = None,
    ) -> None:
        self._proxy = proxy
        self._env_program = env_program or shutil.which("env") or "/usr/bin/env"
        self._spawners: dict[tuple[SandboxPolicy, int | None], _SpawnerThread] = {}
        self._lock = threading.Lock()
        self._max = max_spawners
        self._protect_agent = protect_agent
        self._protected = False

    def __repr__(self) -> str:
        return f"LandlockSandbox(spawners={len(self._spawners)})"

    @property
    def mechanism(self) -> Mechanism:
        return "landlock"

    @property
    def unsandboxed(self) -> bool:
        return False

    def _spawner(self, policy: SandboxPolicy, proxy_port: int | None = None) -> _SpawnerThread:
        key = (policy, proxy_port)
        with self._lock:
            spawner = self._spawners.get(key)
            if spawner is not None:
                return spawner
            if self._protect_agent and not self._protected:
                protect_agent_process()
                self._protected = True
            if len(self._spawners) >= self._max:
                for key, idle in list(self._spawners.items()):
                    if idle.active == 0:
                        idle.stop()
                        del self._spawners[key]
                        break
            spawner = _SpawnerThread(
                f"soong-landlock-{len(self._spawners)}",
                lambda: restrict_current_thread(policy, proxy_port=proxy_port),
            )
            spawner.start()
            self._spawners[key] = spawner
            return spawner

    async def run(
        self,
        argv: Sequence[str],
        policy: SandboxPolicy,
        start: Callable[[Sequence[str]], Awaitable[T]],
    ) -> T:
        forget_proxy_denials()
        if not policy.proxied:
            spawner = await self._ready_spawner(policy, None)
            final = list(argv)
            return await spawner.call(lambda: start(final))
        proxy = require_proxy(self._proxy)
        port = await started(proxy)
        spawner = await self._ready_spawner(policy, port)
        with proxy_session(proxy, argv) as token:
            assignments = [f"{k}={v}" for k, v in proxy.command_env(token).items()]
            proxied = [self._env_program, *assignments, *argv]
            return await spawner.call(lambda: start(proxied))

    async def _ready_spawner(self, policy: SandboxPolicy, port: int | None) -> _SpawnerThread:
        spawner = self._spawners.get((policy, port))
        if spawner is None:
            # restricting walks a few folders and makes a few hundred rules: off the loop
            spawner = await asyncio.to_thread(self._spawner, policy, port)
        return spawner

    def denials(self, output: str, policy: SandboxPolicy, cwd: str) -> tuple[SandboxDenial, ...]:
        found = find_denials(output, policy, cwd, "landlock")
        return found + proxy_denials(policy, "landlock")

    def close(self) -> None:
        """Stop every spawner thread."""
        with self._lock:
            for spawner in self._spawners.values():
                spawner.stop()
            self._spawners.clear()
