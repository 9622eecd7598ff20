"""The OS sandbox against the real kernel (SBX-3): bubblewrap and Landlock (+ seccomp), each on
commands that build the path to a secret themselves, write outside the roots through a
variable, open a socket, look at the agent's own /proc, or try to undo the sandbox as root.

Each mechanism's tests run only where the probe says it works on this host, and are skipped
with the probe's cause otherwise. Where a test needs a process of its own (the agent's
environment, another user, a host refusing namespaces or Landlock), it runs
tests/support/os_sandbox_child.py as a child.

This machine may run the tests as root: root bypasses file permissions but neither
bubblewrap's mount namespace (capabilities dropped, so no umount) nor Landlock (capabilities
dropped from the spawner thread's sets), which is what the root-specific tests check.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from soong_agent.adapters.ossandbox import BubblewrapSandbox, LandlockSandbox, probe_host
from soong_agent.adapters.ossandbox.bubblewrap import find_bwrap
from soong_agent.adapters.process import SubprocessRunner
from soong_agent.ports.ossandbox import CommandSandbox
from soong_agent.ports.process import ProcessResult
from tests.support.os_sandbox_child import SECRETS, Outcome, World, make_world, run_in

CHILD = Path(__file__).parents[1] / "support" / "os_sandbox_child.py"
MECHANISMS = ("bubblewrap", "landlock")

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access("/bin/bash", os.X_OK),
    reason="the OS sandbox is Linux-only and these tests need /bin/bash",
)


def _require(mechanism: str) -> None:
    status = probe_host(every_mechanism=True).status(mechanism)  # type: ignore[arg-type]
    if status is None or not status.works:
        cause = status.cause if status is not None else "not probed"
        pytest.skip(f"{mechanism} does not work on this host: {cause}")


def _sandbox(mechanism: str) -> CommandSandbox:
    _require(mechanism)
    if mechanism == "bubblewrap":
        found = find_bwrap()
        assert found is not None
        return BubblewrapSandbox(found[0], source=found[1])
    # the pytest process stays dumpable (the child-process tests check the protection)
    return LandlockSandbox(protect_agent=False)


@pytest.fixture(params=MECHANISMS)
def sandbox(request: pytest.FixtureRequest) -> Iterator[CommandSandbox]:
    chosen = _sandbox(request.param)
    yield chosen
    if isinstance(chosen, LandlockSandbox):
        chosen.close()


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


async def sh(
    sandbox: CommandSandbox, world: World, command: str, *, network: bool = False
) -> Outcome:
    return await run_in(
        sandbox,
        world.policy(network=network),
        command,
        cwd=str(world.project),
        env=world.env(),
    )


# --- reads ---------------------------------------------------------------------------------------


async def test_python_building_the_path_to_an_ssh_key_gets_nothing(
    sandbox: CommandSandbox, world: World
) -> None:
    got = await sh(
        sandbox,
        world,
        "\"$PY\" -c \"import os; print(open(os.environ['HOME'] + '/.ssh/id_rsa').read())\"",
    )
    assert got.exit_code != 0
    assert SECRETS["ssh"] not in got.stdout + got.stderr
    assert any("~/.ssh" in note for note in got.notes), got
    control = await sh(sandbox, world, '"$PY" -c "print(open(\'notes.txt\').read())"')
    assert (control.exit_code, control.stdout) == (0, "project notes\n\n")


async def test_a_shell_variable_reaching_cloud_credentials_gets_nothing(
    sandbox: CommandSandbox, world: World
) -> None:
    got = await sh(sandbox, world, 'F="$HOME/.aws"; cat "$F/credentials"')
    assert got.exit_code != 0
    assert SECRETS["aws"] not in got.stdout
    assert got.notes and "~/.aws" in got.notes[0]
    control = await sh(sandbox, world, 'F="$PWD"; cat "$F/notes.txt"')
    assert (control.exit_code, control.stdout) == (0, "project notes\n")


async def test_the_agent_home_is_unreadable_and_known_hosts_stays_readable(
    sandbox: CommandSandbox, world: World
) -> None:
    config = await sh(
        sandbox, world, 'cat "$HOME/.soong-agent/config.toml"; ls "$HOME/.soong-agent"'
    )
    assert SECRETS["config"] not in config.stdout
    if sandbox.mechanism == "bubblewrap":
        assert "sessions.sqlite" not in config.stdout
    # (Landlock: a documented limit, names below a hidden folder can be listed, not read)
    assert any("SOONG_AGENT_HOME" in note for note in config.notes)
    hosts = await sh(sandbox, world, 'cat "$HOME/.ssh/known_hosts"')
    assert (hosts.exit_code, hosts.stdout) == (0, "github.com ssh-ed25519 AAAA\n")


async def test_a_dotenv_in_the_project(sandbox: CommandSandbox, world: World) -> None:
    got = await sh(sandbox, world, "cat .env")
    if sandbox.mechanism == "bubblewrap":
        assert got.exit_code != 0 and SECRETS["env"] not in got.stdout
        assert got.notes and "tools.sensitive_paths: .env" in got.notes[0]
    else:
        # a documented Landlock limit: a denied file inside a writable folder stays readable
        # (hiding it would take the right to create files beside it); the text check remains
        assert SECRETS["env"] in got.stdout


# --- writes --------------------------------------------------------------------------------------


async def test_a_write_outside_the_roots_through_a_variable_fails_and_is_named(
    sandbox: CommandSandbox, world: World
) -> None:
    got = await sh(sandbox, world, 'D="$OUT"; echo pwned > "$D/pwned.txt"')
    assert got.exit_code != 0
    assert not (world.outside / "pwned.txt").exists()
    (note,) = got.notes
    assert f"refused writing {world.outside}/pwned.txt" in note
    assert f"commands may write only in {world.project}, {world.tmp}" in note
    assert f"[sandbox ({sandbox.mechanism})" in note


async def test_writes_in_the_project_and_the_tmp_folder_work(
    sandbox: CommandSandbox, world: World
) -> None:
    got = await sh(
        sandbox,
        world,
        "echo a > new.txt && mkdir -p d/e && echo b > d/e/f && mv new.txt d/ && rm d/e/f && "
        'echo t > "$TMPDIR/t" && cat d/new.txt "$TMPDIR/t"',
    )
    assert (got.exit_code, got.stdout, got.notes) == (0, "a\nt\n", ())
    assert (world.project / "d" / "new.txt").read_text() == "a\n"


async def test_a_command_cannot_write_its_way_into_a_hidden_folder(
    sandbox: CommandSandbox, world: World
) -> None:
    got = await sh(sandbox, world, 'echo evil > "$HOME/.ssh/authorized_keys"')
    assert got.exit_code != 0
    assert not (world.home / ".ssh" / "authorized_keys").exists()
    assert got.notes


# --- network -------------------------------------------------------------------------------


@pytest.fixture
def loopback_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 answering ``hello`` to every connection."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=2)
    server.close()


CONNECT = (
    '"$PY" -c "import socket, sys; s = socket.create_connection((\'127.0.0.1\', {port}), '
    'timeout=5); print(s.recv(5).decode())"'
)


async def test_a_socket_to_a_loopback_server_needs_a_network_grant(
    sandbox: CommandSandbox, world: World, loopback_server: int
) -> None:
    command = CONNECT.format(port=loopback_server)
    refused = await sh(sandbox, world, command)
    assert refused.exit_code != 0 and "hello" not in refused.stdout
    assert refused.notes and "no network" in refused.notes[-1]
    granted = await sh(sandbox, world, command, network=True)
    assert (granted.exit_code, granted.stdout.strip(), granted.notes) == (0, "hello", ())


# --- root, signals, ending -----------------------------------------------------------------


async def test_root_inside_has_no_capability_to_undo_the_sandbox(
    sandbox: CommandSandbox, world: World
) -> None:
    got = await sh(
        sandbox,
        world,
        'grep -E "^Cap(Eff|Prm)" /proc/self/status; '
        'umount "$HOME/.ssh" 2>/dev/null; umount "$HOME/.aws" 2>/dev/null; '
        "mount -o remount,rw / 2>/dev/null; "
        'cat "$HOME/.aws/credentials"; echo x > "$OUT/after-umount"',
    )
    assert "CapEff:\t0000000000000000" in got.stdout
    assert "CapPrm:\t0000000000000000" in got.stdout
    assert SECRETS["aws"] not in got.stdout
    assert not (world.outside / "after-umount").exists()


async def test_a_command_cannot_signal_the_agent(sandbox: CommandSandbox, world: World) -> None:
    got = await sh(sandbox, world, f"kill -0 {os.getpid()} && echo reached")
    assert "reached" not in got.stdout


async def test_timeout_and_cancel_kill_the_sandboxed_command(
    sandbox: CommandSandbox, world: World
) -> None:
    runner = SubprocessRunner(term_grace_s=0.2)
    policy = world.policy()
    marker = world.project / "late.txt"

    async def start(argv: Sequence[str], timeout: float) -> ProcessResult:
        return await runner.run(
            argv,
            cwd=str(world.project),
            env=world.env(),
            timeout_s=timeout,
            stdout_limit=1000,
            stderr_limit=1000,
        )

    command = ["/bin/bash", "-c", "sleep 3; echo late > late.txt"]
    started = time.monotonic()
    result = await sandbox.run(command, policy, lambda argv: start(argv, 0.3))
    assert result.timed_out and time.monotonic() - started < 2.5

    task = asyncio.ensure_future(sandbox.run(command, policy, lambda argv: start(argv, 30)))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 5
    await asyncio.sleep(3.2)
    assert not marker.exists()


# --- in a process of its own ---------------------------------------------------------------


def _child(
    *args: str, env: dict[str, str] | None = None, user: int | None = None
) -> dict[str, object]:
    command = [sys.executable, str(CHILD), *args]
    if user is not None:
        command = [
            "setpriv",
            f"--reuid={user}",
            f"--regid={user}",
            "--clear-groups",
            *command,
        ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_agent_environment_is_unreadable_from_inside(mechanism: str, tmp_path: Path) -> None:
    _require(mechanism)
    canary = "CANARY-ENV-" + os.urandom(6).hex()
    report = _child("confine", mechanism, str(tmp_path), env={"SOONG_TEST_CANARY": canary})
    assert report["mechanism"] == mechanism
    environ = report["agent_environ"]
    assert isinstance(environ, dict)
    assert canary not in environ["stdout"] + environ["stderr"]
    assert environ["exit_code"] != 0
    # the canary really is in the agent's environment, for a process outside the sandbox
    plain = _child("confine", "off", str(tmp_path / "plain"), env={"SOONG_TEST_CANARY": canary})
    assert plain["unsandboxed"] is True
    assert canary in plain["agent_environ"]["stdout"]  # type: ignore[index]


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to run as another user",
)
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_as_an_ordinary_user(mechanism: str) -> None:
    _require(mechanism)
    base = Path(tempfile.mkdtemp(prefix="soong-nobody-"))
    try:
        os.chmod(base, 0o755)
        os.chown(base, 65534, 65534)
        probe = _child("probe", user=65534)
        statuses = {s["mechanism"]: s for s in probe["statuses"]}  # type: ignore[union-attr]
        if not statuses[mechanism]["works"]:
            pytest.skip(f"{mechanism} does not work for uid 65534: {statuses[mechanism]['cause']}")
        report = _child("confine", mechanism, str(base / "w"), user=65534)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert report["identity"]["stdout"].startswith("65534\n")  # type: ignore[index]
    for attack in ("python_reads_ssh_key", "variable_reads_aws", "reads_agent_config"):
        outcome = report[attack]
        assert outcome["exit_code"] != 0, attack  # type: ignore[index]
        assert not any(s in outcome["stdout"] for s in SECRETS.values())  # type: ignore[index]
    assert report["outside_file_exists"] is False
    assert report["writes_project"]["stdout"] == "fine\n"  # type: ignore[index]
    assert report["reads_project_file"]["stdout"] == "project notes\n"  # type: ignore[index]


def test_where_user_namespaces_are_refused_auto_falls_back_to_landlock(tmp_path: Path) -> None:
    _require("landlock")
    probe = _child("--refuse", "namespaces", "probe")
    bwrap, landlock = probe["statuses"]  # type: ignore[misc]
    assert bwrap["works"] is False
    assert "namespace" in bwrap["cause"] and bwrap["fix"]
    assert landlock["works"] is True
    assert probe["auto"]["mechanism"] == "landlock"  # type: ignore[index]
    report = _child("--refuse", "namespaces", "confine", "auto", str(tmp_path))
    assert report["mechanism"] == "landlock"
    assert SECRETS["ssh"] not in report["python_reads_ssh_key"]["stdout"]  # type: ignore[index]
    assert report["outside_file_exists"] is False


def test_where_nothing_works_required_refuses_and_auto_says_unsandboxed(tmp_path: Path) -> None:
    refusing = ("--refuse", "namespaces,landlock")
    probe = _child(*refusing, "probe")
    assert [s["works"] for s in probe["statuses"]] == [False, False]  # type: ignore[union-attr]
    assert all(s["cause"] for s in probe["statuses"])  # type: ignore[union-attr]
    auto = probe["auto"]
    assert auto["unsandboxed"] is True and auto["mechanism"] == "none"  # type: ignore[index]
    assert "UNSANDBOXED" in auto["warning"]  # type: ignore[index]
    assert probe["required"]["type"] == "RefusingSandbox"  # type: ignore[index]

    refused = _child(*refusing, "confine", "required", str(tmp_path / "r"))
    assert 'sandbox.os = "required"' in refused["refused"]  # type: ignore[operator]
    assert not (tmp_path / "r" / "project" / "written.txt").exists()

    ran = _child(*refusing, "confine", "auto", str(tmp_path / "a"))
    assert ran["unsandboxed"] is True and ran["mechanism"] == "none"
    # honestly unsandboxed: the secret is reachable, which is what the warning says
    assert SECRETS["ssh"] in ran["python_reads_ssh_key"]["stdout"]  # type: ignore[index]
