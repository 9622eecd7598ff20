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
model), which answers with JSON operations ``{"operations": [{"op": "create" | "update" |
"delete", "name", "category", "description", "body"}]}``, validated with pydantic. Saving
under a name that exists updates that memory (missing fields are kept from it; a create whose
description is an existing memory's updates that one), so nothing is duplicated. Every create
and update goes through the memory policy; a refused one is a rejection with its reasons and is
not written.

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
import dataclasses
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from soong_agent.application.memory_recall import render_catalogue
from soong_agent.application.model_answers import answer_text, operations_in
from soong_agent.application.tools.memory import memory_rejected_fields
from soong_agent.domain.memory import NAME_RULE, MemoryPolicy
from soong_agent.domain.skills import estimate_tokens
from soong_agent.ports.defaults import no_items
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.events import ErrorEvent, MemoryRejected
from soong_agent.ports.memory import (
    Memory,
    MemoryFileInvalid,
    MemoryNotFound,
    MemoryPathRefused,
    MemoryStore,
)
from soong_agent.ports.messages import Message, TextBlock, user_text
from soong_agent.ports.model import ModelProvider, ModelRequest, SystemPart
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.storage import SessionStore
from soong_agent.ports.system import Clock

log = logging.getLogger("soong_agent.memory")

MARK_KEY = "memory_extraction"
"""The session mark holding the id of the last user message extracted."""
SWEPT_KEY = "memory_extraction_swept"
"""The session mark holding the session's `updated_at` when a sweep last found it done."""
NOTHING = "no pending messages"
SOURCE = "extraction"
"""`MemoryRejected.source` of the job's rejections."""
EXTRACT_TIMEOUT_S = 120.0
"""How long one extraction call may take before it counts as failed (and is retried later)."""
CLOSE_TIMEOUT_S = 2.0
"""How long closing the runtime waits for a running extraction."""
EXTRACT_OUTPUT_TOKENS = 2_000
MESSAGE_CHARS = 4_000
"""A pending message longer than this is cut before it is sent."""
REQUEST_CHARS = 48_000
"""The pending messages sent at once, at most (the latest ones are kept)."""
SWEEP_SESSIONS = 20
"""How many of the most recently used sessions the idle sweep looks at."""
FAILED_KEY = "memory_extraction_failed"
"""The session mark counting the sweeps whose extraction of the session failed, with the
session's `updated_at` then: ``"<updated_at> <count>"``."""
SWEEP_ATTEMPTS = 3
"""A session whose extraction failed in this many sweeps is not tried again by a sweep until it
changes (each try is a model call: a model that cannot do it would be asked at every run)."""
NOTICES_KEPT = 200

EXTRACT_INSTRUCTION = f"""You maintain the long-term memory of a coding agent. You get the \
current memory catalogue and the user's new messages. Keep only lasting facts worth knowing in \
a later session that cannot be found again by reading the project:
- user: who the user is, what they know, what they prefer;
- feedback: how they want the work done (corrections, do and don't);
- reference: where to find things outside the project (URLs, dashboards, trackers, documents).
Never keep: file structure or directory listings, code signatures, the current task's \
progress, branch or pull request names, the details of a fix, secrets (keys, tokens, \
passwords). Update an existing memory (same name) instead of creating a near duplicate; delete \
one the user says is wrong or obsolete. Names: {NAME_RULE}. Each memory holds one fact and \
why it matters.
Answer with JSON only: {{"operations": [{{"op": "create" or "update" or "delete", "name": \
"...", "category": "user" or "feedback" or "reference", "description": "one line", "body": \
"..."}}]}}, or {{"operations": []}} when nothing is worth remembering."""


class MemoryOperation(BaseModel):
    """One operation the extraction model asks for."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    op: Literal["create", "update", "delete"] = Field(
        validation_alias=AliasChoices("op", "action", "operation")
    )
    name: str = Field(min_length=1)
    category: str | None = Field(default=None, validation_alias=AliasChoices("category", "type"))
    description: str = ""
    body: str = Field(default="", validation_alias=AliasChoices("body", "content"))


class ExtractionFailed(Exception):
    """The extraction model's answer cannot be used (its messages stay pending)."""


def parse_operations(answer: str) -> tuple[list[MemoryOperation], list[str]]:
    """The operations of the model's answer and one line per entry that is not a valid
    operation; `ExtractionFailed` when the answer is not ``{"operations": [...]}`` (or
    ``{"memories": [...]}``) or a bare list (a code fence or words around the JSON are
    tolerated)."""
    return operations_in(answer, MemoryOperation, ExtractionFailed, keys=("operations", "memories"))


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


@dataclass(frozen=True, slots=True)
class PendingMessage:
    id: str
    text: str


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the job reports to a run of `session_id`: an event class and its fields."""

    session_id: str
    event: type[MemoryRejected] | type[ErrorEvent]
    fields: dict[str, Any]

    def line(self) -> str:
        if self.event is MemoryRejected:
            return (
                f"memory {self.fields['name']!r} not kept (extraction, session "
                f"{self.session_id}): {'; '.join(self.fields['reasons'])}"
            )
        return f"memory extraction (session {self.session_id}): {self.fields['message']}"


@dataclass(slots=True)
class ExtractionReport:
    """What one extraction did (or why it did nothing: `skipped`)."""

    session_id: str
    messages: int = 0
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    skipped: str | None = None
    failed: str | None = None
    notices: list[tuple[type[MemoryRejected] | type[ErrorEvent], dict[str, Any]]] = field(
        default_factory=no_items
    )
    """What the writes have to report, reported by the job once they are done."""


def pending_messages(messages: Sequence[Message], mark: str | None) -> list[PendingMessage]:
    """The user messages written after the one `mark` names (all of them without a mark),
    text only; a message whose text equals a user message at or before the mark (a copy made
    by compaction) is not pending again."""
    start = 0
    if mark is not None:
        for index, message in enumerate(messages):
            if message.id == mark:
                start = index + 1
                break
    seen = {_text(m) for m in messages[:start] if _is_user(m)}
    out: list[PendingMessage] = []
    for message in messages[start:]:
        if not _is_user(message):
            continue
        text = _text(message)
        if text.strip() and text not in seen:
            out.append(PendingMessage(message.id, text))
            seen.add(text)
    return out


def _attempts(mark: str | None, updated_at: float) -> int:
    """The failed sweeps a `FAILED_KEY` mark counts for the session as it is now (none once
    it changed, or for a mark that is not one)."""
    if mark is None:
        return 0
    stamp, _, count = mark.rpartition(" ")
    if stamp != repr(updated_at) or not count.isdigit():
        return 0
    return int(count)


def _is_user(message: Message) -> bool:
    return message.role == "user" and message.kind == "normal"


def _text(message: Message) -> str:
    return "\n".join(b.text for b in message.content if isinstance(b, TextBlock))


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
        self._policy = policy
        self._provider = provider
        self._clock = clock
        self.settings = settings or ExtractionSettings()
        self._redactor = redactor
        self._lock = asyncio.Lock()  # one extraction at a time
        self._jobs: set[asyncio.Task[None]] = set()
        self._idle: dict[str, float] = {}
        """The sessions waiting to be idle and when (loop time) they will be, oldest first:
        every wait lasts `settings.idle_seconds` (fixed for the job's life: a changed value
        would only take effect after the waits already running), so the deadlines come in the
        order of the entries and one timer, set for the first of them, serves all (a runtime
        serving thousands of sessions keeps a dict entry for each, not a timer)."""
        self._idle_timer: asyncio.TimerHandle | None = None
        self._writing: set[asyncio.Future[ExtractionReport]] = set()
        self._swept = False
        self._closed = False
        self._undelivered: dict[str, list[Notice]] = {}
        self.notices: deque[Notice] = deque(maxlen=NOTICES_KEPT)
        """Everything the job reported, newest last (the last `NOTICES_KEPT`)."""

    # --- what the runtime tells it -------------------------------------------------------------

    def run_started(self, session_id: str) -> list[Notice]:
        """A run of `session_id` starts: its idle wait ends; returns the notices of that
        session not yet recorded in one of its runs (the caller records them)."""
        self._idle.pop(session_id, None)  # (the timer finds the next one when it fires)
        return self._undelivered.pop(session_id, [])

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
        return list(self._idle)

    async def aclose(self, timeout_s: float | None = None) -> None:
        """Stop: idle waits end at once; a running extraction gets `timeout_s` (default
        `settings.close_timeout_s`) to finish, then is cancelled (its messages stay pending);
        writes already under way always finish (they are local and short)."""
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._idle.clear()
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
            writing = asyncio.ensure_future(asyncio.to_thread(self._apply, operations, report))
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
        if not self._closed:
            self._wait_idle(session_id, idle)
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

    def _wait_idle(self, session_id: str, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self._idle.pop(session_id, None)  # a new wait goes to the end: the newest
        self._idle[session_id] = at = loop.time() + seconds
        if self._idle_timer is None:
            self._idle_timer = loop.call_at(at, self._idle_due)

    def _idle_due(self) -> None:
        """The first wait (or one after it) ended: start the extraction of every session
        idle by now, and set the timer for the next wait to end."""
        self._idle_timer = None
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        idle = self._idle
        while idle:
            session_id, at = next(iter(idle.items()))
            if at > now:
                self._idle_timer = loop.call_at(at, self._idle_due)
                return
            del idle[session_id]
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

    async def _ask(self, entries: Sequence[Any], pending: Sequence[PendingMessage]) -> str:
        texts: list[str] = []
        used = 0
        for message in reversed(pending):  # the latest first, within REQUEST_CHARS
            text = message.text
            if len(text) > MESSAGE_CHARS:
                text = text[:MESSAGE_CHARS] + " […]"
            if self._redactor is not None:
                text = self._redactor.redact(text)
            if texts and used + len(text) > REQUEST_CHARS:
                break
            texts.append(text)
            used += len(text)
        texts.reverse()
        query = "\n".join(texts)
        catalogue, _listed = render_catalogue(
            entries, self.settings.catalog_max_tokens, query=query
        )
        numbered = "\n\n".join(f"[{i}] {text}" for i, text in enumerate(texts, 1))
        request = ModelRequest(
            system=[SystemPart(label="memory_extraction", text=EXTRACT_INSTRUCTION)],
            messages=[
                user_text(
                    f"{catalogue or 'The memory is empty.'}\n\n"
                    f"The user's new messages, oldest first:\n\n{numbered}"
                )
            ],
            tools=(),
            max_output_tokens=EXTRACT_OUTPUT_TOKENS,
            temperature=self.settings.temperature,
        )
        return await answer_text(self._provider, request)

    def _apply(
        self, operations: Sequence[MemoryOperation], report: ExtractionReport
    ) -> ExtractionReport:
        """Write the operations through the policy and the store (in a worker thread)."""
        store = self._memory
        for op in operations:
            try:
                if op.op == "delete":
                    try:
                        store.delete(op.name)
                        report.deleted.append(op.name)
                    except MemoryNotFound:
                        report.problems.append(f"delete {op.name!r}: no such memory")
                    continue
                self._save(op, report)
            except SoongAgentError as exc:
                message = f"{op.op} {op.name!r} not done: {exc}"
                report.problems.append(message)
                report.notices.append(
                    (ErrorEvent, {"kind": "memory_extraction", "message": message})
                )
        return report

    def _save(self, op: MemoryOperation, report: ExtractionReport) -> None:
        store = self._memory
        name = op.name.strip()
        existing = self._existing(name)
        if existing is None and op.description.strip():
            same = op.description.strip().casefold()
            for entry in store.catalogue().entries:
                if entry.description.strip().casefold() == same:
                    name, existing = entry.name, self._existing(entry.name)
                    break
        verdict = self._policy.review(
            name=name,
            description=op.description or (existing.description if existing else ""),
            body=op.body or (existing.body if existing else ""),
            category=op.category or (existing.category if existing else None),
        )
        if not verdict.accepted:
            report.rejected.append(name)
            report.notices.append((MemoryRejected, memory_rejected_fields(verdict, source=SOURCE)))
            return
        created = existing.created if existing is not None else None
        store.write(dataclasses.replace(verdict.memory, created=created))
        (report.updated if existing is not None else report.created).append(name)

    def _existing(self, name: str) -> Memory | None:
        try:
            return self._memory.read(name)
        except MemoryNotFound:
            return None
        except MemoryPathRefused:  # a name that can never be a memory's: the policy says why
            return None
        except MemoryFileInvalid:  # a broken file under that name: the memory replaces it
            return None

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
        if event is ErrorEvent:
            fields.setdefault("fatal", False)
        notice = Notice(session_id, event, fields)
        self.notices.append(notice)
        undelivered = self._undelivered.setdefault(session_id, [])
        undelivered.append(notice)
        del undelivered[:-NOTICES_KEPT]
        log.warning("%s", notice.line())

    def __repr__(self) -> str:
        return f"MemoryExtraction(jobs={len(self._jobs)}, idle={len(self._idle)})"
