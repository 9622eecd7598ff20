"""Recall (MEM-4): before each root run, the memories that matter for its message join the
system prompt.

The catalogue (name, category and description of every memory, at most `catalog_max_tokens`)
and the user's message go to the recall model (`memory.recall_model_profile`, else the main
model) with a short instruction asking for a JSON list of at most `recall_top_k` names. The
answer is validated: names no memory has are dropped. When the call fails, takes longer than
`RECALL_TIMEOUT_S` or answers something that is not such a list (or names only unknown
memories), a lexical ranker picks instead: BM25 (the `rank-bm25` package) over the catalogue.
The chosen memories' text becomes the ``memory`` part of the system prompt, within
`memory_context_token_budget`; what does not fit is cut with a visible marker. A memory folder
without memories costs nothing: no model is called and no part is added.

The catalogue (`catalogue`) and the lexical ranker (`lexical`) have modules of their own;
recall never loads a tokenizer.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from soong_agent.application.memory.catalogue import render_catalogue
from soong_agent.application.memory.lexical import LexicalIndex, catalogue_key
from soong_agent.application.runs.model_answers import FENCE, answer_text
from soong_agent.domain.skills import one_line
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.memory import Memory, MemoryEntry, MemoryStore
from soong_agent.ports.messages import user_text
from soong_agent.ports.model import ModelProvider, ModelRequest, SystemPart
from soong_agent.ports.secrets import SecretRedactor

RECALL_TIMEOUT_S = 4.0
"""How long the recall model may take (the run waits for it) before BM25 picks instead."""
RECALL_OUTPUT_TOKENS = 400
"""The recall model's answer is a short list of names."""
MESSAGE_CHARS = 4_000
"""The part of the user's message the recall model is shown."""

RecallMethod = Literal["model", "lexical", "none"]

RECALL_INSTRUCTION = """You select long-term memories for a coding agent. You get a catalogue of \
memories (one per line: name [category]: description) and the user's next request. Answer with \
a JSON array of the names of the memories that would help the agent with this request, most \
useful first, at most {top_k}; [] when none would. Answer with the JSON array only, nothing \
else."""

MEMORY_HEADER = (
    "Memories from earlier sessions, recalled for this request. They may be out of date: what "
    "you see in the project and what the user says now win over them."
)


@dataclass(frozen=True, slots=True)
class RecallSettings:
    """`memory.recall_top_k`, `catalog_max_tokens` and `memory_context_token_budget`, and how
    the recall model is asked."""

    top_k: int = 5
    catalog_max_tokens: int = 2_000
    context_tokens: int = 2_000
    timeout_s: float = RECALL_TIMEOUT_S
    temperature: float | None = None


@dataclass(frozen=True, slots=True)
class Recalled:
    """What recall chose for one run: the memories' names, who chose them and why, and the
    text of the ``memory`` part of the system prompt (empty: no part)."""

    names: tuple[str, ...]
    method: RecallMethod
    reason: str
    text: str = ""

    def event_fields(self) -> dict[str, Any]:
        """The fields of a `MemoryRecalled` event."""
        return {"names": list(self.names), "method": self.method, "reason": self.reason}


# --- the memory part ------------------------------------------------------------------------


def _memory_block(memory: Memory) -> str:
    return (
        f'<memory name="{memory.name}" category="{memory.category}">\n'
        f"{memory.description}\n\n{memory.body}\n</memory>"
    )


def cut_marker(name: str, budget_tokens: int) -> str:
    return (
        f"[… memory {name!r} cut here: the recalled memories fill their budget "
        f"(memory_context_token_budget = {budget_tokens} tokens)]"
    )


def left_out_marker(names: Sequence[str]) -> str:
    return (
        f"[… {len(names)} more recalled memories left out, the memory budget is full: "
        f"{', '.join(names)}]"
    )


