"""Memory consolidation (seed 002 "Dream"): tidy the memory folder now and then.

One pass reads every memory and
1. rewrites relative dates as absolute ones, the memory's `updated` time being the reference
   (deterministic: `soong_agent.domain.memory.consolidation.absolute_dates`);
2. asks the consolidation model (the extraction model) for JSON operations, validated with
   pydantic: ``{"operations": [{"op": "merge", "name", "sources", "description", "body",
   "category"}, {"op": "resolve", "name", "sources", "body"}, {"op": "update", ...},
   {"op": "delete", "name"}]}`` — merge duplicates into one memory, resolve contradictions
   (the most recently updated memory wins, whatever the model says; its body notes each
   memory it supersedes, which is removed), update or delete;
3. keeps `MEMORY.md` under 200 lines / 25 KB: the model is told the cap and asked to merge;
   when its operations leave the index too big, the least recently updated memories are
   dropped until it fits (`least_useful`; the plan lists them).

Every memory written goes through `MemoryPolicy.review` (a refused one is listed as rejected
and not written; the memories it would have replaced are kept) and the `MemoryStore` (the
same writer as the agent's tools and extraction). `plan` returns the steps without applying
them (dry run); `apply` skips a step whose memories changed since the plan.

When it runs (`maybe_run`, for the runtime): at most once per `memory.consolidate_min_hours`
and only after `memory.consolidate_min_sessions` root sessions were created since the last
pass, and never while no memory is stored (the memory folder is not made for it), under an
exclusive, non-blocking `flock` on ``<memory_dir>/.consolidation.lock`` (a second process
skips). The lock file's mtime records the last pass: it is set (from the clock) when a pass
starts, so a pass that crashes is not retried before `min_hours`; a pass whose model fails puts
the previous mtime back (retried at the next trigger); one cancelled before it writes (its
process ended first: a short CLI run) is tried again an hour later. A lock file created but
never stamped has mtime 0 (never ran). `run(force=True)` (the CLI) skips the gates but not
the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import fcntl
import logging
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from soong_agent.application.model_answers import answer_text, operations_in
from soong_agent.domain.memory import NAME_RULE, MemoryPolicy
from soong_agent.domain.memory.consolidation import (
    MAX_INDEX_BYTES,
    MAX_INDEX_LINES,
    absolute_dates,
    index_size,
    least_useful,
    newer_first,
    superseded_note,
)
from soong_agent.domain.skills import one_line
from soong_agent.ports.defaults import no_items
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.memory import (
    Memory,
    MemoryEntry,
    MemoryFileInvalid,
    MemoryNotFound,
    MemoryStore,
)
from soong_agent.ports.messages import user_text
from soong_agent.ports.model import ModelProvider, ModelRequest, SystemPart
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.storage import SessionStore
from soong_agent.ports.system import Clock

log = logging.getLogger("soong_agent.memory")

LOCK_FILE = ".consolidation.lock"
"""In the memory folder; its mtime is the start of the last pass (0: never)."""
CANCELLED_RETRY_S = 3600.0
"""A pass cancelled before it wrote anything (its process ended first) is due again this much
later (or after `min_hours`, when that is shorter)."""
CONSOLIDATE_TIMEOUT_S = 300.0
CONSOLIDATE_OUTPUT_TOKENS = 8_000
BODY_CHARS = 1_500
"""A body longer than this is cut (marked ``[cut]``) in what the model reads."""
REQUEST_CHARS = 100_000
"""Beyond this, memories are sent by their index line only."""
SESSIONS_LOOKED_AT = 500

CONSOLIDATE_INSTRUCTION = f"""You tidy the long-term memory of a coding agent. You get every \
memory: name, category, updated date, description and body. Propose operations:
- merge: memories that say the same thing become one ("name": the memory kept, possibly a \
new name; "sources": the other memories merged into it, which are removed; "description", \
"body", "category": the merged memory);
- resolve: memories that contradict each other ("sources": all of them); the most recently \
updated one is kept, optionally with a new "body";
- update: a memory whose description or body should be clearer;
- delete: a memory that is obsolete or worthless.
Keep every fact that still matters. Do not rewrite a body marked [cut]: only merge it \
without a body, or delete it. The index must stay under {{lines}} lines and {{kbytes}} KB; \
it has {{now_lines}} lines and {{now_kbytes}} KB now: when it is too big, merge more. Names: \
{NAME_RULE}. Never write secrets.
Answer with JSON only: {{{{"operations": [{{{{"op": "merge" or "resolve" or "update" or \
"delete", "name": "...", "sources": ["..."], "category": "user" or "feedback" or \
"reference", "description": "one line", "body": "...", "reason": "why"}}}}]}}}}, or \
{{{{"operations": []}}}} when the memory is tidy."""


class ConsolidationOperation(BaseModel):
    """One operation the consolidation model proposes."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    op: Literal["merge", "resolve", "update", "delete"] = Field(
        validation_alias=AliasChoices("op", "action", "operation")
    )
    name: str = Field(min_length=1)
    sources: list[str] = Field(default_factory=no_items)
    category: str | None = Field(default=None, validation_alias=AliasChoices("category", "type"))
    description: str = ""
    body: str = Field(default="", validation_alias=AliasChoices("body", "content"))
    reason: str = ""


