"""What a consolidation pass (seed 002 "Dream") would do: its plan, built from the
consolidation model's operations.

The model's answer is read as ``{"operations": [...]}`` (`parse_operations`); the `Planner`
turns each operation into a step (merge, resolve, update, delete), adds a step for each memory
whose relative dates were made absolute, and drops the least recently updated memories while
the index is over its cap. Every memory a step writes is reviewed by the memory policy first: a
refused one is a rejection, not a step. Nothing is written here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from soong_agent.application.runs.model_answers import operations_in
from soong_agent.domain.memory import MemoryPolicy
from soong_agent.domain.memory.consolidation import (
    MAX_INDEX_BYTES,
    MAX_INDEX_LINES,
    absolute_dates,
    index_size,
    least_useful,
    newer_first,
    superseded_note,
)
from soong_agent.ports.defaults import no_items
from soong_agent.ports.memory import Memory, MemoryEntry
from soong_agent.ports.system import Clock


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


def _stamp(memory: Memory) -> float:
    return memory.updated.timestamp() if memory.updated is not None else 0.0


def entry_of(memory: Memory, when: dt.datetime) -> MemoryEntry:
    created = memory.created or when
    return MemoryEntry(
        name=memory.name,
        description=memory.description,
        category=memory.category,
        path=f"{memory.category}/{memory.name}.md",
        created=created,
        updated=memory.updated or when,
    )


def _seen(memories: Sequence[Memory]) -> tuple[tuple[str, float], ...]:
    return tuple((m.name, _stamp(m)) for m in memories)


class Planner:
    """Builds a plan from the model's operations: each write reviewed by `policy`, the index
    kept within `max_lines` / `max_bytes`; times without one come from `clock`."""

    def __init__(
        self,
        policy: MemoryPolicy,
        clock: Clock,
        *,
        max_lines: int = MAX_INDEX_LINES,
        max_bytes: int = MAX_INDEX_BYTES,
    ) -> None:
        self._policy = policy
        self._clock = clock
        self._max_lines = max_lines
        self._max_bytes = max_bytes

    def fill(
        self,
        plan: ConsolidationPlan,
        memories: Mapping[str, Memory],
        dated: Mapping[str, Memory],
        operations: Iterable[ConsolidationOperation],
    ) -> None:
        """Add to `plan` the steps of `operations` over `memories` (`dated`: the same with
        their relative dates made absolute), the redates left, and the drops the cap needs."""
        when = dt.datetime.fromtimestamp(self._now(), dt.UTC)
        original = dict(memories)
        working = dict(dated)
        for op in operations:
            self._plan_op(op, original, working, plan)
        for name, memory in dated.items():
            if name in working and working[name] is memory and memory != memories[name]:
                self._add_write(plan, working, "redate", memory, (), "", [memories[name]])
        after = [entry_of(m, when) for m in working.values()]
        for entry in least_useful(after, max_lines=self._max_lines, max_bytes=self._max_bytes):
            written = any(s.memory is not None and s.name == entry.name for s in plan.steps)
            seen = () if written else ((entry.name, _stamp(working[entry.name])),)
            plan.steps.append(Step("drop", entry.name, seen=seen))
            del working[entry.name]
        plan.index_after = index_size(entry_of(m, when) for m in working.values())

    def _now(self) -> float:
        return self._clock.now()

    def redated(self, memory: Memory) -> Memory:
        """`memory` with its relative dates made absolute (itself when it has none)."""
        ref = memory.updated or dt.datetime.fromtimestamp(self._now(), dt.UTC)
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
            ranked = newer_first(
                entry_of(m, m.updated or dt.datetime.now(dt.UTC)) for m in involved
            )
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
        ref = memory.updated or dt.datetime.fromtimestamp(self._now(), dt.UTC)
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
