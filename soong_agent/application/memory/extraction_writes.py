"""The writes of one memory extraction (MEM-3): each operation the model asked for goes
through the memory policy, then the store.

Saving under a name that exists updates that memory (missing fields are kept from it; a create
whose description is an existing memory's updates that one), so nothing is duplicated. A
create or update the policy refuses is a rejection with its reasons and is not written. The
writes are blocking (the store is local and synchronous): the job runs them in a worker thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from soong_agent.application.memory.extraction_model import MemoryOperation
from soong_agent.application.tools.memory import memory_rejected_fields
from soong_agent.domain.memory import MemoryPolicy
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

SOURCE = "extraction"
"""`MemoryRejected.source` of the job's rejections."""


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


class ExtractionWriter:
    """Applies an extraction's operations to `store` through `policy`."""

    def __init__(self, store: MemoryStore, policy: MemoryPolicy) -> None:
        self._memory = store
        self._policy = policy

    def apply(
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
