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
pass, and never while no memory is stored (the memory folder is not made for it), under the
memory store's consolidation lock, not waited for (a second process skips; the file store
takes an exclusive `flock` on ``<memory_dir>/.consolidation.lock``). The lock records when the
last pass started: it is stamped (from the clock) when a pass starts, so a pass that crashes
is not retried before `min_hours`; a pass whose model fails puts the previous stamp back
(retried at the next trigger); one cancelled before it writes (its process ended first: a
short CLI run) is tried again an hour later. A lock never stamped means never ran.
`run(force=True)` (the CLI) skips the gates but not the lock. The plan is built in
`consolidation_plan`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from soong_agent.application.memory.consolidation_plan import (
    ConsolidationFailed,
    ConsolidationPlan,
    ConsolidationReport,
    Planner,
    entry_of,
    parse_operations,
)
from soong_agent.application.runs.model_answers import answer_text
from soong_agent.domain.memory import NAME_RULE, MemoryPolicy
from soong_agent.domain.memory.consolidation import MAX_INDEX_BYTES, MAX_INDEX_LINES, index_size
from soong_agent.domain.skills import one_line
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.memory import Memory, MemoryFileInvalid, MemoryNotFound, MemoryStore
from soong_agent.ports.messages import user_text
from soong_agent.ports.model import ModelProvider, ModelRequest, SystemPart
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.storage import SessionStore
from soong_agent.ports.system import Clock

log = logging.getLogger("soong_agent.memory")

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


class MemoryConsolidation:
    """The consolidation pass over one memory folder (`memory`, which keeps the lock)."""

    def __init__(
        self,
        *,
        memory: MemoryStore,
        policy: MemoryPolicy,
        provider: ModelProvider,
        clock: Clock,
        sessions: SessionStore | None = None,
        settings: ConsolidationSettings | None = None,
        redactor: SecretRedactor | None = None,
    ) -> None:
        self._memory = memory
        self._policy = policy
        self._provider = provider
        self._clock = clock
        self._sessions = sessions
        self.settings = settings or ConsolidationSettings()
        self._not_before = -math.inf
        """No pass is due before this time (the last pass seen plus `min_hours`)."""
        self._redactor = redactor

    # --- when ----------------------------------------------------------------------------------

    def may_be_due(self) -> bool:
        """False when a pass is certainly not due (the last one was under `min_hours` ago):
        a look at the lock at most, and none until that time has passed (another
        process's pass only moves it later). The runtime asks before starting a job."""
        now = self._clock.now()
        if now < self._not_before or self._memory.surely_empty():
            return False
        last = self._memory.last_consolidation()
        if last is None:
            return True
        self._not_before = last + self.settings.min_hours * 3600
        return now >= self._not_before

    async def not_due(self) -> str | None:
        """Why a pass is not due now (None: it is): `min_hours` since the last pass and
        `min_sessions` root sessions created since (not checked without a session store)."""
        last = self._memory.last_consolidation()
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
        if self._memory.surely_empty():  # nothing to tidy: no lock taken, no folder made
            return ConsolidationReport(skipped="no memories yet")
        if not force:
            reason = await self.not_due()  # a cheap look before taking the lock
            if reason is not None:
                return ConsolidationReport(skipped=reason)
        with self._memory.consolidation_lock() as claim:
            if claim is None:
                return ConsolidationReport(skipped="another process is consolidating")
            if not force:
                reason = await self.not_due()  # again: another process may just have run
                if reason is not None:
                    return ConsolidationReport(skipped=reason)
            previous = claim.last_pass or 0.0
            now = self._clock.now()
            claim.stamp(now)  # claimed: a crash from here is not retried at once
            try:
                plan = await self.plan()
            except asyncio.CancelledError:  # the process is ending (a CLI run was over)
                # nothing was done: tried again in an hour (not at the next run: a pass longer
                # than the runs beside it would start again, and be paid for, at every run)
                gap = self.settings.min_hours * 3600
                claim.stamp(now - gap + min(CANCELLED_RETRY_S, gap))  # due again that much later
                raise
            except (ConsolidationFailed, SoongAgentError, TimeoutError) as exc:
                claim.stamp(previous)  # retried at the next trigger
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
        plan.index_before = index_size(entry_of(m, when) for m in memories.values())
        if not memories:
            return plan
        planner = Planner(
            self._policy,
            self._clock,
            max_lines=self.settings.max_index_lines,
            max_bytes=self.settings.max_index_bytes,
        )
        # 1. relative dates, deterministic: what the model reads is already absolute
        dated = {name: planner.redated(m) for name, m in memories.items()}
        # 2. the model's operations, 3. the cap
        async with asyncio.timeout(self.settings.timeout_s):
            answer = await self._ask(list(dated.values()), plan.index_before)
        operations, bad = parse_operations(answer)
        plan.problems += bad
        planner.fill(plan, memories, dated, operations)
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
        return f"MemoryConsolidation(memory={self._memory!r})"