def render_memories(memories: Sequence[Memory], budget_tokens: int) -> tuple[str, list[str]]:
    """The ``memory`` part: a header, then each memory whole while they fit within
    `budget_tokens`; the first that does not fit is cut with a marker (when a useful part of it
    fits), the others are named in a last marker. Returns the text ("" when not even the
    header fits) and the names of the memories it holds (a cut one included)."""
    if not memories or budget_tokens <= 0:
        return "", []
    budget = budget_tokens * 4
    parts = [MEMORY_HEADER]
    used = len(MEMORY_HEADER)
    held: list[str] = []
    for index, memory in enumerate(memories):
        block = _memory_block(memory)
        later = [m.name for m in memories[index + 1 :]]
        reserve = len(left_out_marker(later)) + 2 if later else 0
        if used + 2 + len(block) + reserve <= budget:
            parts.append(block)
            used += 2 + len(block)
            held.append(memory.name)
            continue
        marker = cut_marker(memory.name, budget_tokens)
        closing = "\n</memory>"
        room = budget - used - 2 - len(marker) - len(closing) - 1 - reserve
        head = block[: max(room, 0)].rstrip()
        if room >= min(200, len(block) // 2) and head:
            parts.append(f"{head}\n{marker}{closing}")
            held.append(memory.name)
        else:
            later = [memory.name, *later]
        parts.append(left_out_marker(later) if later else "")
        break
    if not held:
        return "", []
    return "\n\n".join(p for p in parts if p), held


# --- the recall model's answer ---------------------------------------------------------------

_ARRAY = re.compile(r"\[.*\]", re.DOTALL)


def parse_names(answer: str) -> list[str] | None:
    """The names of a JSON array of strings in `answer` (a code fence or words around it are
    tolerated; ``{"names": [...]}`` too); None when there is no such array."""
    text = FENCE.sub("", answer.strip())
    candidates = [text]
    found = _ARRAY.search(text)
    if found is not None and found.group(0) != text:
        candidates.append(found.group(0))
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            value = next((v for v in value.values() if isinstance(v, list)), None)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [v.strip() for v in value]
    return None


# --- recall ------------------------------------------------------------------------------------


class MemoryRecall:
    """Chooses the memories of each root run and renders their text (MEM-4).

    `provider` is the recall model; `redactor` scrubs the user's message before it is sent
    (the memories themselves passed the memory policy, which keeps secrets out).
    """

    def __init__(
        self,
        store: MemoryStore,
        provider: ModelProvider,
        settings: RecallSettings | None = None,
        *,
        redactor: SecretRedactor | None = None,
    ) -> None:
        self._store = store
        self._provider = provider
        self.settings = settings or RecallSettings()
        self._redactor = redactor
        self._index: LexicalIndex | None = None

    def lexical_index(self, entries: Sequence[MemoryEntry]) -> LexicalIndex:
        """The BM25 index of this catalogue (the last one is kept while it stays the same)."""
        index = self._index
        if index is None or index.key != catalogue_key(entries):
            index = self._index = LexicalIndex(entries)
        return index

    async def recall(self, message: str) -> Recalled | None:
        """The memories for a run of `message`; None when there are none at all (then nothing
        was asked of any model). Never raises for a failing model or memory folder: that is
        said in the result's `reason`."""
        settings = self.settings
        if self._store.surely_empty():  # no memories yet: no thread, no reading
            return None
        try:
            catalogue = await asyncio.to_thread(self._store.catalogue)
        except SoongAgentError as exc:
            return Recalled((), "none", f"the memory folder could not be read: {exc}")
        entries = catalogue.entries
        if not entries:
            return None
        if settings.top_k <= 0 or settings.context_tokens <= 0:
            what = "recall_top_k" if settings.top_k <= 0 else "memory_context_token_budget"
            return Recalled((), "none", f"memory.{what} is 0")
        known = {entry.name for entry in entries}
        names, method, reason = await self._choose(entries, known, message)
        memories, unread = await asyncio.to_thread(self._read, names)
        text, held = render_memories(memories, settings.context_tokens)
        if unread:
            reason += f"; could not read {', '.join(unread)}"
        if len(held) < len(memories):
            reason += f"; {len(memories) - len(held)} left out by the memory budget"
        return Recalled(tuple(held), method, reason, text)

    async def _choose(
        self, entries: Sequence[MemoryEntry], known: set[str], message: str
    ) -> tuple[list[str], RecallMethod, str]:
        settings = self.settings
        order: list[list[int]] = []

        def relevance() -> list[int]:  # BM25 runs at most once per recall
            if not order:
                order.append(self.lexical_index(entries).order(message))
            return order[0]

        catalogue, listed = render_catalogue(
            entries, settings.catalog_max_tokens, relevance=relevance
        )
        failure = ""
        if listed == 0:
            failure = "the catalogue does not fit memory.catalog_max_tokens"
        else:
            try:
                async with asyncio.timeout(settings.timeout_s):
                    answer = await self._ask(catalogue, message)
            except TimeoutError:
                failure = f"the recall model did not answer within {settings.timeout_s:g} s"
            except SoongAgentError as exc:
                failure = f"the recall model failed: {one_line(str(exc), 200)}"
            except Exception as exc:  # a provider's bug must not fail the user's run
                failure = (
                    f"the recall model failed: {type(exc).__name__}: {one_line(str(exc), 200)}"
                )
            else:
                chosen = parse_names(answer)
                if chosen is None:
                    failure = (
                        "the recall model's answer is not a JSON list of names: "
                        f"{one_line(answer, 80)!r}"
                    )
                else:
                    valid = [n for n in dict.fromkeys(chosen) if n in known]
                    dropped = len(set(chosen)) - len(valid)
                    if chosen and not valid:
                        failure = "the recall model named no memory that exists"
                    else:
                        picked = valid[: settings.top_k]
                        reason = f"the recall model chose {len(picked)} of {len(entries)} memories"
                        if dropped:
                            reason += f" ({dropped} unknown names dropped)"
                        return picked, "model", reason
        picked = [entries[i].name for i in relevance()[: settings.top_k]]
        return picked, "lexical", f"{failure}; BM25 picked {len(picked)} instead"

    async def _ask(self, catalogue: str, message: str) -> str:
        settings = self.settings
        shown = message if len(message) <= MESSAGE_CHARS else message[:MESSAGE_CHARS] + " […]"
        if self._redactor is not None:
            shown = self._redactor.redact(shown)
        request = ModelRequest(
            system=[
                SystemPart(
                    label="memory_recall",
                    text=RECALL_INSTRUCTION.format(top_k=settings.top_k),
                )
            ],
            messages=[user_text(f"{catalogue}\n\nThe user's request:\n{shown}")],
            tools=(),
            max_output_tokens=max(RECALL_OUTPUT_TOKENS, math.ceil(settings.top_k * 24)),
            temperature=settings.temperature,
        )
        return await answer_text(self._provider, request)

    def _read(self, names: Sequence[str]) -> tuple[list[Memory], list[str]]:
        """The chosen memories, in order, and the names that could not be read."""
        memories: list[Memory] = []
        unread: list[str] = []
        for name in names:
            try:
                memories.append(self._store.read(name))
            except SoongAgentError:
                unread.append(name)
        return memories, unread
