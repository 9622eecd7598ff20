"""Per-command cost of the OS sandbox (SBX-3): each mechanism against none.

Runs ``/bin/true`` through the real process runner (`SubprocessRunner`) RUNS times per
mechanism after a few warm-up runs (the mechanisms take turns, run by run), under the policy
a project would get (the user's real ``~/.ssh``, ``~/.aws``, ``~/.gnupg`` hidden where they
exist, a throwaway agent home and project), and prints the median and the overhead over no
sandbox. Also the one-off costs: the start-up probe (every mechanism's trial), and the first
command of each mechanism (for Landlock, the spawner thread restricting itself). A mechanism
that does not work here is reported with the probe's cause instead of figures.

Then the cost of the filtering proxy (SBX-4, ``sandbox.network = "allowlist"``), per mechanism:
a command's start with the proxy (a session, the proxy variables; under bubblewrap the
forwarder's start, before it hands its socket to the proxy and becomes the command) against
without, and the throughput of a 50 MB download by curl through the proxy against curl
connecting directly (target: at least 0.7 of direct). The file is served from another
process by ``os.sendfile`` (nothing shared with the proxy's thread); each download is shown
both whole (the command's start included) and as the transfer alone (the median start of
``/bin/true`` under the same sandbox and proxy, or none for direct, subtracted), the verdict
taken on the transfer. ``--download-mb 200`` makes the start matter less.

    python benchmarks/bench_sandbox.py [--runs 50] [--download-mb 50]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from soong_agent.adapters.netproxy import FilteringProxy
from soong_agent.adapters.ossandbox import (
    BubblewrapSandbox,
    LandlockSandbox,
    NoSandbox,
    build_policy,
    find_bwrap,
    probe_host,
)
from soong_agent.adapters.process import SubprocessRunner
from soong_agent.adapters.web.allowlist import NetworkAllowList
from soong_agent.ports.ossandbox import CommandSandbox, SandboxPolicy
from soong_agent.ports.process import ProcessResult

WARM_UP = 5
DOWNLOADS = 5


async def _timings(
    sandboxes: Sequence[CommandSandbox], policy: SandboxPolicy, runs: int
) -> list[tuple[list[float], float]]:
    """For each sandbox: (per-run ms, ms of its very first run) of ``/bin/true``. The
    sandboxes take turns run by run, so a drift of the machine touches them all alike."""
    runner = SubprocessRunner()
    env = {"PATH": "/usr/bin:/bin"}

    async def start(argv: Sequence[str]) -> ProcessResult:
        return await runner.run(
            argv, cwd=policy.project, env=env, timeout_s=30, stdout_limit=1000, stderr_limit=1000
        )

    firsts = [0.0] * len(sandboxes)
    times: list[list[float]] = [[] for _ in sandboxes]
    for index in range(WARM_UP + runs):
        for which, sandbox in enumerate(sandboxes):
            began = time.perf_counter()
            result = await sandbox.run(["/bin/true"], policy, start)
            elapsed = (time.perf_counter() - began) * 1000
            if result.exit_code != 0:
                raise RuntimeError(f"{sandbox.mechanism}: /bin/true failed: {result.stderr}")
            if index == 0:
                firsts[which] = elapsed
            if index >= WARM_UP:
                times[which].append(elapsed)
    return list(zip(times, firsts, strict=True))


_FILE_SERVER = r"""
import os, socket, sys, threading
size = int(sys.argv[1])
data = os.memfd_create("bench-download")
block = b"x" * 1048576
left = size
while left > 0:
    left -= os.write(data, block[: min(left, len(block))])
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
head = f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n".encode()

def serve(conn):
    with conn:
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = conn.recv(65536)
            if not chunk:
                return
            request += chunk
        conn.sendall(head)
        offset = 0
        while offset < size:
            offset += os.sendfile(conn.fileno(), data, offset, size - offset)

while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