class ConsolidationFailed(Exception):
    """The consolidation model's answer cannot be used."""


def parse_operations(answer: str) -> tuple[list[ConsolidationOperation], list[str]]:
    """The operations of ``{"operations": [...]}`` (or a bare list; a code fence or words
    around the JSON are tolerated) and one line per entry that is not a valid operation."""
    return operations_in(answer, ConsolidationOperation, ConsolidationFailed)


StepKind = Literal["redate", "merge", "resolve", "update", "delete", "drop"]


@dataclass(frozen=True, slots=True)
class Step:
    """One change of a plan: write `memory` (when given), then delete `removes`."""

    kind: StepKind
    name: str
    memory: Memory | None = None
    removes: tuple[str, ...] = ()
    reason: str = ""
    seen: tuple[tuple[str, float], ...] = ()
    """(name, updated timestamp) of every memory the step reads: `apply` skips the step
    when one of them changed since."""

    def line(self) -> str:
        what = {
            "redate": f"rewrite relative dates in {self.name!r}",
            "merge": f"merge {', '.join(repr(n) for n in self.removes)} into {self.name!r}",
            "resolve": f"keep {self.name!r} (newer), superseding "
            + ", ".join(repr(n) for n in self.removes),
            "update": f"update {self.name!r}",
            "delete": f"delete {self.name!r}",
            "drop": f"drop {self.name!r} (least recently updated; index over the cap)",
        }[self.kind]
        return f"{what}: {self.reason}" if self.reason else what


@dataclass(frozen=True, slots=True)
class Rejection:
    name: str
    kind: str
    reasons: tuple[str, ...]

    def line(self) -> str:
        return f"{self.kind} {self.name!r} refused by the memory policy: {'; '.join(self.reasons)}"


@dataclass(slots=True)
class ConsolidationPlan:
    """What a pass would do (nothing is written until `apply`)."""

    steps: list[Step] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    index_before: tuple[int, int] = (0, 0)
    index_after: tuple[int, int] = (0, 0)
    """(lines, bytes) of `MEMORY.md` before and after the steps."""

    def lines(self) -> list[str]:
        out = [step.line() for step in self.steps]
        out += [rejection.line() for rejection in self.rejected]
        out += self.problems
        return out


@dataclass(slots=True)
class ConsolidationReport:
    """What a pass did, or why it did nothing (`skipped`) or failed (`failed`)."""

    plan: ConsolidationPlan | None = None
    applied: list[Step] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    skipped: str | None = None
    failed: str | None = None


@dataclass(frozen=True, slots=True)
class ConsolidationSettings:
    """`memory.consolidate_min_hours`, `consolidate_min_sessions`, the index cap, and how the
    model is asked."""

    min_hours: float = 24.0
    min_sessions: int = 5
    max_index_lines: int = MAX_INDEX_LINES
    max_index_bytes: int = MAX_INDEX_BYTES
    timeout_s: float = CONSOLIDATE_TIMEOUT_S
    temperature: float | None = None


class ConsolidationLock:
    """``<folder>/.consolidation.lock``: an exclusive non-blocking `flock`; its mtime is the
    start of the last pass (0 or no file: never)."""

    def __init__(self, folder: str) -> None:
        self.path = os.path.join(folder, LOCK_FILE)

    def last_pass(self) -> float | None:
        try:
            stamp = os.stat(self.path, follow_symlinks=False).st_mtime
        except FileNotFoundError:
            return None
        return stamp or None

    @contextlib.contextmanager
    def held(self) -> Iterator[int | None]:
        """The lock file's descriptor while the lock is held; None when another process (or
        task) holds it."""
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags | os.O_EXCL, 0o600)
            created = True
        except FileExistsError:
            fd = os.open(self.path, flags, 0o600)
            created = False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield None
                return
            if created:
                os.utime(fd, (0, 0))  # never ran
            try:
                yield fd
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _stamp(memory: Memory) -> float:
    return memory.updated.timestamp() if memory.updated is not None else 0.0


