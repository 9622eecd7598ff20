"""`soong-agent sandbox check` (SBX-3): which OS sandbox works here; if none, why and the fix.

Every mechanism is tried for real (a trial command must fail to read a denied file and to
write outside its root). Then what each `sandbox.os` mode would do, and, when the config
loads, the policy commands of the project would run under, and their network (SBX-4): the
mode, the allow-list and the filtering proxy. Exit status 0 when commands
would run sandboxed (or `sandbox.os` is explicitly ``off``), 1 otherwise.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, get_args

from soong_agent.adapters.ossandbox.policy import landlock_unenforced
from soong_agent.entrypoints.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, fail
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.ossandbox import SandboxMode, SandboxPolicy, SandboxProbe

if TYPE_CHECKING:
    from soong_agent.adapters.config.toml_loader import LoadedConfig

MODES: tuple[SandboxMode, ...] = get_args(SandboxMode)


def configured_mode(loaded: LoadedConfig | None) -> SandboxMode:
    """`sandbox.os` of the config (``auto`` when the config did not load)."""
    return loaded.config.sandbox.os if loaded is not None else "auto"


def render_probe(probe: SandboxProbe) -> list[str]:
    """One line per mechanism, then its cause and fix when it does not work."""
    lines = ["OS sandbox mechanisms (best first):"]
    for status in probe.statuses:
        verdict = "works" if status.works else "does NOT work"
        detail = f"  {status.detail}" if status.detail else ""
        lines.append(
            f"  {status.mechanism:<10} {verdict:<13} trial {status.elapsed_ms:.0f} ms{detail}"
        )
        if not status.works:
            lines.append(f"      cause: {status.cause}")
            if status.fix:
                lines.append(f"      fix:   {status.fix}")
    return lines


def render_modes(probe: SandboxProbe, current: SandboxMode) -> list[str]:
    """What each `sandbox.os` value does on this host; the configured one is marked."""
    best = probe.best
    outcome = {
        "auto": best or "none: commands run UNSANDBOXED (one warning, results marked)",
        "required": best or "none: every command is refused",
        "off": "none (explicitly off; results marked unsandboxed)",
    }
    lines = ["sandbox.os:"]
    for mode in MODES:
        mark = "*" if mode == current else " "
        lines.append(f"  {mark} {mode:<8} -> {outcome[mode]}")
    return lines


def render_policy(policy: SandboxPolicy) -> list[str]:
    """The policy: where commands may write, what they cannot read, and the network."""
    lines = ["policy for commands of this project:"]
    lines.append("  writable:  " + (", ".join(policy.writable()) or "(nothing)"))
    if policy.deny_paths:
        lines.append("  hidden (neither read nor written):")
        for path, reason in zip(policy.deny_paths, policy.deny_reasons, strict=False):
            lines.append(f"    {path}  ({reason})")
    else:
        lines.append("  hidden:    (nothing that exists)")
    for exception in policy.read_exceptions:
        lines.append(f"  readable inside a hidden folder: {exception}")
    if policy.network:
        network = "allowed (sandbox.network = true)"
    elif policy.proxied:
        network = 'only the allow-list, through the filtering proxy (sandbox.network = "allowlist")'
    else:
        network = "none"
    lines.append("  network:   " + network)
    unenforced = landlock_unenforced(policy)
    if unenforced:
        lines.append(
            "  under Landlock, still readable (inside a writable folder): " + ", ".join(unenforced)
        )
    return lines


def render_network(loaded: LoadedConfig, probe: SandboxProbe, current: SandboxMode) -> list[str]:
    """The commands' network (SBX-4): the mode and where it comes from, the allow-list, and
    the filtering proxy, started here for a moment to show it listens (each runtime starts
    its own at its first command, on another port)."""
    config = loaded.config
    allowed = config.tools.network
    mechanism = probe.best if current != "off" else None
    mode = config.sandbox.command_network(allowed, mechanism)
    shown = {True: "true (any host)", False: "false (none)", "allowlist": '"allowlist"'}[mode]
    origin = "set" if config.sandbox.network is not None else "default, from tools.network"
    if origin != "set" and not mode and config.sandbox.command_network(allowed) == "allowlist":
        origin = (
            "default under Landlock, which cannot keep commands from the proxy's port on "
            'other addresses; set sandbox.network = "allowlist" to take the allow-list anyway'
        )
    lines = [f"network of commands: sandbox.network = {shown} ({origin})"]
    hosts = ", ".join(allowed.allowed_hosts) or "(none)"
    domains = ", ".join(allowed.allowed_domains) or "(none)"
    lines.append(f"  tools.network.allowed_hosts:   {hosts}")
    lines.append(f"  tools.network.allowed_domains: {domains}")
    if mode != "allowlist":
        return lines
    if config.permissions.network_policy == "deny":
        lines.append('  permissions.network_policy = "deny": the proxy refuses every host')
    if current == "off" or probe.best is None:
        lines.append("  proxy: not used, commands are not confined (they have the host's network)")
        return lines
    from soong_agent.entrypoints.factories.safety import network_proxy

    proxy = network_proxy(loaded)
    try:
        address = proxy.start()
        lines.append(
            f"  proxy: works, listening on {address.host}:{address.port} and "
            f"{address.unix_path} (for this check; a runtime starts its own)"
        )
    except (OSError, RuntimeError) as exc:
        lines.append(f"  proxy: does NOT start: {exc}")
    finally:
        proxy.close()
    if probe.best == "landlock":
        lines.append(
            "  under Landlock: TCP to the proxy's port only (on any address; no name "
            "resolution, no UDP); bubblewrap gives each command a network of its own"
        )
    return lines


def check_sandbox(*, path: str | None, mode: str | None = None) -> int:
    """Print the probe, the modes and the policy; see the module documentation."""
    if mode is not None and mode not in MODES:
        return fail(f"--mode: expected one of {', '.join(MODES)}, got {mode!r}", EXIT_USAGE)
    from soong_agent.adapters.ossandbox import probe_host
    from soong_agent.adapters.ossandbox.config import command_tmp_dir, policy_for_config

    probe = probe_host(every_mechanism=True, refresh=True)
    loaded: LoadedConfig | None = None
    problem = ""
    try:
        from soong_agent.entrypoints.sdk import load

        loaded = load(path, None)
    except SoongAgentError as exc:
        problem = str(exc)
    current: SandboxMode = mode if mode in MODES else configured_mode(loaded)
    lines = render_probe(probe)
    lines += render_modes(probe, current)
    if loaded is not None:
        policy = policy_for_config(
            loaded.config.tools,
            project=str(loaded.project),
            agent_home=str(loaded.home),
            session_db=loaded.config.context.session_db_path,
            tmp_dir=command_tmp_dir(),
            network=loaded.config.sandbox.command_network(
                loaded.config.tools.network, probe.best if current != "off" else None
            ),
        )
        lines += render_policy(policy)
        lines += render_network(loaded, probe, current)
    else:
        lines.append(f"policy: not shown, the config did not load ({problem})")
    sys.stdout.write("\n".join(lines) + "\n")
    if current == "off" or probe.best is not None:
        return EXIT_OK
    return EXIT_FAILED
