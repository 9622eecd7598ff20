"""Team mailboxes: append throughput and delivery latency of `FileMailbox` (fsync on).

Throughput: SENDS sends into one inbox through `FileMailbox.send` (lock, number, write the line
whole, fsync), from one process, then from PROCESSES processes at once; mails per second.
Latency: another process polls `unread` of the recipient in a loop (no sleep unless --poll-ms);
the sender sends LATENCY mails one at a time, 5 ms apart; a mail's latency runs from just before
its `send` call (so its fsync counts) to the moment the reader's `unread` first returns it
(CLOCK_MONOTONIC, one clock for both processes); median and 95th percentile. All on the temp
folder's file system.

    python benchmarks/bench_mailbox.py [--sends 1000] [--processes 4] [--latency 200] [--poll-ms 0]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import tempfile
import time
from multiprocessing.connection import Connection

from soong_agent.adapters.mailbox import FileMailbox
from soong_agent.ports.mailbox import Mail

TEAM = "ses_bench"


def letter(n: int, *, sender: str = "lead", to: str = "alice", tag: str = "m") -> Mail:
    return Mail(
        id=f"{tag}{n}",
        at=time.time(),
        sender=sender,
        to=to,
        kind="message",
        body="please look at step 3 and tell me what you find " * 4,
    )


def send_many(root: str, sender: int, count: int) -> None:
    box = FileMailbox(root)
    for i in range(count):
        box.send(TEAM, letter(i, sender=f"member-{sender}", tag=f"p{sender}-"))


def throughput(sends: int, processes: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        box = FileMailbox(root)
        started = time.perf_counter()
        for i in range(sends):
            box.send(TEAM, letter(i))
        took = time.perf_counter() - started
        print(f"append, 1 process: {sends / took:,.0f} mails/s ({sends} sends, fsync each)")

    with tempfile.TemporaryDirectory() as root:
        context = multiprocessing.get_context("spawn")
        per = sends // processes
        workers = [context.Process(target=send_many, args=(root, n, per)) for n in range(processes)]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        took = time.perf_counter() - started
        got = FileMailbox(root).inbox(TEAM, "alice")
        assert [m.seq for m in got] == list(range(1, per * processes + 1))
        print(
            f"append, {processes} processes into one inbox: {per * processes / took:,.0f} "
            f"mails/s ({per * processes} sends, process start-up included)"
        )


def watch(root: str, expected: int, poll_s: float, ready: Connection, out: Connection) -> None:
    """The reader: poll `unread` until `expected` mails were seen; send back when each was."""
    box = FileMailbox(root)
    seen: dict[str, float] = {}
    ready.send("ready")
    while len(seen) < expected:
        for mail in box.unread(TEAM, "alice"):
            if mail.id not in seen:
                seen[mail.id] = time.monotonic()
        if poll_s:
            time.sleep(poll_s)
    out.send(seen)


def latency(count: int, poll_ms: float) -> None:
    with tempfile.TemporaryDirectory() as root:
        context = multiprocessing.get_context("spawn")
        ready_r, ready_w = context.Pipe(duplex=False)
        out_r, out_w = context.Pipe(duplex=False)
        reader = context.Process(target=watch, args=(root, count, poll_ms / 1000, ready_w, out_w))
        reader.start()
        ready_r.recv()
        box = FileMailbox(root)
        sent_at: dict[str, float] = {}
        for i in range(count):
            mail = letter(i)
            sent_at[mail.id] = time.monotonic()
            box.send(TEAM, mail)
            time.sleep(0.005)
        seen: dict[str, float] = out_r.recv()
        reader.join()
        waits = sorted((seen[k] - sent_at[k]) * 1000 for k in sent_at)
        p95 = waits[int(len(waits) * 0.95) - 1]
        how = f"polling every {poll_ms:g} ms" if poll_ms else "polling without sleep"
        print(
            f"delivery send -> unread in another process ({how}): median "
            f"{statistics.median(waits):.2f} ms, p95 {p95:.2f} ms ({count} mails)"
        )


def main(sends: int, processes: int, count: int, poll_ms: float) -> None:
    throughput(sends, processes)
    latency(count, poll_ms)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--latency", type=int, default=200)
    parser.add_argument("--poll-ms", type=float, default=0.0)
    args = parser.parse_args()
    main(args.sends, args.processes, args.latency, args.poll_ms)
