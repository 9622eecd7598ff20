"""What telemetry costs a run (OBS-1): the loop's CPU per turn with `[telemetry]` off and on.

Run: python benchmarks/bench_telemetry.py [--turns N] [--runs N]

The loop of `bench_loop.py` (200 turns, one trivial tool call each, in-memory store: the store's
cost would only blur the difference), run alternately with telemetry off and on. On, every
turn makes a `chat` and an `execute_tool` span and a dozen measurements, batched and exported
over OTLP/HTTP (protobuf) by the SDK's own threads to a sink on loopback in another process;
the CPU time of the whole process (every thread, the exporters' included) is what is counted.
Off, the runtime has no telemetry object at all: the recorder publishes each event straight to
the run's handle, as before telemetry existed (no per-event branch), so `bench_loop.py`'s
figures are the ones to compare against; the off figure here is measured the same way, in the
same process, for the difference.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_loop import STEADY, InstantModel, noop
from benchmarks.runtime_support import bench_runtime
from soong_agent.testing import InMemorySessionStore

SINK = textwrap.dedent(
    """
    import sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    print(server.server_address[1], flush=True)
    server.serve_forever()
    """
)


async def one_run(folder: Path, turns: int, telemetry: str) -> list[float]:
    """Per-turn CPU seconds of one run."""
    model = InstantModel(turns)
    runtime = bench_runtime(
        folder,
        model=model,
        tools=[noop],
        session_store=InMemorySessionStore(),
        extra=f"[runtime]\nmax_turns = {turns + 5}\n{telemetry}",
    )
    async with runtime:
        result = await (await runtime.run("go")).wait()
        assert result.status == "completed", result
    return [b - a for a, b in zip(model.cpu, model.cpu[1:], strict=False)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    sink = subprocess.Popen(
        [sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    try:
        assert sink.stdout is not None
        port = int(sink.stdout.readline())
        on = f'[telemetry]\nenabled = true\nendpoint = "http://127.0.0.1:{port}"\n'
        modes = {"off": "", "on": on, "on, record_content": on + "record_content = true\n"}
        costs: dict[str, list[float]] = {mode: [] for mode in modes}
        for warm_up in (True, *([False] * args.runs)):
            for mode, extra in modes.items():  # alternately: neighbours drift least
                with tempfile.TemporaryDirectory() as tmp:
                    cpu = asyncio.run(one_run(Path(tmp), args.turns, extra))
                if not warm_up:
                    costs[mode].append(statistics.mean(cpu[STEADY:]))
    finally:
        sink.terminate()
        sink.wait(timeout=10)
    off = statistics.median(costs["off"])
    print(
        f"telemetry: {args.turns} turns x 1 trivial tool through the SDK, in-memory store, CPU "
        f"of the whole process per turn ({args.runs} runs, median; exported over OTLP/HTTP to a "
        "sink on loopback in another process)"
    )
    for mode in modes:
        cost = statistics.median(costs[mode])
        added = "" if mode == "off" else f"   added {(cost - off) * 1e6:+7.1f} µs / turn"
        print(f"  telemetry {mode:<20}: {cost * 1e6:7.1f} µs CPU / turn{added}")


if __name__ == "__main__":
    main()
