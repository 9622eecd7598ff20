"""The memory extraction job (MEM-3): what the user said becomes memories, in the background.

Not a child agent: a task the runtime owns (`RunService` tells it when runs start and end). A
root session's user messages not extracted yet are *pending*; extraction runs when a run of
the session ends and they reach `memory.extract_every_messages` or `extract_every_tokens`
(estimated at four characters a token), or once the session has been idle for `idle_seconds`
(0: as soon as a run ends). Idle is measured while the runtime lives, and, for the sessions
a short-lived runtime (a CLI call) left behind, at the end of the next run of any session: the
most recently used root sessions idle that long with pending messages are extracted then (a
session that sweep found done is not read again until it changes: mark `SWEPT_KEY`; one whose
extraction failed in `SWEEP_ATTEMPTS` sweeps is left until it changes: mark `FAILED_KEY`).

One extraction sends the pending messages (text only, each scrubbed by the redactor) and the
current catalogue to the extraction model (`memory.extract_model_profile`, else the main
model), which answers with JSON operations (`extraction_model`). Every create and update goes
through the memory policy, then the store (`extraction_writes`).

Idempotence: the session's high-water mark (`SessionStore` mark ``memory_extraction``, the id
of the last user message extracted) is set, compare-and-set, after the model answered and
before anything is written; when another process moved it meanwhile, the answer is dropped. A
crash can thus lose one extraction's writes but never extracts a message twice. Copies of
earlier user messages (a compaction's new branch) are not pending again.

It never blocks or fails a run: a failure (model error or timeout, garbage answer) leaves the
mark where it was, so the messages are tried again at the next trigger. What the job has to
report (rejections, failures) is kept as *notices*: logged (logger ``soong_agent.memory``),
listed in `notices`, and handed to the next run of the same session started by this runtime,
which records them as ``memory_rejected`` (source ``extraction``) and non-fatal ``error``
events (kind ``memory_extraction``). `aclose` (the runtime closing, e.g. at CLI exit) gives a
running extraction `close_timeout_s` to finish, then cancels it: its messages stay pending for
next time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from soong_agent.application.memory.extraction_model import (
    ExtractionFailed,
    PendingMessage,
    extraction_request,
    parse_operations,
    pending_messages,
)
from soong_agent.application.memory.extraction_writes import ExtractionReport, ExtractionWriter
from soong_agent.application.memory.idle_waits import IdleWaits
from soong_agent.application.memory.notices import Notice, Notices
from soong_agent.application.runs.model_answers import answer_text
from soong_agent.domain.memory import MemoryPolicy
from soong_agent.domain.skills import estimate_tokens
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.events import ErrorEvent, MemoryRejected
from soong_agent.ports.memory import MemoryEntry, MemoryStore
from soong_agent.ports.messages import Message
from soong_agent.ports.model import ModelProvider
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.storage import SessionStore
from soong_agent.ports.system import Clock

log = logging.getLogger("soong_agent.memory")

MARK_KEY = "memory_extraction"
"""The session mark holding the id of the last user message extracted."""
SWEPT_KEY = "memory_extraction_swept"
"""The session mark holding the session's `updated_at` when a sweep last found it done."""
NOTHING = "no pending messages"
EXTRACT_TIMEOUT_S = 120.0
"""How long one extraction call may take before it counts as failed (and is retried later)."""
CLOSE_TIMEOUT_S = 2.0
"""How long closing the runtime waits for a running extraction."""
SWEEP_SESSIONS = 20
"""How many of the most recently used sessions the idle sweep looks at."""
FAILED_KEY = "memory_extraction_failed"
"""The session mark counting the sweeps whose extraction of the session failed, with the
session's `updated_at` then: ``"<updated_at> <count>"``."""
SWEEP_ATTEMPTS = 3
"""A session whose extraction failed in this many sweeps is not tried again by a sweep until it
changes (each try is a model call: a model that cannot do it would be asked at every run)."""


@dataclass(frozen=True, slots=True)
class ExtractionSettings:
    """`memory.extract_every_messages`, `extract_every_tokens`, `idle_seconds` and
    `catalog_max_tokens`, and how the extraction model is asked."""

    every_messages: int = 20
    every_tokens: int = 12_000
    idle_seconds: float = 300.0
    catalog_max_tokens: int = 2_000
    timeout_s: float = EXTRACT_TIMEOUT_S
    close_timeout_s: float = CLOSE_TIMEOUT_S
    temperature: float | None = None


def _attempts(mark: str | None, updated_at: float) -> int:
    """The failed sweeps a `FAILED_KEY` mark counts for the session as it is now (none once
    it changed, or for a mark that is not one)."""
    if mark is None:
        return 0
    stamp, _, count = mark.rpartition(" ")
    if stamp != repr(updated_at) or not count.isdigit():
        return 0
    return int(count)


