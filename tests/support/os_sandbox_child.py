"""A world with secrets, and commands that try to reach them, for the OS sandbox tests (SBX-3).

Shared by tests/integration/test_os_sandbox.py (in-process) and run by it as a child process,
where the test needs a process of its own: the agent's own ``/proc/<pid>/environ`` (holding a
canary the parent put in the child's environment), another user (``setpriv``), or a host
that refuses user namespaces and/or Landlock (a seccomp filter the child installs on itself
before anything else, so every thread and process it starts inherits it):

    python tests/support/os_sandbox_child.py [--refuse namespaces,landlock] probe
    python tests/support/os_sandbox_child.py [--refuse …] confine MECHANISM BASE_DIR

``probe`` prints (JSON) what the probe found and what each mode chooses; ``confine`` builds
the world in BASE_DIR, runs the attacks under MECHANISM (``auto`` = what the mode chooses)
and prints (JSON) what every command got.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from soong_agent.adapters.ossandbox import (
    BubblewrapSandbox,
    LandlockSandbox,
    build_policy,
    choose_sandbox,
    find_bwrap,
    probe_host,
)
from soong_agent.adapters.process import SubprocessRunner
from soong_agent.domain.config.schema import DEFAULT_SENSITIVE_PATHS
from soong_agent.ports.ossandbox import CommandSandbox, SandboxPolicy, SandboxUnavailable
from soong_agent.ports.process import ProcessResult

SECRETS = {
    "ssh": "SSH-PRIVATE-KEY-7f3a",
    "aws": "AWS-SECRET-9b1c",
    "config": "AGENT-CONFIG-5d2e",
    "env": "DOTENV-SECRET-3c4d",
}


@dataclass(frozen=True)
class World:
    base: Path
    home: Path
    agent_home: Path
    project: Path
    outside: Path
    tmp: Path

    def policy(self, *, network: bool = False) -> SandboxPolicy:
        sensitive = [
            entry.replace("${SOONG_AGENT_HOME}", str(self.agent_home))
            for entry in DEFAULT_SENSITIVE_PATHS
        ]
        return build_policy(
            project=str(self.project),
            sensitive=sensitive,
            agent_home=str(self.agent_home),
            home=str(self.home),
            tmp_dir=str(self.tmp),
            network=network,
        )

    def env(self) -> dict[str, str]:
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "OUT": str(self.outside),
            "AGENT": str(os.getpid()),
            "PY": sys.executable,
            "TMPDIR": str(self.tmp),
        }


def make_world(base: Path) -> World:
    """home/.ssh/id_rsa, home/.aws/credentials, the agent home with config.toml and
    sessions.sqlite, a project with notes.txt and .env, a folder outside, a tmp folder."""
    base = Path(os.path.realpath(base))
    home = base / "home"
    agent = home / ".soong-agent"
    project = base / "project"
    outside = base / "outside"
    tmp = base / "cmdtmp"
    for folder in (home / ".ssh", home / ".aws", agent, project, outside, tmp):
        folder.mkdir(parents=True, exist_ok=True)
    (home / ".ssh" / "id_rsa").write_text(SECRETS["ssh"] + "\n")
    (home / ".ssh" / "known_hosts").write_text("github.com ssh-ed25519 AAAA\n")
    (home / ".aws" / "credentials").write_text(SECRETS["aws"] + "\n")
    (agent / "config.toml").write_text(f"# {SECRETS['config']}\n")
    (agent / "sessions.sqlite").write_text("")
    (project / "notes.txt").write_text("project notes\n")
    (project / ".env").write_text(f"KEY={SECRETS['env']}\n")
    return World(base, home, agent, project, outside, tmp)


@dataclass(frozen=True)
class Outcome:
    exit_code: int | None
    stdout: str
    stderr: str
    notes: tuple[str, ...]


async def run_in(
    sandbox: CommandSandbox,
    policy: SandboxPolicy,
    command: str,
    *,
    cwd: str,
    env: Mapping[str, str],
) -> Outcome:
    """`command` through bash under `sandbox`, with the real process runner."""
    runner = SubprocessRunner(term_grace_s=0.2)

    async def start(argv: Sequence[str]) -> ProcessResult:
        return await runner.run(
            argv,
            cwd=cwd,
            env=env,
            timeout_s=30,
            stdout_limit=100_000,
            stderr_limit=100_000,
        )

    result = await sandbox.run(["/bin/bash", "-c", command], policy, start)
    output = result.stderr + "\n" + result.stdout
    notes = tuple(d.note() for d in sandbox.denials(output, policy, cwd))
    return Outcome(result.exit_code, result.stdout, result.stderr, notes)


ATTACKS = {
    "python_reads_ssh_key": (
        "\"$PY\" -c \"import os; print(open(os.environ['HOME'] + '/.ssh/id_rsa').read())\""
    ),
    "variable_reads_aws": 'cat "$HOME/.aws/credentials"',
    "reads_agent_config": 'cat "$HOME/.soong-agent/config.toml"',
    "reads_dotenv": "cat .env",
    "reads_known_hosts": 'cat "$HOME/.ssh/known_hosts"',
    "reads_project_file": "cat notes.txt",
    "writes_outside": 'D="$OUT"; echo pwned > "$D/pwned.txt"',
    "writes_project": "echo fine > written.txt && cat written.txt",
    "writes_tmp": 'echo t > "$TMPDIR/t.txt" && cat "$TMPDIR/t.txt"',
    "agent_environ": (
        'cat /proc/$AGENT/environ; for t in /proc/$AGENT/task/*; do cat "$t/environ"; done; '
        "head -c 64 /proc/$AGENT/mem"
    ),
    "identity": "id -u; grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status",
}


async def attack(sandbox: CommandSandbox, world: World) -> dict[str, object]:
    """Run every attack; report each outcome and whether the outside file exists after."""
    policy = world.policy()
    out: dict[str, object] = {}
    for name, command in ATTACKS.items():
        outcome = await run_in(sandbox, policy, command, cwd=str(world.project), env=world.env())
        out[name] = asdict(outcome)
    out["outside_file_exists"] = (world.outside / "pwned.txt").exists()
    return out


# --- as a child process ------------------------------------------------------------------------

_CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
_CLONE_NAMESPACES |= 0x20000000 | 0x40000000


def refuse(what: set[str]) -> None:
    """Make this process (and all it starts) a host that refuses `what`: ``namespaces``
    (unshare and clone with a namespace flag: EPERM; clone3: ENOSYS so libc falls back),
    ``landlock`` (its syscalls: ENOSYS, as on a kernel without it)."""
    import seccompy

    rules = seccompy.Filter(seccompy.Action.ALLOW)
    if "namespaces" in what:
        rules.errno("unshare", errno.EPERM)
        for bit in range(64):
            flag = 1 << bit
            if _CLONE_NAMESPACES & flag:
                rules.errno(
                    "clone",
                    errno.EPERM,
                    args=[seccompy.ArgCmp(0, seccompy.CmpOp.MASKED_EQ, flag, flag)],
                )
        rules.errno("clone3", errno.ENOSYS)
    if "landlock" in what:
        for name in ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"):
            rules.errno(name, errno.ENOSYS)
    rules.load()


def _probe_report() -> dict[str, object]:
    probe = probe_host(every_mechanism=True)
    report: dict[str, object] = {"statuses": [asdict(s) for s in probe.statuses]}
    for mode in ("auto", "required"):
        choice = choose_sandbox(mode, probe=probe)  # type: ignore[arg-type]
        report[mode] = {
            "mechanism": choice.sandbox.mechanism,
            "unsandboxed": choice.sandbox.unsandboxed,
            "type": type(choice.sandbox).__name__,
            "warning": choice.warning,
        }
    return report


async def _confine(mechanism: str, base: Path) -> dict[str, object]:
    sandbox: CommandSandbox
    if mechanism == "bubblewrap":
        found = find_bwrap()
        assert found is not None
        sandbox = BubblewrapSandbox(found[0])
    elif mechanism == "landlock":
        sandbox = LandlockSandbox()
    else:
        sandbox = choose_sandbox(mechanism).sandbox  # type: ignore[arg-type]
    world = make_world(base)
    try:
        report = await attack(sandbox, world)
    except SandboxUnavailable as exc:
        return {"mechanism": sandbox.mechanism, "refused": str(exc)}
    report["mechanism"] = sandbox.mechanism
    report["unsandboxed"] = sandbox.unsandboxed
    return report


def main(argv: list[str]) -> int:
    if argv[:1] == ["--refuse"]:
        refuse(set(argv[1].split(",")))
        argv = argv[2:]
    if argv[0] == "probe":
        report = _probe_report()
    else:
        report = asyncio.run(_confine(argv[1], Path(argv[2])))
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
