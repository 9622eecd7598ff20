"""Secrets out of what a run stores and shows (CFG-6): which fields of an event or a content
block may carry text, the streams held back where a secret could span two deltas, the
`Scrubber` of one run's stored copies, and artifacts scrubbed before they are written."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from pydantic import BaseModel

from soong_agent.ports.artifacts import ArtifactInfo, ArtifactStore
from soong_agent.ports.messages import Message
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.storage import RunInfo, SessionInfo

__all__ = [
    "LINE_CONTEXT",
    "PLAIN",
    "TEXT_FIELDS",
    "HeldStream",
    "RedactingArtifacts",
    "Scrubber",
    "redacting_artifacts",
    "texts_of",
]

PLAIN = frozenset(
    {
        # event fields that are identifiers, names or enumerations: never scrubbed
        "seq",
        "run_id",
        "session_id",
        "at",
        "type",
        "call_id",
        "name",
        "tool",
        "kind",
        "model",
        "decision",
        "status",
        "strategy",
        "trigger",
        "action",
        "budget",
        "project_dir",
        "child_session_id",
        "child_run_id",
        # content block fields: ids, and provider data that must go back unchanged
        "id",
        "signature",
        "redacted",
    }
)
TEXT_FIELDS: dict[type[Any], tuple[str, ...]] = {}
"""`texts_of` by class, once worked out."""


def texts_of(cls: type[Any]) -> tuple[str, ...]:
    """The fields of an event or content block class that may carry text: every field but
    identifiers, names, numbers and enumerations (strings, lists and dicts)."""
    found = TEXT_FIELDS.get(cls)
    if found is None:
        fields = getattr(cls, "model_fields", {})
        found = TEXT_FIELDS[cls] = tuple(
            name
            for name, info in fields.items()
            if name not in PLAIN and not _plain_annotation(info.annotation)
        )
    return found


def _plain_annotation(annotation: Any) -> bool:
    """Whether a field of this type can hold no text (numbers, booleans, usage, literals)."""
    if annotation in (int, float, bool, type(None)):
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return True
    args = typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        return all(_plain_annotation(a) for a in args)
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


LINE_CONTEXT = 256
"""How much of the line being streamed the redactor sees as context for each piece."""


class HeldStream:
    """The text of one stream (answer or reasoning) not yet handed on: pieces are cut where no
    secret can span the cut (`SecretRedactor.settled`), so a key the model writes across several
    deltas is still recognised whole."""

    __slots__ = ("line", "pending")

    def __init__(self) -> None:
        self.pending = ""
        self.line = ""  # raw text of the current line already handed on (context)

    def take(self, redactor: SecretRedactor, text: str, *, final: bool = False) -> str:
        buf = self.pending + text if self.pending else text
        cut = len(buf) if final else redactor.settled(buf, before=self.line)
        if cut <= 0:
            self.pending = buf
            return ""
        ready, self.pending = buf[:cut], buf[cut:]
        out = redactor.redact(ready, before=self.line)
        newline = ready.rfind("\n")
        line = ready[newline + 1 :] if newline >= 0 else self.line + ready
        self.line = line[-LINE_CONTEXT:]
        return out


class Scrubber:
    """The stored copies of one run's texts, messages and headers, scrubbed of secrets.
    `memo` holds the texts scrubbed since the last batch (most are both an event field and a
    message block: a tool result, the call's arguments, the answer), so each is scrubbed once."""

    __slots__ = ("_title", "memo", "redactor")

    def __init__(self, redactor: SecretRedactor) -> None:
        self.redactor = redactor
        self.memo: dict[str, str] = {}
        self._title: tuple[str, str] = ("", "")  # (raw, scrubbed)

    def value(self, value: Any) -> Any:
        """`value` (a text, or lists and dicts of them) with its secrets replaced; a text that
        holds none is returned as the same object."""
        if isinstance(value, str):
            done = self.memo.get(value)
            if done is None:
                done = self.memo[value] = self.redactor.redact(value)
            return done
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: v if k in PLAIN else self.value(v) for k, v in value.items()}
        return value

    def message(self, message: Message) -> Message:
        """The message as it may be stored: the same object when it holds no secret."""
        blocks: list[Any] | None = None
        for index, block in enumerate(message.content):
            clean = self._block(block)
            if clean is not block and blocks is None:
                blocks = list(message.content[:index])
            if blocks is not None:
                blocks.append(clean)
        if blocks is None:
            return message
        return message.model_copy(update={"content": blocks})

    def _block(self, block: BaseModel) -> BaseModel:
        update: dict[str, Any] | None = None
        names = TEXT_FIELDS.get(type(block))
        values = block.__dict__
        memo = self.memo
        for key in names if names is not None else texts_of(type(block)):
            value = values[key]
            if value:
                if type(value) is str:  # most were scrubbed already, as an event's field
                    clean = memo.get(value)
                    if clean is None:
                        clean = self.value(value)
                    elif clean is not value and clean == value:
                        continue  # the event's equal text (another object): nothing to replace
                else:
                    clean = self.value(value)
                if clean is not value:
                    if update is None:
                        update = {}
                    update[key] = clean
        return block.model_copy(update=update) if update else block

    def headers(self, session: SessionInfo, run: RunInfo) -> tuple[SessionInfo, RunInfo]:
        """The session's title and the run's reason as they may be stored."""
        if session.title:
            raw, clean = self._title
            if raw != session.title:
                raw, clean = session.title, self.value(session.title)
                self._title = (raw, clean)
            if clean is not raw:
                session = dataclasses.replace(session, title=clean)
        if run.reason:
            reason = self.value(run.reason)
            if reason is not run.reason:
                run = dataclasses.replace(run, reason=reason)
        return session, run


class RedactingArtifacts:
    """An `ArtifactStore` that scrubs each artifact of secrets before its bytes are written
    (CFG-6); reading is passed through. The model's preview of a stored result is made by the
    tool pipeline from the result itself, like every tool result it receives."""

    def __init__(self, inner: ArtifactStore, redactor: SecretRedactor) -> None:
        self._inner = inner
        self._redactor = redactor

    async def save(
        self, *, session_id: str, run_id: str, filename: str, data: bytes, preview_chars: int
    ) -> ArtifactInfo:
        text = data.decode("utf-8", "surrogateescape")
        clean = self._redactor.redact(text)
        if clean is not text:
            data = clean.encode("utf-8", "surrogateescape")
        return await self._inner.save(
            session_id=session_id,
            run_id=run_id,
            filename=filename,
            data=data,
            preview_chars=preview_chars,
        )

    async def get(self, session_id: str, artifact_id: str) -> ArtifactInfo | None:
        return await self._inner.get(session_id, artifact_id)

    async def read(self, session_id: str, artifact_id: str, *, offset: int, length: int) -> bytes:
        return await self._inner.read(session_id, artifact_id, offset=offset, length=length)


def redacting_artifacts(
    artifacts: ArtifactStore | None, redactor: SecretRedactor | None
) -> ArtifactStore | None:
    """`artifacts` behind the redactor (as is when either is None)."""
    if artifacts is None or redactor is None:
        return artifacts
    return RedactingArtifacts(artifacts, redactor)
