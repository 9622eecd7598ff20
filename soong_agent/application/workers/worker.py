"""A worker (WORK-2): claims queued runs of the projects it serves, runs each as `soong-agent
run` would, renews its lease on a heartbeat, and stops on request.

Each held run has a keeper task: it renews the lease every `heartbeat_s`; when the run was
taken over (`LeaseLost`) it cancels the run at once (the store refuses its batches: it writes
nothing more); when cancellation was asked for (`runs cancel`, from any process) it cancels the
run, which ends `cancelled`. When the run ends, its queue record ends with it.

A run waiting for an answer to an approval question holds no slot: the worker claims another
meanwhile (when the answer comes, it may briefly run one more than `concurrency`).

Stopping (`stop` set: SIGTERM or SIGINT in the CLI) ends claiming at once; the runs held are
given `cancel_timeout_s` to finish, then cancelled and given back to the queue (`release`), so
another worker takes them up without counting an attempt against them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from soong_agent.application.runs.handle import Run
from soong_agent.application.runs.parking import PARKED
from soong_agent.ports.errors import SoongAgentError, UsageError
from soong_agent.ports.run_queue import Lease, LeaseLost, QueueStatus, RunQueue, queue_end
from soong_agent.ports.storage import SessionBusy
from soong_agent.ports.system import Clock
from soong_agent.ports.telemetry import Telemetry

__all__ = ["AlreadyEnded", "StartClaimed", "Worker", "WorkerSettings", "WorkerTally"]

log = logging.getLogger(__name__)

StartClaimed = Callable[[Lease, bool], Awaitable[Run]]
"""Start a claimed run (the bool: guarded by the fence alone, see `Assigned.fence_only`)."""

DEPTH_CAP = 1000
"""The most queued runs a worker counts for telemetry's queue depth."""