def _entry(memory: Memory, when: dt.datetime) -> MemoryEntry:
    created = memory.created or when
    return MemoryEntry(
        name=memory.name,
        description=memory.description,
        category=memory.category,
        path=f"{memory.category}/{memory.name}.md",
        created=created,
        updated=memory.updated or when,
    )


class MemoryConsolidation:
    """The consolidation pass over one memory folder."""

    def __init__(
        self,
        *,
        memory: MemoryStore,
        policy: MemoryPolicy,
        provider: ModelProvider,
        clock: Clock,
        folder: str,
        sessions: SessionStore | None = None,
        settings: ConsolidationSettings | None = None,
        redactor: SecretRedactor | None = None,
    ) -> None:
        self._memory = memory
        self._policy = policy
        self._provider = provider
        self._clock = clock
        self.lock = ConsolidationLock(folder)
        self._sessions = sessions
        self.settings = settings or ConsolidationSettings()
        self._not_before = -math.inf
        """No pass is due before this time (the last pass seen plus `min_hours`)."""
        self._redactor = redactor

    # --- when ----------------------------------------------------------------------------------

    def may_be_due(self) -> bool:
        """False when a pass is certainly not due (the last one was under `min_hours` ago):
        a look at the lock file at most, and none until that time has passed (another
        process's pass only moves it later). The runtime asks before starting a job."""
        now = self._clock.now()
        if now < self._not_before or self._memory.surely_empty():
            return False
        last = self.lock.last_pass()
        if last is None:
            return True
        self._not_before = last + self.settings.min_hours * 3600
        return now >= self._not_before

    async def not_due(self) -> str | None:
        """Why a pass is not due now (None: it is): `min_hours` since the last pass and
        `min_sessions` root sessions created since (not checked without a session store)."""
        last = self.lock.last_pass()
        now = self._clock.now()
        if last is not None and now - last < self.settings.min_hours * 3600:
            return f"the last pass was {(now - last) / 3600:.1f} h ago"
        if self._sessions is not None and self.settings.min_sessions > 0:
            infos = await self._sessions.list_sessions(limit=SESSIONS_LOOKED_AT)
            new = sum(
                1
                for info in infos
                if info.parent_session_id is None and (last is None or info.created_at > last)
            )
            if new < self.settings.min_sessions:
                return f"{new} new sessions since the last pass"
        return None

    async def maybe_run(self) -> ConsolidationReport:
        """A pass when it is due (the runtime's trigger); never raises."""
        try:
            return await self.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a background job must not take the runtime down
            log.exception("memory consolidation failed")
            return ConsolidationReport(failed=f"{type(exc).__name__}: {exc}")

    async def run(self, *, force: bool = False) -> ConsolidationReport:
        """Plan and apply a pass under the lock (skipped when another process holds it);
        without `force`, only when it is due (`not_due`)."""
        if self._memory.surely_empty():  # nothing to tidy: no lock file, no folder made
            return ConsolidationReport(skipped="no memories yet")
        if not force:
            reason = await self.not_due()  # a cheap look before taking the lock
            if reason is not None:
                return ConsolidationReport(skipped=reason)
        with self.lock.held() as fd:
            if fd is None:
                return ConsolidationReport(skipped="another process is consolidating")
            if not force:
                reason = await self.not_due()  # again: another process may just have run
                if reason is not None:
                    return ConsolidationReport(skipped=reason)
            previous = os.fstat(fd).st_mtime
            now = self._clock.now()
            os.utime(fd, (now, now))  # claimed: a crash from here is not retried at once
            try:
                plan = await self.plan()
            except asyncio.CancelledError:  # the process is ending (a CLI run was over)
                # nothing was done: tried again in an hour (not at the next run: a pass longer
                # than the runs beside it would start again, and be paid for, at every run)
                gap = self.settings.min_hours * 3600
                stamp = now - gap + min(CANCELLED_RETRY_S, gap)  # due again that much later
                os.utime(fd, (stamp, stamp))
                raise
            except (ConsolidationFailed, SoongAgentError, TimeoutError) as exc:
                os.utime(fd, (previous, previous))  # retried at the next trigger
                reason = str(exc) or type(exc).__name__
                log.warning("memory consolidation failed, to be retried: %s", reason)
                return ConsolidationReport(failed=reason)
            report = await asyncio.to_thread(self.apply, plan)
            for line in report.problems:
                log.warning("memory consolidation: %s", line)
            return report

    # --- the pass ------------------------------------------------------------------------------

    async def plan(self) -> ConsolidationPlan:
        """The steps of a pass, nothing written (the dry run). ConsolidationFailed (or the
        provider's error, TimeoutError) when the model's answer cannot be used."""
        memories, problems = await asyncio.to_thread(self._read_all)
        plan = ConsolidationPlan(problems=problems)
        when = dt.datetime.fromtimestamp(self._clock.now(), dt.UTC)
        before = [_entry(m, when) for m in memories.values()]
        plan.index_before = index_size(before)
        if not memories:
            return plan
        # 1. relative dates, deterministic: what the model reads is already absolute
        dated = {name: self._redated(m) for name, m in memories.items()}
        # 2. the model's operations
        async with asyncio.timeout(self.settings.timeout_s):
            answer = await self._ask(list(dated.values()), plan.index_before)
        operations, bad = parse_operations(answer)
        plan.problems += bad
        working = dict(dated)
        for op in operations:
            self._plan_op(op, memories, working, plan)
        for name, memory in dated.items():
            if name in working and working[name] is memory and memory != memories[name]:
                self._add_write(plan, working, "redate", memory, (), "", [memories[name]])
        # 3. the cap
        after = [_entry(m, when) for m in working.values()]
        for entry in least_useful(
            after,
            max_lines=self.settings.max_index_lines,
            max_bytes=self.settings.max_index_bytes,
        ):
            written = any(s.memory is not None and s.name == entry.name for s in plan.steps)
            seen = () if written else ((entry.name, _stamp(working[entry.name])),)
            plan.steps.append(Step("drop", entry.name, seen=seen))
            del working[entry.name]
        plan.index_after = index_size(_entry(m, when) for m in working.values())
        return plan

    def apply(self, plan: ConsolidationPlan) -> ConsolidationReport:
        """Write the plan's steps through the store (blocking: call it in a worker thread);
        a step whose memories changed since the plan is skipped."""
        report = ConsolidationReport(plan=plan, problems=list(plan.problems))
        report.problems += [r.line() for r in plan.rejected]
        store = self._memory
        for step in plan.steps:
            current = {e.name: e.updated.timestamp() for e in store.catalogue().entries}
            changed = [n for n, stamp in step.seen if current.get(n) != stamp]
            if changed:
                report.problems.append(
                    f"{step.line()}: skipped, {', '.join(changed)} changed since the plan"
                )
                continue
            try:
                if step.memory is not None:
                    store.write(step.memory)
                for name in step.removes:
                    if name != step.name:
                        store.delete(name)
                if step.kind in ("delete", "drop"):
                    store.delete(step.name)
                report.applied.append(step)
            except SoongAgentError as exc:
                report.problems.append(f"{step.line()}: not done: {exc}")
        return report

    # --- helpers -------------------------------------------------------------------------------

    def _read_all(self) -> tuple[dict[str, Memory], list[str]]:
        catalogue = self._memory.catalogue()
        problems = list(catalogue.problems)
        memories: dict[str, Memory] = {}
        for entry in catalogue.entries:
            try:
                memories[entry.name] = self._memory.read(entry.name)
            except (MemoryNotFound, MemoryFileInvalid) as exc:
                problems.append(f"{entry.path}: {exc}")
        return memories, problems

    def _redated(self, memory: Memory) -> Memory:
        ref = memory.updated or dt.datetime.fromtimestamp(self._clock.now(), dt.UTC)
        description = absolute_dates(memory.description, ref)
        body = absolute_dates(memory.body, ref)
        if description is memory.description and body is memory.body:
            return memory
        return dataclasses.replace(memory, description=description, body=body)

    def _plan_op(
        self,
        op: ConsolidationOperation,
        original: dict[str, Memory],
        working: dict[str, Memory],
        plan: ConsolidationPlan,
    ) -> None:
        name = op.name.strip()
        names = [name, *(s.strip() for s in op.sources if s.strip() != name)]
        gone = [n for n in names if n in original and n not in working]
        if gone:
            plan.problems.append(
                f"{op.op} {name!r} ignored: {', '.join(gone)} already changed by this pass"
            )
            return
        involved = [working[n] for n in names if n in working]
        unknown = [n for n in names if n not in working and not (op.op == "merge" and n == name)]
        if unknown:
            plan.problems.append(
                f"{op.op} {name!r} ignored: no memory named {', '.join(map(repr, unknown))}"
            )
            return
        seen = [original[m.name] for m in involved]
        if op.op == "delete":
            plan.steps.append(Step("delete", name, reason=op.reason, seen=_seen(seen)))
            del working[name]
            return
        if op.op == "update":
            old = working[name]
            memory = dataclasses.replace(
                old,
                description=op.description or old.description,
                body=op.body or old.body,
                category=op.category or old.category,  # type: ignore[arg-type]
            )
            self._add_write(plan, working, "update", memory, (), op.reason, seen)
            return
        if len(involved) < 2:
            plan.problems.append(f"{op.op} {name!r} ignored: it needs two memories or more")
            return
        if op.op == "resolve":
            ranked = newer_first(_entry(m, m.updated or dt.datetime.now(dt.UTC)) for m in involved)
            winner = working[ranked[0].name]
            notes = [superseded_note(loser, working[loser.name].body) for loser in ranked[1:]]
            body = "\n\n".join([op.body.strip() or winner.body, *notes])
            memory = dataclasses.replace(
                winner, description=op.description or winner.description, body=body
            )
            removes = tuple(e.name for e in ranked[1:])
            self._add_write(plan, working, "resolve", memory, removes, op.reason, seen)
            return
        # merge
        target = working.get(name) or involved[0]
        created = [m.created for m in involved if m.created is not None]
        memory = Memory(
            name=name,
            description=op.description or target.description,
            body=op.body or "\n\n".join(m.body for m in involved),
            category=op.category or target.category,  # type: ignore[arg-type]
            created=min(created) if created else None,
            updated=max((m.updated for m in involved if m.updated is not None), default=None),
        )
        removes = tuple(m.name for m in involved if m.name != name)
        self._add_write(plan, working, "merge", memory, removes, op.reason, seen)

    def _add_write(
        self,
        plan: ConsolidationPlan,
        working: dict[str, Memory],
        kind: StepKind,
        memory: Memory,
        removes: tuple[str, ...],
        reason: str,
        seen: Sequence[Memory],
    ) -> None:
        """Review `memory` (its relative dates made absolute first) and plan its write."""
        ref = memory.updated or dt.datetime.fromtimestamp(self._clock.now(), dt.UTC)
        verdict = self._policy.review(
            name=memory.name,
            description=absolute_dates(memory.description, ref),
            body=absolute_dates(memory.body, ref),
            category=memory.category,
        )
        if not verdict.accepted:
            plan.rejected.append(Rejection(memory.name, kind, tuple(verdict.reasons)))
            return
        stored = dataclasses.replace(verdict.memory, created=memory.created)
        plan.steps.append(Step(kind, memory.name, stored, removes, reason, _seen(seen)))
        for name in removes:
            working.pop(name, None)
        working[memory.name] = dataclasses.replace(stored, updated=memory.updated)

    async def _ask(self, memories: Sequence[Memory], size: tuple[int, int]) -> str:
        blocks: list[str] = []
        used = 0
        for m in memories:
            when = m.updated.date().isoformat() if m.updated is not None else "?"
            head = f"[{m.name}] ({m.category}, updated {when}) {one_line(m.description, 200)}"
            body = m.body if len(m.body) <= BODY_CHARS else m.body[:BODY_CHARS] + " [cut]"
            block = f"{head}\n{body}" if used < REQUEST_CHARS else head
            if self._redactor is not None:
                block = self._redactor.redact(block)
            blocks.append(block)
            used += len(block)
        instruction = CONSOLIDATE_INSTRUCTION.format(
            lines=self.settings.max_index_lines,
            kbytes=self.settings.max_index_bytes // 1000,
            now_lines=size[0],
            now_kbytes=f"{size[1] / 1000:.1f}",
        )
        request = ModelRequest(
            system=[SystemPart(label="memory_consolidation", text=instruction)],
            messages=[user_text("The memories:\n\n" + "\n\n".join(blocks))],
            tools=(),
            max_output_tokens=CONSOLIDATE_OUTPUT_TOKENS,
            temperature=self.settings.temperature,
        )
        return await answer_text(self._provider, request)

    def __repr__(self) -> str:
        return f"MemoryConsolidation(lock={self.lock.path!r})"


def _seen(memories: Sequence[Memory]) -> tuple[tuple[str, float], ...]:
    return tuple((m.name, _stamp(m)) for m in memories)
