"""Commands reach only the hosts the user allows (SBX-4): real programs (curl, Python's
urllib, pip, git) in the real OS sandbox (bubblewrap and Landlock, each where it works on
this host) through the real filtering proxy, against loopback servers.

One allowed server (``127.0.0.1:<allowed>``), one that is not (another port); every program
reaches the first and is refused the second with a ``403`` the proxy recorded as a network
denial naming the host and the command. A direct connection that skips the proxy gets
nothing, a name resolving to a loopback address is refused, and nothing (proxy thread, socket,
forwarder process) is left once the proxy is closed.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from soong_agent.adapters.netproxy import FilteringProxy
from soong_agent.adapters.ossandbox import BubblewrapSandbox, LandlockSandbox, probe_host
from soong_agent.adapters.ossandbox.bubblewrap import find_bwrap
from soong_agent.adapters.ossandbox.config import command_tmp_dir, policy_for_config
from soong_agent.adapters.process import SubprocessRunner
from soong_agent.adapters.web.allowlist import NetworkAllowList
from soong_agent.domain.config.schema import ToolsConfig
from soong_agent.domain.config.tool_sections import NetworkConfig, SandboxConfig
from soong_agent.ports.ossandbox import CommandSandbox, SandboxPolicy
from soong_agent.ports.process import ProcessResult
from tests.support.loopback_sites import PAGE, WHEEL_NAME, Site, git_site, static_site

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access("/bin/bash", os.X_OK),
    reason="the OS sandbox is Linux-only and these tests need /bin/bash",
)
MECHANISMS = ("bubblewrap", "landlock")


def _sandbox(mechanism: str, proxy: FilteringProxy) -> CommandSandbox:
    status = probe_host(every_mechanism=True).status(mechanism)  # type: ignore[arg-type]
    if status is None or not status.works:
        pytest.skip(f"{mechanism} does not work on this host: {status and status.cause}")
    if mechanism == "bubblewrap":
        found = find_bwrap()
        assert found is not None
        return BubblewrapSandbox(found[0], source=found[1], proxy=proxy)
    return LandlockSandbox(proxy=proxy, protect_agent=False)


@pytest.fixture(scope="module")
def allowed() -> Iterator[Site]:
    with static_site() as site:
        yield site


@pytest.fixture(scope="module")
def other() -> Iterator[Site]:
    with static_site() as site:
        yield site


@pytest.fixture(scope="module")
def git_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with git_site(tmp_path_factory.mktemp("git")) as site:
        yield site


class World:
    def __init__(
        self, runner: SubprocessRunner, project: Path, proxy: FilteringProxy, mechanism: str = ""
    ) -> None:
        self.runner, self.project, self.proxy = runner, project, proxy
        self.mechanism = mechanism

    async def run(self, command: str, timeout_s: float = 60) -> ProcessResult:
        env = {"PATH": os.environ["PATH"], "HOME": str(self.project), "LANG": "C.UTF-8"}
        return await self.runner.run(
            ["/bin/bash", "-c", command],
            cwd=str(self.project),
            env=env,
            timeout_s=timeout_s,
            stdout_limit=100_000,
            stderr_limit=100_000,
        )


@pytest.fixture(params=MECHANISMS)
async def world(
    request: pytest.FixtureRequest, tmp_path: Path, allowed: Site, git_server: Site
) -> AsyncIterator[World]:
    gate = NetworkAllowList(
        allowed_hosts=[f"127.0.0.1:{allowed.port}", f"127.0.0.1:{git_server.port}"],
        allowed_domains=["localhost"],
    )
    proxy = FilteringProxy(gate)
    sandbox = _sandbox(request.param, proxy)
    policy: SandboxPolicy = policy_for_config(
        ToolsConfig(allowed_write_roots=[str(tmp_path)]),
        project=str(tmp_path),
        agent_home=str(tmp_path / "home"),
        tmp_dir=command_tmp_dir(),
        network="allowlist",
    )
    assert policy.proxied
    try:
        runner = SubprocessRunner(sandbox=sandbox, policy=policy)
        yield World(runner, tmp_path, proxy, request.param)
    finally:
        if isinstance(sandbox, LandlockSandbox):
            sandbox.close()
        proxy.close()


def _refused(result: ProcessResult, port: int) -> None:
    (denial,) = [d for d in result.denials if d.host is not None]
    assert (denial.host, denial.port, denial.kind) == ("127.0.0.1", port, "network")
    assert denial.command is not None and str(port) in denial.command
    assert "not in tools.network.allowed_hosts" in denial.rule


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_curl_reaches_the_allowed_host_and_not_another(
    world: World, allowed: Site, other: Site
) -> None:
    ok = await world.run(f"curl -sS --fail {allowed.url}/")
    assert ok.exit_code == 0, ok.stderr
    assert ok.stdout == PAGE.decode()
    assert ok.denials == ()
    before = len(other.accepted)
    no = await world.run(f"curl -sS --fail {other.url}/")
    assert no.exit_code != 0
    assert "403" in no.stderr
    _refused(no, other.port)
    assert len(other.accepted) == before  # the proxy never connected to it
    tunnel = await world.run(f"curl -sS -p --fail {other.url}/")  # CONNECT
    assert tunnel.exit_code != 0 and "403" in tunnel.stderr
    _refused(tunnel, other.port)
    socks = await world.run(f'curl -sS --fail --proxy "$ALL_PROXY" {allowed.url}/')
    assert socks.exit_code == 0 and socks.stdout == PAGE.decode(), socks.stderr
    assert len(other.accepted) == before


async def test_python_urllib_reaches_the_allowed_host_and_not_another(
    world: World, allowed: Site, other: Site
) -> None:
    fetch = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())"
    ok = await world.run(f"python3 -c '{fetch}' {allowed.url}/")
    assert ok.exit_code == 0, ok.stderr
    assert PAGE.decode() in ok.stdout
    no = await world.run(f"python3 -c '{fetch}' {other.url}/")
    assert no.exit_code != 0 and "HTTP Error 403" in no.stderr
    _refused(no, other.port)


async def test_a_direct_connection_to_an_allowed_address_gets_nothing(
    world: World, allowed: Site
) -> None:
    before = len(allowed.accepted)
    connect = (
        "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=5)"
    )
    result = await world.run(f'python3 -c "{connect}" {allowed.port}')
    assert result.exit_code != 0
    assert "Error" in result.stderr  # refused (bubblewrap's own loopback) or EACCES (Landlock)
    assert len(allowed.accepted) == before
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        await world.run(
            'python3 -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); '
            f"s.sendto(b'x', ('127.0.0.1', {port}))\""
        )  # its own loopback (bubblewrap) or no UDP socket at all (Landlock)
        with pytest.raises(TimeoutError):
            listener.recvfrom(16)


async def test_a_send_that_opens_its_own_connection_gets_nothing(world: World, other: Site) -> None:
    """TCP Fast Open: `sendto(..., MSG_FASTOPEN, address)` connects without connect(), which
    is what Landlock checks; the seccomp filter refuses it (and bubblewrap has no route)."""
    before = len(other.accepted)
    send = (
        "import socket, sys; s = socket.socket(); "
        "s.sendto(b'secret', socket.MSG_FASTOPEN, ('127.0.0.1', int(sys.argv[1])))"
    )
    result = await world.run(f'python3 -c "{send}" {other.port}')
    assert result.exit_code != 0
    assert result.exit_code != 0 and "Error" in result.stderr  # EPERM, or its own loopback
    assert len(other.accepted) == before


async def test_a_name_resolving_to_a_loopback_address_is_refused(
    world: World, allowed: Site, other: Site
) -> None:
    """``localhost`` is in allowed_domains; what it resolves to is a loopback address, listed
    only for the allowed port: the name reaches that port, and no other."""
    ok = await world.run(f"curl -sS --fail http://localhost:{allowed.port}/")
    assert ok.exit_code == 0, ok.stderr
    before = len(other.accepted)
    result = await world.run(f"curl -sS --fail http://localhost:{other.port}/")
    assert result.exit_code != 0
    assert len(other.accepted) == before
    (denial,) = [d for d in result.denials if d.host is not None]
    assert denial.host == "localhost"
    assert "resolves to 127.0.0.1, a loopback address" in denial.rule


async def test_pip_downloads_from_the_allowed_index_only(
    world: World, allowed: Site, other: Site
) -> None:
    pip = (
        f"{sys.executable} -m pip download --no-cache-dir --no-deps "
        "--disable-pip-version-check --trusted-host 127.0.0.1 -d dl demo-pkg --index-url"
    )
    ok = await world.run(f"{pip} {allowed.url}/simple/", timeout_s=120)
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert (world.project / "dl" / WHEEL_NAME).is_file()
    no = await world.run(f"{pip} {other.url}/simple/ --retries 0", timeout_s=120)
    assert no.exit_code != 0
    assert any(d.port == other.port for d in no.denials)


async def test_git_ls_remote_over_http_reaches_the_allowed_server_only(
    world: World, git_server: Site, other: Site
) -> None:
    ok = await world.run(f"git ls-remote {git_server.url}/repo.git")
    assert ok.exit_code == 0, ok.stderr
    assert "refs/heads/main" in ok.stdout
    no = await world.run(f"git ls-remote {other.url}/repo.git")
    assert no.exit_code != 0 and "403" in no.stderr
    _refused(no, other.port)


async def test_nothing_is_left_once_the_proxy_is_closed(world: World, allowed: Site) -> None:
    result = await world.run(f"curl -sS {allowed.url}/ >/dev/null; echo $HTTP_PROXY")
    assert result.exit_code == 0
    address = world.proxy.address
    assert address is not None
    assert str(address.port) in result.stdout
    world.proxy.close()
    assert world.proxy.address is None
    assert not os.path.exists(os.path.dirname(address.unix_path))
    assert not [t for t in threading.enumerate() if t.name == "soong-netproxy"]
    leftover = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if address.unix_path.encode() in cmdline:
            leftover.append(pid)
    assert leftover == []


async def test_the_hosts_service_sockets_in_run_are_out_of_reach(world: World) -> None:
    """A host service listening on a Unix socket in /run (docker.sock, D-Bus): under
    bubblewrap the command sees an empty /run; under Landlock (which cannot restrict a path
    socket's connect) it is reached, which docs/configuration.md says."""
    if not os.access("/run", os.W_OK):
        pytest.skip("/run is not writable here: no host service socket can be made in it")
    path = f"/run/soong-test-{os.getpid()}-{id(world)}.sock"
    with socket.socket(socket.AF_UNIX) as service:
        service.bind(path)
        service.listen(1)
        service.settimeout(0.5)
        try:
            connect = f"import socket; socket.socket(socket.AF_UNIX).connect({path!r})"
            result = await world.run(f'python3 -c "{connect}"')
            if world.mechanism == "bubblewrap":
                assert result.exit_code != 0 and "No such file" in result.stderr
                with pytest.raises(TimeoutError):
                    service.accept()
        finally:
            os.unlink(path)


def test_the_allow_list_is_the_default_under_bubblewrap_only() -> None:
    """Landlock cannot keep a command from the proxy's port on another address: there an unset
    sandbox.network is false (no network), and the allow-list is taken only when it is set."""
    listed = NetworkConfig(allowed_hosts=["pypi.org"])
    assert SandboxConfig().command_network(listed, "bubblewrap") == "allowlist"
    assert SandboxConfig().command_network(listed, "landlock") is False
    assert SandboxConfig(network="allowlist").command_network(listed, "landlock") == "allowlist"
    assert SandboxConfig().command_network(NetworkConfig(), "bubblewrap") is False