class AlreadyEnded(Exception):
    """A claimed run had ended in its session before its worker could tell the queue (the
    worker died between the two writes): its end is recorded, nothing runs again."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(f"{status}: {reason}" if reason else status)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """How a worker works (`[workers]` and the `worker` command's options)."""

    worker_id: str
    projects: tuple[str, ...]
    concurrency: int = 1
    lease_s: float = 30.0
    heartbeat_s: float = 5.0
    max_attempts: int = 3
    cancel_timeout_s: float = 5.0
    idle_poll_s: float = 1.0
    """The longest a worker waits between looks at the queue when no notice wakes it."""


@dataclass(slots=True)
class WorkerTally:
    """What a worker did, for its log line at exit."""

    claimed: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    released: int = 0


class Worker:
    """Claims and runs queued runs until `stop` is set (see the module docstring)."""

    def __init__(
        self,
        queue: RunQueue,
        start: StartClaimed,
        clock: Clock,
        settings: WorkerSettings,
        *,
        report: Callable[[str], None] | None = None,
        redact: Callable[[str], str] | None = None,
        after: Callable[[Lease, Run], Awaitable[None]] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        if settings.concurrency < 1:
            raise UsageError(f"a worker runs at least one run at once, not {settings.concurrency}")
        if not settings.projects:
            raise UsageError("a worker serves at least one project folder")
        self._queue = queue
        self._start = start
        self._after = after  # what follows a run before its end is recorded (its teammates)
        self._telemetry = telemetry
        self._depth_at: float | None = None  # when the queue's depth was last looked at
        self._clock = clock
        self._settings = settings
        self._redact = redact or (lambda text: text)
        say = report or (lambda _line: None)
        self._report: Callable[[str], None] = lambda line: say(self._redact(line))
        self._held: dict[asyncio.Task[None], Lease] = {}
        self._runs: dict[str, Run] = {}
        self._renewed: dict[str, Lease] = {}  # by run id: the lease as last renewed
        self._parked: dict[str, int] = {}  # runs waiting (for answers, their workers' runs),
        # by how many waits: they hold no slot
        self._changed = asyncio.Event()  # a run parked: a slot may be free
        self.tally = WorkerTally()

    def _busy(self) -> int:
        """The slots in use: the runs held, but those waiting for an answer."""
        held = {lease.run.id for lease in self._held.values()}
        return len(self._held) - len(held & set(self._parked))

    def _park(self, run_id: str, parked: bool) -> None:
        waits = self._parked.get(run_id, 0) + (1 if parked else -1)
        if waits > 0:
            self._parked[run_id] = waits
        else:
            self._parked.pop(run_id, None)
        self._changed.set()

    async def serve(self, stop: asyncio.Event) -> WorkerTally:
        """Claim and run until `stop` is set; then finish or give back what is held."""
        s = self._settings
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                self._changed.clear()
                if self._busy() < s.concurrency and await self._claim_one():
                    continue  # there may be more
                waits: set[asyncio.Future[Any]] = {stopping}
                if self._busy() < s.concurrency:
                    waits.add(asyncio.ensure_future(self._queue.wait_for_work(s.idle_poll_s)))
                waits |= set(self._held)  # a slot frees up
                waits.add(asyncio.ensure_future(self._changed.wait()))  # or a run parks
                done, pending = await asyncio.wait(
                    waits, timeout=s.idle_poll_s, return_when=asyncio.FIRST_COMPLETED
                )
                for extra in (pending | done) - {stopping} - set(self._held):
                    extra.cancel()
                    if extra in done and not extra.cancelled() and extra.exception():
                        # the store is away: said, and looked at again after a pause
                        self._report(f"could not wait for work: {extra.exception()}")
                        await asyncio.sleep(s.idle_poll_s)
        finally:
            stopping.cancel()
            await self._wind_down()
        return self.tally

    async def _claim_one(self) -> bool:
        s = self._settings
        if self._telemetry is not None:
            await self._count_waiting(self._telemetry)
        try:
            lease = await self._queue.claim(
                s.worker_id,
                s.projects,
                lease_s=s.lease_s,
                max_attempts=s.max_attempts,
                now=self._clock.now(),
            )
        except SoongAgentError as exc:  # the store is unreachable: said, then tried again
            self._report(f"could not claim a run: {exc}")
            return False
        if lease is None:
            return False
        self.tally.claimed += 1
        task = asyncio.create_task(self._hold(lease), name=f"soong-worker-{lease.run.id}")
        self._held[task] = lease
        task.add_done_callback(self._held.pop)
        return True

    async def _count_waiting(self, telemetry: Telemetry) -> None:
        """Tell telemetry how many runs wait in the queue (OBS-1; at most `DEPTH_CAP` are
        counted), at most once a heartbeat."""
        now = self._clock.now()
        if self._depth_at is not None and now - self._depth_at < self._settings.heartbeat_s:
            return
        self._depth_at = now
        try:
            waiting = await self._queue.list(status="queued", limit=DEPTH_CAP)
        except SoongAgentError as exc:  # the store is away: said; the claim says it too
            self._report(f"could not count the queued runs: {exc}")
            return
        telemetry.queue_depth(worker=self._settings.worker_id, depth=len(waiting))

    async def _hold(self, lease: Lease) -> None:
        """Run the claimed run to its end under its lease."""
        queued = lease.run
        self._report(f"run {queued.id} (session {queued.session_id}, attempt {queued.attempts})")
        # (this task's context, copied by the run's task: its approvals park it here)
        PARKED.set(lambda parked: self._park(queued.id, parked))
        try:
            run = await self._begin(lease)
            if run is None:
                return
        except AlreadyEnded as ended:
            await self._end(lease, *queue_end(ended.status, ended.reason))
            return
        except (SoongAgentError, OSError, ValueError) as exc:
            await self._end(lease, "failed", f"the run could not start: {exc}")
            return
        self._runs[queued.id] = run
        keeper = asyncio.create_task(self._keep(lease, run))
        try:
            result = await run.wait()
            if self._after is not None and not keeper.done():
                await self._following(lease, run, keeper)
        finally:
            keeper.cancel()
            await asyncio.wait({keeper})  # its LeaseLost, if any, is read below
            self._runs.pop(queued.id, None)
            self._parked.pop(queued.id, None)
        current = self._renewed.pop(queued.id, lease)
        if keeper_lost(keeper):
            self.tally.lost += 1
            self._report(f"run {queued.id}: taken over by another worker; stopped")
            return
        detail = result.reason or (str(result.error) if result.error is not None else "")
        await self._end(current, *queue_end(result.status, detail))

    async def _following(self, lease: Lease, run: Run, keeper: asyncio.Task[None]) -> None:
        """Wait, holding no slot, for what follows the ended run (its teammates finishing
        their work) while its lease holds; a failure of it is said, never silent."""
        assert self._after is not None
        following = asyncio.ensure_future(self._after(lease, run))
        self._park(lease.run.id, True)
        try:
            await asyncio.wait({following, keeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._park(lease.run.id, False)
            if not following.done():
                following.cancel()
            await asyncio.gather(following, return_exceptions=True)
        if not following.cancelled() and following.exception() is not None:
            self._report(f"run {lease.run.id}: after its end: {following.exception()}")

    async def _begin(self, lease: Lease) -> Run | None:
        """Start the run holding its session; None when it went back to the queue."""
        queued = lease.run
        try:
            return await self._start(lease, False)
        except SessionBusy as exc:
            if queued.attempts > 1:  # a frozen holder may keep its claim: the fence guards
                return await self._start(lease, True)
            # someone runs the session by hand: the run waits its turn
            self._report(f"run {queued.id}: {exc}; back to the queue")
            await self._give_back(lease)
            await asyncio.sleep(self._settings.idle_poll_s)  # (not at once round again)
            return None

    async def _keep(self, lease: Lease, run: Run) -> None:
        """Renew the lease every heartbeat; cancel the run when it was taken over or its
        cancellation was asked for. Returns (with `LeaseLost` as its exception) when lost."""
        s = self._settings
        while True:
            await asyncio.sleep(s.heartbeat_s)
            try:
                lease = await self._queue.renew(lease, lease_s=s.lease_s, now=self._clock.now())
            except LeaseLost:
                await run.cancel()
                raise
            except SoongAgentError as exc:  # the store is away: the lease may still be good
                self._report(f"run {lease.run.id}: could not renew its lease: {exc}")
                if self._clock.now() < lease.expires_at:
                    continue
                # past its end another worker may hold the run: it must not run here too
                self._report(f"run {lease.run.id}: its lease ran out unrenewed; stopping it")
                await run.cancel()
                raise LeaseLost(lease.run.id, lease.fence) from exc
            self._renewed[lease.run.id] = lease
            if lease.run.cancel_requested:
                self._report(f"run {lease.run.id}: cancellation asked for")
                await run.cancel()  # it ends `cancelled`; its holder records that
                return

    async def _end(self, lease: Lease, status: QueueStatus, reason: str) -> None:
        reason = self._redact(reason)  # the queue is read by anyone: no secret in it
        try:
            await self._queue.finish(lease, status, reason=reason, now=self._clock.now())
        except LeaseLost:
            self.tally.lost += 1
            self._report(f"run {lease.run.id}: taken over before it ended; its end not recorded")
            return
        self.tally.finished[status] = self.tally.finished.get(status, 0) + 1
        self._report(f"run {lease.run.id}: {status}{f' ({reason})' if reason else ''}")

    async def _give_back(self, lease: Lease) -> None:
        try:
            await self._queue.release(lease, now=self._clock.now())
            self.tally.released += 1
        except LeaseLost:
            self.tally.lost += 1

    async def _wind_down(self) -> None:
        """Give the held runs `cancel_timeout_s` to end; cancel the rest and give them back."""
        if not self._held:
            return
        held = dict(self._held)
        self._report(f"stopping: waiting for {len(held)} run(s) to end")
        _done, late = await asyncio.wait(set(held), timeout=self._settings.cancel_timeout_s)
        runs = [r for t in late if (r := self._runs.get(held[t].run.id)) is not None]
        for task in late:
            task.cancel()
        await asyncio.gather(*(run.cancel() for run in runs))  # together: one timeout
        await asyncio.gather(*late, return_exceptions=True)
        for task in late:
            lease = self._renewed.get(held[task].run.id, held[task])
            await self._give_back(lease)
            self._report(f"run {lease.run.id}: given back to the queue")


def keeper_lost(keeper: asyncio.Task[None]) -> bool:
    """Whether the keeper ended because the lease was taken over."""
    if not keeper.done() or keeper.cancelled():
        return False
    return isinstance(keeper.exception(), LeaseLost)
