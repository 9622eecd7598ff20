"""What the extraction model (MEM-3) is asked, and how its answer is read.

The request holds the session's pending user messages (text only, the latest within
`REQUEST_CHARS`, each cut at `MESSAGE_CHARS` and scrubbed by the redactor) and the memory
catalogue; the answer is JSON operations ``{"operations": [{"op": "create" | "update" |
"delete", "name", "category", "description", "body"}]}``, validated with pydantic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from soong_agent.application.memory.catalogue import render_catalogue
from soong_agent.application.runs.model_answers import operations_in
from soong_agent.domain.memory import NAME_RULE
from soong_agent.ports.memory import MemoryEntry
from soong_agent.ports.messages import Message, TextBlock, user_text
from soong_agent.ports.model import ModelRequest, SystemPart
from soong_agent.ports.secrets import SecretRedactor

EXTRACT_OUTPUT_TOKENS = 2_000
MESSAGE_CHARS = 4_000
"""A pending message longer than this is cut before it is sent."""
REQUEST_CHARS = 48_000
"""The pending messages sent at once, at most (the latest ones are kept)."""

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
class PendingMessage:
    """A user message not extracted yet: its id and its text."""

    id: str
    text: str


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


def _is_user(message: Message) -> bool:
    return message.role == "user" and message.kind == "normal"


def _text(message: Message) -> str:
    return "\n".join(b.text for b in message.content if isinstance(b, TextBlock))


def extraction_request(
    entries: Sequence[MemoryEntry],
    pending: Sequence[PendingMessage],
    *,
    catalog_max_tokens: int,
    temperature: float | None,
    redactor: SecretRedactor | None,
) -> ModelRequest:
    """The request asking the extraction model about `pending` (the latest messages first
    within `REQUEST_CHARS`, sent oldest first), with the catalogue of `entries`."""
    texts: list[str] = []
    used = 0
    for message in reversed(pending):  # the latest first, within REQUEST_CHARS
        text = message.text
        if len(text) > MESSAGE_CHARS:
            text = text[:MESSAGE_CHARS] + " […]"
        if redactor is not None:
            text = redactor.redact(text)
        if texts and used + len(text) > REQUEST_CHARS:
            break
        texts.append(text)
        used += len(text)
    texts.reverse()
    query = "\n".join(texts)
    catalogue, _listed = render_catalogue(entries, catalog_max_tokens, query=query)
    numbered = "\n\n".join(f"[{i}] {text}" for i, text in enumerate(texts, 1))
    return ModelRequest(
        system=[SystemPart(label="memory_extraction", text=EXTRACT_INSTRUCTION)],
        messages=[
            user_text(
                f"{catalogue or 'The memory is empty.'}\n\n"
                f"The user's new messages, oldest first:\n\n{numbered}"
            )
        ],
        tools=(),
        max_output_tokens=EXTRACT_OUTPUT_TOKENS,
        temperature=temperature,
    )