@contextmanager
def _big_file_server(size: int) -> Iterator[int]:
    """A loopback HTTP server in a process of its own (no GIL shared with the proxy's thread)
    answering every GET with `size` bytes sent by ``os.sendfile`` from memory; yields its port."""
    server = subprocess.Popen(
        [sys.executable, "-I", "-c", _FILE_SERVER, str(size)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        yield int(server.stdout.readline())
    finally:
        server.kill()
        server.wait()


async def _proxy_figures(
    working: Sequence[tuple[str, CommandSandbox]], policy: SandboxPolicy, runs: int, size_mb: int
) -> None:
    """Start with and without the proxy, and the download through it against direct."""
    runner = SubprocessRunner()
    env = {"PATH": "/usr/bin:/bin"}
    proxied = dataclasses.replace(policy, proxy=True)
    curl = shutil.which("curl")

    async def start(argv: Sequence[str]) -> ProcessResult:
        return await runner.run(
            argv, cwd=policy.project, env=env, timeout_s=120, stdout_limit=1000, stderr_limit=4000
        )

    async def seconds(sandbox: CommandSandbox, chosen: SandboxPolicy, argv: list[str]) -> float:
        began = time.perf_counter()
        result = await sandbox.run(argv, chosen, start)
        if result.exit_code != 0:
            raise RuntimeError(f"{sandbox.mechanism}: {argv[0]} failed: {result.stderr}")
        return time.perf_counter() - began

    with _big_file_server(size_mb * 1048576) as port:
        gate = NetworkAllowList(allowed_hosts=[f"127.0.0.1:{port}"], allowed_domains=[])
        url = f"http://127.0.0.1:{port}/big"
        print(f'filtering proxy (sandbox.network = "allowlist"), /bin/true x {runs}, median ms:')
        # (name, seconds of each download, median seconds of /bin/true under the same setup)
        downloads: list[tuple[str, list[float], float]] = []
        for name, plain in working:
            if name == "none":
                continue
            proxy = FilteringProxy(gate)
            sandbox: CommandSandbox
            if isinstance(plain, BubblewrapSandbox):
                sandbox = BubblewrapSandbox(plain.binary, proxy=proxy)
            else:
                sandbox = LandlockSandbox(protect_agent=False, proxy=proxy)
            try:
                without: list[float] = []
                with_proxy: list[float] = []
                for index in range(WARM_UP + runs):
                    a = await seconds(sandbox, policy, ["/bin/true"])
                    b = await seconds(sandbox, proxied, ["/bin/true"])
                    if index >= WARM_UP:
                        without.append(a)
                        with_proxy.append(b)
                plain_s, proxy_s = statistics.median(without), statistics.median(with_proxy)
                print(
                    f"  {name:<10} without {plain_s * 1000:6.2f}  with the proxy"
                    f" {proxy_s * 1000:6.2f}  (+{(proxy_s - plain_s) * 1000:.2f} ms)"
                )
                if curl is not None:
                    fetch = [curl, "-sS", "--fail", "-o", "/dev/null", url]
                    await seconds(sandbox, proxied, fetch)  # warm-up
                    times = [await seconds(sandbox, proxied, fetch) for _ in range(DOWNLOADS)]
                    downloads.append((name, times, proxy_s))
            finally:
                if isinstance(sandbox, LandlockSandbox):
                    sandbox.close()
                proxy.close()
        if curl is None:
            print("  download: skipped, curl is not installed")
            return
        direct = NoSandbox()
        fetch = [curl, "-sS", "--fail", "--noproxy", "*", "-o", "/dev/null", url]
        direct_start = statistics.median(
            [await seconds(direct, policy, ["/bin/true"]) for _ in range(runs)]
        )
        await seconds(direct, policy, fetch)  # warm-up
        direct_times = [await seconds(direct, policy, fetch) for _ in range(DOWNLOADS)]
        print(
            f"{size_mb} MB download by curl from a loopback server (another process, sendfile),"
            f" best of {DOWNLOADS}, MB/s;"
        )
        print(
            "  'whole' counts the command's start, 'transfer' subtracts the median start of"
            " /bin/true under the same sandbox and proxy (direct: no sandbox):"
        )
        best_direct = min(direct_times)
        direct_transfer = best_direct - direct_start
        print(
            f"  direct     whole {size_mb / best_direct:6.0f}  transfer"
            f" {size_mb / direct_transfer:6.0f}"
        )
        for name, times, start_s in downloads:
            best = min(times)
            transfer = best - start_s
            whole_ratio, transfer_ratio = best_direct / best, direct_transfer / transfer
            verdict = "meets" if transfer_ratio >= 0.7 else "BELOW"
            print(
                f"  {name:<10} whole {size_mb / best:6.0f} ({whole_ratio:.2f} x direct)  transfer"
                f" {size_mb / transfer:6.0f} ({transfer_ratio:.2f} x direct):"
                f" {verdict} the 0.7 target"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--download-mb", type=int, default=50)
    args = parser.parse_args()

    base = os.path.realpath(tempfile.mkdtemp(prefix="soong-bench-sandbox-"))
    try:
        project = os.path.join(base, "project")
        agent_home = os.path.join(base, "agent-home")
        os.makedirs(project)
        os.makedirs(agent_home)
        policy = build_policy(
            project=project, agent_home=agent_home, tmp_dir=base, sensitive=[".env"]
        )

        began = time.perf_counter()
        probe = probe_host(every_mechanism=True, refresh=True)
        probe_ms = (time.perf_counter() - began) * 1000
        print(f"probe (every mechanism's trial, once per process): {probe_ms:.1f} ms")
        for status in probe.statuses:
            state = "works" if status.works else f"does not work: {status.cause}"
            print(f"  {status.mechanism:<10} {state} ({status.elapsed_ms:.1f} ms) {status.detail}")
        print(f"policy: {len(policy.deny_paths)} hidden paths, writable {policy.writable()}")
        print(f"/bin/true x {args.runs} through SubprocessRunner, median (p10-p90) ms:")

        sandboxes: list[tuple[str, CommandSandbox | None, str]] = [("none", NoSandbox(), "")]
        bwrap = probe.status("bubblewrap")
        found = find_bwrap()
        if bwrap is not None and bwrap.works and found is not None:
            sandboxes.append(("bubblewrap", BubblewrapSandbox(found[0], source=found[1]), ""))
        else:
            sandboxes.append(("bubblewrap", None, bwrap.cause if bwrap else "not probed"))
        landlock = probe.status("landlock")
        if landlock is not None and landlock.works:
            sandboxes.append(("landlock", LandlockSandbox(protect_agent=False), ""))
        else:
            sandboxes.append(("landlock", None, landlock.cause if landlock else "not probed"))

        for name, sandbox, cause in sandboxes:
            if sandbox is None:
                print(f"  {name:<10} skipped: {cause}")
        working = [(name, sandbox) for name, sandbox, _ in sandboxes if sandbox is not None]
        figures = asyncio.run(_timings([s for _, s in working], policy, args.runs))
        baseline = statistics.median(figures[0][0])
        for (name, sandbox), (times, first) in zip(working, figures, strict=True):
            median = statistics.median(times)
            deciles = statistics.quantiles(times, n=10)
            extra = f"  overhead {median - baseline:+.2f} ms" if name != "none" else ""
            print(
                f"  {name:<10} {median:6.2f} ({deciles[0]:.2f}-{deciles[-1]:.2f}){extra}"
                f"  first command {first:.1f} ms"
            )
            if isinstance(sandbox, LandlockSandbox):
                sandbox.close()
        asyncio.run(_proxy_figures(working, policy, args.runs, args.download_mb))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
