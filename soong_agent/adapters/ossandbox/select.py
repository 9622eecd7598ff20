"""From `sandbox.os` and the probe to the sandbox commands run in (SBX-3). Never off silently.

- ``auto``: the best mechanism that works; when none does, `NoSandbox` and one loud line
  (`SandboxChoice.warning`) naming each mechanism's cause; every result says ``unsandboxed``.
- ``required``: the best mechanism; when none works, `RefusingSandbox` (every command is
  refused with the cause and the fix).
- ``off``: `NoSandbox`, because the user said so (results still say ``unsandboxed``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from soong_agent.adapters.ossandbox.bubblewrap import BubblewrapSandbox, find_bwrap
from soong_agent.adapters.ossandbox.landlock import LandlockSandbox
from soong_agent.adapters.ossandbox.none import NoSandbox, RefusingSandbox
from soong_agent.adapters.ossandbox.probe import probe_host
from soong_agent.adapters.ossandbox.proxied import CommandProxy
from soong_agent.ports.ossandbox import CommandSandbox, SandboxMode, SandboxPolicy, SandboxProbe


@dataclass(frozen=True, slots=True)
class SandboxChoice:
    """The sandbox to use, the probe behind it, and the loud line to show once (or None)."""

    sandbox: CommandSandbox
    probe: SandboxProbe | None
    warning: str | None = None


def choose_sandbox(
    mode: SandboxMode, *, probe: SandboxProbe | None = None, proxy: CommandProxy | None = None
) -> SandboxChoice:
    """The sandbox for `mode`, probing the host (once per process) unless `probe` is given;
    `proxy` is the filtering proxy proxied policies reach the network through (SBX-4)."""
    if mode == "off":
        return SandboxChoice(NoSandbox('sandbox.os = "off"'), probe)
    probe = probe if probe is not None else probe_host()
    best = probe.best
    if best == "bubblewrap":
        found = find_bwrap()
        if found is not None:
            return SandboxChoice(BubblewrapSandbox(found[0], source=found[1], proxy=proxy), probe)
    if best == "landlock":
        return SandboxChoice(LandlockSandbox(proxy=proxy), probe)
    if best is None and len(probe.statuses) < 2:
        probe = probe_host(every_mechanism=True)
        if probe.best == "landlock":
            return SandboxChoice(LandlockSandbox(proxy=proxy), probe)
    why = probe.why_none() or "no mechanism was found"
    if mode == "required":
        fixes = "; ".join(f"{s.mechanism}: {s.fix}" for s in probe.statuses if s.fix)
        return SandboxChoice(RefusingSandbox(why, fixes), probe)
    warning = (
        f"NO OS SANDBOX: none works on this host ({why}); commands run UNSANDBOXED. "
        '`soong-agent sandbox check` says how to fix it; sandbox.os = "required" refuses to '
        "run commands instead."
    )
    return SandboxChoice(NoSandbox(f"no mechanism works ({why})"), probe, warning)


_shown: set[str] = set()
_shown_lock = threading.Lock()


def warning_once(choice: SandboxChoice) -> str | None:
    """`choice.warning` the first time this process asks for that line, None afterwards."""
    if choice.warning is None:
        return None
    with _shown_lock:
        if choice.warning in _shown:
            return None
        _shown.add(choice.warning)
        return choice.warning


def model_note(sandbox: CommandSandbox, policy: SandboxPolicy) -> str:
    """What the sandbox allows commands, in a sentence for the run_command description."""
    if isinstance(sandbox, RefusingSandbox):
        return (
            'Commands are refused here: sandbox.os = "required" and no OS sandbox works on '
            "this host."
        )
    if sandbox.unsandboxed:
        return "Commands run without an OS sandbox."
    others = [p for p in policy.write_roots if p != policy.project]
    where = "the project folder" + (f", {', '.join(others)}" if others else "")
    if policy.tmp_dir:
        where += " and $TMPDIR"
    network = "may use the network" if policy.network else "have no network"
    if policy.proxied:
        network = (
            "reach only the hosts the user allowed (tools.network), through a proxy the "
            "proxy variables (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY) already name; a refused "
            "host answers 403"
        )
    return (
        f"Commands run in an OS sandbox ({sandbox.mechanism}): they can write only in {where}, "
        f"cannot read sensitive files (keys, credentials, the agent's own files) and {network}; "
        "the result says when the sandbox refused something."
    )
