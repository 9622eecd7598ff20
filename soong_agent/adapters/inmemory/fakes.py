"""Small fakes of the system ports: fixed clock, counting ids, dict secrets, recording approver."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import get_args

from soong_agent.ports.approval import ApprovalRequest, Decision
from soong_agent.ports.prompt import EnvironmentInfo, InstructionDoc

_DECISIONS: tuple[Decision, ...] = get_args(Decision)


class FixedClock:
    """A clock that only moves when told (`advance`)."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:
        self._now = start
        self._mono = 0.0

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        """Move both clocks forward; a monotonic clock never goes back (ValueError)."""
        if seconds < 0:
            raise ValueError("a clock cannot be moved back")
        self._now += seconds
        self._mono += seconds


class SequentialIds:
    """Ids ``<prefix>_000001``, ``<prefix>_000002`` … (one counter per prefix)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def new_id(self, prefix: str) -> str:
        count = self._counts.get(prefix, 0) + 1
        self._counts[prefix] = count
        return f"{prefix}_{count:06d}"


class DictSecretSource:
    """Secrets from a dict instead of the environment, read at each `get` like the real one.

    An empty value counts as unset; `reads` records every name asked for.
    """

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._values = dict(values or {})
        self.reads: list[str] = []

    def get(self, name: str) -> str | None:
        self.reads.append(name)
        return self._values.get(name) or None

    def set(self, name: str, value: str | None) -> None:
        """Set a variable (None unsets it); the next `get` sees it."""
        if value is None:
            self._values.pop(name, None)
        else:
            self._values[name] = value


@dataclass
class RecordingApprover:
    """Answers approval requests from a list (then `default`) and records every request.

    Every answer must be a `Decision` (ValueError otherwise).
    """

    answers: list[Decision] = field(default_factory=list)
    default: Decision = "deny"
    requests: list[ApprovalRequest] = field(default_factory=list)

    def __init__(self, answers: Iterable[Decision] = (), *, default: Decision = "deny") -> None:
        self.answers = list(answers)
        for answer in (*self.answers, default):
            if answer not in _DECISIONS:
                raise ValueError(f"{answer!r} is not a decision; use one of {_DECISIONS}")
        self.default = default
        self.requests = []

    async def decide(self, request: ApprovalRequest) -> Decision:
        self.requests.append(request)
        return self.answers.pop(0) if self.answers else self.default


class StaticContextSource:
    """A prompt context source with fixed instruction docs and environment.

    Like the real source, which skips empty files, it never returns a doc without text: one
    given here is refused (ValueError).
    """

    def __init__(
        self,
        docs: Iterable[InstructionDoc] = (),
        env: EnvironmentInfo | None = None,
    ) -> None:
        self._docs = list(docs)
        for doc in self._docs:
            if not doc.text.strip():
                raise ValueError(f"instruction doc {doc.source!r} has no text")
        self._env = env or EnvironmentInfo(cwd="/project", platform="test", date="2026-01-01")

    def instructions(self) -> list[InstructionDoc]:
        return list(self._docs)

    def environment(self) -> EnvironmentInfo:
        return self._env
