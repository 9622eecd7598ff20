"""Teams (issue 20): memory per idle teammate, and how fast a mail reaches a teammate's model.

Run: python benchmarks/bench_teams.py [--members N] [--mails N]

One runtime (a real home, SQLite, the file mailbox) leads a team; N teammates are added and
each answers its first mail at once, then idles. Printed: the memory each idle teammate holds
(tracemalloc: bytes allocated and still alive after the team settled, / N), and the delivery
latency of a mail sent into the team to the teammate's next model request (median, wall clock;
in-process mail wakes the teammate at once; mail from another process is seen within
`TeamLimits.poll_s`). `python benchmarks/bench_mailbox.py` measures the mailbox file itself.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.runtime_support import bench_runtime
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import StreamEvent, StreamFinished, TextDelta

POOL = """
[[agents.worker_pools]]
pool_id = "p"
workers = [{ agent_definition_id = "default_worker_agent" }]
[agents]
max_teammates = 1000
"""


class Instant:
    """Answers at once; notes when a request whose last message holds a ping arrives."""

    label = "instant"

    def __init__(self) -> None:
        self.pings: dict[str, float] = {}
        self.pinged = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        users = [m for m in request.messages if m.role == "user"]
        text = users[-1].text if users else ""
        if "ping-" in text:
            token = text[text.index("ping-") :].split()[0]
            self.pings.setdefault(token, time.perf_counter())
            self.pinged.set()
        yield TextDelta("ok")
        yield StreamFinished("end_turn")


async def main(members: int, mails: int) -> None:
    model = Instant()
    with tempfile.TemporaryDirectory() as tmp:
        async with bench_runtime(Path(tmp), model=model, tools=[], extra=POOL) as runtime:
            lead = await (await runtime.run("lead", orchestrator=True)).wait()
            teams = runtime._container.services.teams()
            team = lead.session_id
            await teams.add_member(team, "default_worker_agent", "warm", "hello")
            await teams.settle(team)
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            for i in range(members):
                added = await teams.add_member(team, "default_worker_agent", f"m{i}", "hello")
                assert not added.is_error, added.content
            await teams.settle(team)
            after = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            latencies = []
            for i in range(mails):
                token = f"ping-{i}"
                model.pinged.clear()
                sent = time.perf_counter()
                await teams.mail(team, "m0", token)
                await asyncio.wait_for(model.pinged.wait(), 10)
                latencies.append((model.pings[token] - sent) * 1000)
                await teams.settle(team)
    kib = (after - before) / members / 1024
    print(f"idle teammate: {kib:.0f} KiB each alive, over {members} teammates")
    print(
        f"mail -> teammate's next model request: {statistics.median(latencies):.2f} ms median, "
        f"{max(latencies):.2f} ms max over {len(latencies)} mails (in-process, fsync on)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--mails", type=int, default=30)
    args = parser.parse_args()
    asyncio.run(main(args.members, args.mails))
