"""The sandbox policy of a loaded configuration, and the commands' private tmp folder (SBX-3)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from typing import Literal

from soong_agent.adapters.ossandbox.policy import build_policy
from soong_agent.domain.config.schema import ToolsConfig
from soong_agent.ports.ossandbox import SandboxPolicy


def policy_for_config(
    tools: ToolsConfig,
    *,
    project: str,
    agent_home: str,
    session_db: str | None = None,
    tmp_dir: str | None = None,
    network: bool | Literal["allowlist"] = False,
    home: str | None = None,
) -> SandboxPolicy:
    """The policy for commands of a project under `tools` (placeholders already expanded):
    `tools.allowed_write_roots` (+ the system tmp with `allow_tmp_write`), `tmp_dir`, and
    denied: `agent_home`, the session database wherever it is, ``~/.ssh`` (but
    ``known_hosts``), ``~/.aws``, ``~/.gnupg`` and `tools.sensitive_paths`."""
    also = [(session_db, "the session database")] if session_db else []
    return build_policy(
        project=project,
        write_roots=tools.allowed_write_roots,
        sensitive=tools.sensitive_paths,
        agent_home=agent_home,
        home=home,
        tmp_dir=tmp_dir,
        allow_tmp_write=tools.allow_tmp_write,
        network=network,
        also_deny=also,
    )


_tmp_lock = threading.Lock()
_tmp_dirs: dict[int, str] = {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def command_tmp_dir() -> str:
    """This process's private tmp folder for commands (``TMPDIR`` inside the sandbox).

    ``<tmp>/soong-sandbox-<uid>/cmd-<pid>``, mode 0700; made once per process. The folders of
    processes that are gone are removed when a new one is made, so none pile up even though
    the CLI ends without a clean-up.
    """
    with _tmp_lock:
        made = _tmp_dirs.get(os.getpid())
        if made is not None and os.path.isdir(made):
            return made
        parent = os.path.join(tempfile.gettempdir(), f"soong-sandbox-{os.geteuid()}")
        with contextlib.suppress(FileExistsError):
            os.mkdir(parent, 0o700)
        info = os.lstat(parent)
        if info.st_uid != os.geteuid() or os.path.islink(parent) or info.st_mode & 0o077:
            made = os.path.realpath(tempfile.mkdtemp(prefix="soong-cmd-"))
            _tmp_dirs[os.getpid()] = made
            return made
        with contextlib.suppress(OSError):
            for name in os.listdir(parent):
                if name.startswith("cmd-") and name[4:].isdigit() and not _alive(int(name[4:])):
                    shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        path = os.path.join(parent, f"cmd-{os.getpid()}")
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        made = os.path.realpath(path)
        _tmp_dirs[os.getpid()] = made
        return made