class MemoryExtraction:
    """The background extraction job of one runtime (MEM-3)."""

    def __init__(
        self,
        *,
        sessions: SessionStore,
        memory: MemoryStore,
        policy: MemoryPolicy,
        provider: ModelProvider,
        clock: Clock,
        settings: ExtractionSettings | None = None,
        redactor: SecretRedactor | None = None,
    ) -> None:
        self._sessions = sessions
        self._memory = memory
        self._writer = ExtractionWriter(memory, policy)
        self._provider = provider
        self._clock = clock
        self.settings = settings or ExtractionSettings()
        self._redactor = redactor
        self._lock = asyncio.Lock()  # one extraction at a time
        self._jobs: set[asyncio.Task[None]] = set()
        self._idle = IdleWaits(self._idle_ended)
        self._writing: set[asyncio.Future[ExtractionReport]] = set()
        self._swept = False
        self._closed = False
        self._notices = Notices()
        self.notices = self._notices.recent
        """Everything the job reported, newest last (the last `NOTICES_KEPT`)."""

    # --- what the runtime tells it -------------------------------------------------------------

    def run_started(self, session_id: str) -> list[Notice]:
        """A run of `session_id` starts: its idle wait ends; returns the notices of that
        session not yet recorded in one of its runs (the caller records them)."""
        self._idle.end(session_id)
        return self._notices.take(session_id)

    def run_ended(self, session_id: str, messages: Sequence[Message] | None = None) -> None:
        """A run of `session_id` ended: extract now if its pending messages are due, else wait
        for it to be idle; sweep the sessions a former runtime left idle (once).

        `messages`: every message the session has, when the caller holds them all (the first
        run of a new session whose path was never rewritten): then nothing is read back from
        the store, and a session not yet due just starts its idle wait."""
        if self._closed:
            return
        due: bool | None = None  # not known yet: the job reads the session
        if messages is not None and self._swept:
            due = self._due_now(session_id, pending_messages(messages, None))  # (no mark yet)
            if not due:
                return
        self._start(self._after_run(session_id, due), f"soong-memory-after-{session_id}")

    async def join(self) -> None:
        """Wait for the jobs running now (after-run checks and extractions; not idle waits)."""
        while self._jobs or self._writing:
            pending: set[asyncio.Future[Any]] = {*self._jobs, *self._writing}
            await asyncio.wait(pending)

    @property
    def busy(self) -> bool:
        """Whether a job is running (idle waits aside)."""
        return bool(self._jobs or self._writing)

    def waiting_idle(self) -> list[str]:
        """The sessions whose idle wait is running."""
        return self._idle.sessions()

    async def aclose(self, timeout_s: float | None = None) -> None:
        """Stop: idle waits end at once; a running extraction gets `timeout_s` (default
        `settings.close_timeout_s`) to finish, then is cancelled (its messages stay pending);
        writes already under way always finish (they are local and short)."""
        self._closed = True
        self._idle.close()
        jobs = set(self._jobs)
        if jobs:
            limit = self.settings.close_timeout_s if timeout_s is None else timeout_s
            _done, late = await asyncio.wait(jobs, timeout=limit)
            for job in late:
                job.cancel()
            if late:
                await asyncio.wait(late)
        if self._writing:
            await asyncio.wait(set(self._writing))

    # --- the job -----------------------------------------------------------------------------

    async def pending(self, session_id: str) -> list[PendingMessage]:
        """The session's user messages not extracted yet."""
        mark = await self._sessions.get_mark(session_id, MARK_KEY)
        return pending_messages(await self._sessions.all_messages(session_id), mark)

    def due(self, pending: Sequence[PendingMessage]) -> bool:
        """Whether pending messages reach `every_messages` or `every_tokens`."""
        settings = self.settings
        if len(pending) >= settings.every_messages:
            return True
        return sum(estimate_tokens(p.text) for p in pending) >= settings.every_tokens

    async def extract(self, session_id: str) -> ExtractionReport:
        """Extract the session's pending messages now (whatever the thresholds). Failures of
        the model are in the report's `failed` (and a notice); the mark then stays."""
        async with self._lock:
            report = ExtractionReport(session_id)
            mark = await self._sessions.get_mark(session_id, MARK_KEY)
            pending = pending_messages(await self._sessions.all_messages(session_id), mark)
            if not pending:
                report.skipped = NOTHING
                return report
            report.messages = len(pending)
            try:
                catalogue = await asyncio.to_thread(self._memory.catalogue)
                async with asyncio.timeout(self.settings.timeout_s):
                    answer = await self._ask(catalogue.entries, pending)
                operations, problems = parse_operations(answer)
            except TimeoutError:
                return self._failed(
                    report,
                    f"the extraction model did not answer within {self.settings.timeout_s:g} s",
                )
            except ExtractionFailed as exc:
                return self._failed(report, f"unusable answer: {exc}")
            except SoongAgentError as exc:
                return self._failed(report, str(exc))
            report.problems = problems
            won = await self._sessions.set_mark(session_id, MARK_KEY, pending[-1].id, previous=mark)
            if not won:
                report.skipped = "another process extracted these messages meanwhile"
                return report
            # from here on the messages count as extracted: the writes finish even when the
            # job is cancelled (closing), so the mark never covers a write that was skipped
            for problem in problems:
                report.notices.append(
                    (ErrorEvent, {"kind": "memory_extraction", "message": problem})
                )
            writing = asyncio.ensure_future(
                asyncio.to_thread(self._writer.apply, operations, report)
            )
            self._writing.add(writing)
            writing.add_done_callback(self._written)
            return await asyncio.shield(writing)

    def _written(self, writing: asyncio.Future[ExtractionReport]) -> None:
        """The writes of one extraction are done: report what they have to (on the loop)."""
        self._writing.discard(writing)
        if writing.cancelled():
            return
        error = writing.exception()
        if error is not None:
            message = f"memory extraction failed while writing: {type(error).__name__}: {error}"
            log.error("%s", message, exc_info=error)
            return
        report = writing.result()
        for event, fields in report.notices:
            self._notify(report.session_id, event, **fields)

    async def sweep(self, *, skip: str | None = None) -> list[ExtractionReport]:
        """Extract the most recently used root sessions (`SWEEP_SESSIONS`, `skip` left out)
        that have been idle `idle_seconds` and have pending messages."""
        now = self._clock.now()
        reports = []
        for info in await self._sessions.list_sessions(limit=SWEEP_SESSIONS):
            if info.id == skip or info.parent_session_id is not None:
                continue
            if now - info.updated_at < self.settings.idle_seconds or info.id in self._idle:
                continue
            # a session unchanged since the last sweep saw it is not read again
            seen = await self._sessions.get_mark(info.id, SWEPT_KEY)
            if seen == repr(info.updated_at):
                continue
            if await self.pending(info.id):
                failed = await self._sessions.get_mark(info.id, FAILED_KEY)
                attempts = _attempts(failed, info.updated_at)
                if attempts >= SWEEP_ATTEMPTS:
                    continue  # given up on until the session changes (said when it was)
                report = await self.extract(info.id)
                reports.append(report)
                if report.failed is not None:
                    attempts += 1
                    stamp = f"{info.updated_at!r} {attempts}"
                    await self._sessions.set_mark(info.id, FAILED_KEY, stamp, previous=failed)
                    if attempts >= SWEEP_ATTEMPTS:
                        self._notify(
                            info.id,
                            ErrorEvent,
                            kind="memory_extraction",
                            message=f"memory extraction failed {attempts} times; not tried "
                            "again until the session has new messages",
                        )
                    continue
                if report.skipped not in (None, NOTHING):
                    continue  # tried again by a later sweep
            await self._sessions.set_mark(info.id, SWEPT_KEY, repr(info.updated_at), previous=seen)
        return reports

    # --- in the background ---------------------------------------------------------------------

    def _start(self, work: Any, name: str) -> None:
        job = asyncio.get_running_loop().create_task(work, name=name)
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    def _due_now(self, session_id: str, pending: Sequence[PendingMessage]) -> bool:
        """Whether the pending messages are to be extracted now; if not (and there are some),
        the session's idle wait starts."""
        if not pending:
            return False
        idle = self.settings.idle_seconds
        if self.due(pending) or idle <= 0:
            return True
        self._idle.start(session_id, idle)  # (none once closed)
        return False

    async def _after_run(self, session_id: str, due: bool | None) -> None:
        try:
            if due is None:
                due = self._due_now(session_id, await self.pending(session_id))
            if due:
                await self.extract(session_id)
            if not self._swept:
                self._swept = True
                await self.sweep(skip=session_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the job must never take the runtime down: report it
            self._notify(
                session_id,
                ErrorEvent,
                kind="memory_extraction",
                message=f"memory extraction failed: {type(exc).__name__}: {exc}",
            )

    def _idle_ended(self, session_id: str) -> None:
        self._start(self._idle_extract(session_id), f"soong-memory-idle-{session_id}")

    async def _idle_extract(self, session_id: str) -> None:
        try:
            await self.extract(session_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # reported, retried at the next trigger
            self._notify(
                session_id,
                ErrorEvent,
                kind="memory_extraction",
                message=f"memory extraction failed: {type(exc).__name__}: {exc}",
            )

    # --- helpers -------------------------------------------------------------------------------

    async def _ask(self, entries: Sequence[MemoryEntry], pending: Sequence[PendingMessage]) -> str:
        request = extraction_request(
            entries,
            pending,
            catalog_max_tokens=self.settings.catalog_max_tokens,
            temperature=self.settings.temperature,
            redactor=self._redactor,
        )
        return await answer_text(self._provider, request)

    def _failed(self, report: ExtractionReport, reason: str) -> ExtractionReport:
        report.failed = reason
        self._notify(
            report.session_id,
            ErrorEvent,
            kind="memory_extraction",
            message=f"memory extraction failed, to be retried: {reason}",
        )
        return report

    def _notify(
        self, session_id: str, event: type[MemoryRejected] | type[ErrorEvent], **fields: Any
    ) -> None:
        self._notices.add(session_id, event, **fields)

    def __repr__(self) -> str:
        return f"MemoryExtraction(jobs={len(self._jobs)}, idle={len(self._idle)})"
