"""Small fakes of the system ports: fixed clock, counting ids, dict secrets, recording approver."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import get_args

from soong_agent.ports.approval import ApprovalRequest, Decision, PlanReview
from soong_agent.ports.prompt import EnvironmentInfo, InstructionDoc, SkippedInstruction

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

    async def review_plan(self, request: ApprovalRequest) -> PlanReview:
        """A plan is reviewed with the next answer: an allow approves it (no note)."""
        return PlanReview(approved=await self.decide(request) != "deny")


class StaticContextSource:
    """A prompt context source with fixed instruction docs and environment.

    `folders` maps a folder inside the project (posix, relative: ``pkg/sub``) to its instruction
    files by name (``{"AGENTS.md": "text"}``), returned as the real source returns them:
    `CLAUDE.md` before `AGENTS.md`, labelled ``<project>/<folder>/<name>``. `reads` lists the
    folders asked for, in order.

    `skipped`: the project files the real source would leave out (a link out of the project,
    a sensitive path), each reported by `skipped` once its folder (None: the project's own
    files) has been read, as the real source reports them.

    Like the real source, which skips empty files, it never returns a doc without text: one
    given here is refused (ValueError), and so are other file names and folders that are not a
    clean relative path, and a skipped file that is also given as a doc.
    """

    def __init__(
        self,
        docs: Iterable[InstructionDoc] = (),
        env: EnvironmentInfo | None = None,
        *,
        folders: Mapping[str, Mapping[str, str]] | None = None,
        skipped: Iterable[SkippedInstruction] = (),
    ) -> None:
        self._docs = list(docs)
        for doc in self._docs:
            if not doc.text.strip():
                raise ValueError(f"instruction doc {doc.source!r} has no text")
        self._env = env or EnvironmentInfo(cwd="/project", platform="test", date="2026-01-01")
        self._folders: dict[str, list[InstructionDoc]] = {}
        for folder, files in (folders or {}).items():
            parts = folder.split("/")
            if folder.startswith("/") or any(p in ("", ".", "..") for p in parts):
                raise ValueError(f"folder {folder!r} is not a clean path inside the project")
            unknown = set(files) - {"CLAUDE.md", "AGENTS.md"}
            if unknown:
                raise ValueError(f"folder {folder!r}: only CLAUDE.md and AGENTS.md, not {unknown}")
            found: list[InstructionDoc] = []
            for name in ("CLAUDE.md", "AGENTS.md"):
                if name not in files:
                    continue
                if not files[name].strip():
                    raise ValueError(f"instruction doc {folder}/{name} has no text")
                found.append(InstructionDoc(f"<project>/{folder}/{name}", files[name], folder))
            self._folders[folder] = found
        self._skipped: dict[str | None, list[SkippedInstruction]] = {}
        given = {d.source for d in self._docs} | {
            d.source for docs in self._folders.values() for d in docs
        }
        for skip in skipped:
            if skip.source in given:
                raise ValueError(f"{skip.source!r} is given both as a doc and as skipped")
            if not skip.reason.strip():
                raise ValueError(f"skipped {skip.source!r} has no reason")
            self._skipped.setdefault(skip.folder, []).append(skip)
        self._read: set[str | None] = set()
        self.reads: list[str] = []

    def instructions(self) -> list[InstructionDoc]:
        self._read.add(None)
        return list(self._docs)

    def folder_instructions(self, folder: str) -> list[InstructionDoc]:
        self.reads.append(folder)
        self._read.add(folder)
        return list(self._folders.get(folder, ()))

    def skipped(self, folder: str | None = None) -> list[SkippedInstruction]:
        return list(self._skipped.get(folder, ())) if folder in self._read else []

    def environment(self) -> EnvironmentInfo:
        return self._env
