"""Compaction of the active path (CTX-6), as pure functions over messages and token counts.

The application drives a ladder of rungs, each at most once, in the order of `LADDER`:

1. `micro` — old tool results (older than the recent window) become short stubs that keep the
   tool name, the arguments and the artifact id (`micro_compact`).
2. `summary` — the messages older than the recent window are summarised by the compact model
   (`select_for_summary`, `summary_problem`, `apply_summary`).
3. `micro_aggressive` — every old tool result is stubbed and the recent window is halved.
4. `slice_summary` — only the oldest slice of bounded size is summarised.
5. `hard_reset` — everything but the latest user request is replaced by one message carrying
   the carry-over set.

Invariants every function here keeps: a tool call and its result are never separated (the
units are `atomic_groups`), the original messages are never mutated (copies are returned), and
each summarising rung's output carries the `CarryOver` (latest user request, todo list / plan /
task board, files touched; the instruction chain stays in the system prompt).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from soong_agent.ports.messages import (
    ContentBlock,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)

Rung = Literal["micro", "summary", "micro_aggressive", "slice_summary", "hard_reset"]
"""One step of the compaction ladder; also the `strategy` of a `CompactionReport`."""

LADDER: tuple[Rung, ...] = ("micro", "summary", "micro_aggressive", "slice_summary", "hard_reset")
"""The rungs in the order they are tried."""

Outcome = Literal["ok", "failed", "still_over"]
"""How a rung ended: done (under budget), failed (error, empty or too long), or not enough."""

FILE_TOOLS = frozenset({"read_file", "write_file", "edit_file"})
"""Tools whose `path` / `file_path` argument counts as a touched file."""

STUB_PREFIX = "[elided: "
"""How a micro-compacted tool result starts; such results are never stubbed again."""

CARRY_OPEN = "<carry-over>"
CARRY_CLOSE = "</carry-over>"
_H_REQUEST = "## Latest user request"
_H_TODOS = "## Todo list / plan / task board"
_H_FILES = "## Files touched"
_NONE = "(none)"
REQUEST_FOLLOWS = "(the latest user request follows this message, verbatim)"
"""Stands in the carry-over for a request that was kept as a message of its own."""

_PATH_KEYS = ("path", "file_path")
_ARTIFACT_RE = re.compile(r"\bart_[0-9a-f]{8,64}\b")
_ARGS_LIMIT = 160


def approx_tokens(text: str) -> int:
    """A rough token count (four characters a token), used when no counter is given."""
    return (len(text) + 3) // 4


# --------------------------------------------------------------------------- carry-over


@dataclass(frozen=True, slots=True)
class CarryOver:
    """What must be in the context after every compaction."""

    instructions: str
    latest_user_request: str
    todos: str = ""
    files_touched: tuple[str, ...] = ()


def render_carry_over(carry: CarryOver) -> str:
    """The carry-over block put at the end of a summary message.

    The instruction chain itself stays in the system prompt, so it gets a one-line note; the
    other parts are rendered in full (`(none)` when empty).
    """
    if carry.instructions.strip():
        note = "The instruction chain in the system prompt (user and project instructions) "
        note += "remains in force."
    else:
        note = "No instruction chain is configured; the system prompt remains in force."
    files = "\n".join(f"- {p}" for p in carry.files_touched) or _NONE
    return "\n".join(
        [
            CARRY_OPEN,
            note,
            "",
            _H_REQUEST,
            carry.latest_user_request or _NONE,
            "",
            _H_TODOS,
            carry.todos.strip() or _NONE,
            "",
            _H_FILES,
            files,
            CARRY_CLOSE,
        ]
    )


def parse_carry_over(text: str) -> CarryOver | None:
    """The carry-over rendered into `text` by `render_carry_over`, or None (best effort).

    Used so that a later compaction keeps what an earlier summary carried: the latest user
    request after a hard reset, the files touched before an earlier summary.
    """
    close = text.rfind(CARRY_CLOSE)
    if close < 0:
        return None
    files_at = text.rfind(f"\n{_H_FILES}\n", 0, close)
    todos_at = text.rfind(f"\n{_H_TODOS}\n", 0, files_at) if files_at >= 0 else -1
    open_at = text.rfind(f"{CARRY_OPEN}\n", 0, todos_at) if todos_at >= 0 else -1
    request_at = text.find(f"\n{_H_REQUEST}\n", open_at) if open_at >= 0 else -1
    if request_at < 0 or request_at > todos_at:
        return None
    note = text[open_at + len(CARRY_OPEN) + 1 : request_at].strip()
    request = text[request_at + len(_H_REQUEST) + 2 : todos_at]
    request = request.removesuffix("\n")
    todos = text[todos_at + len(_H_TODOS) + 2 : files_at].strip()
    files_block = text[files_at + len(_H_FILES) + 2 : close]
    files = tuple(
        line[2:] for line in files_block.splitlines() if line.startswith("- ") and line[2:]
    )
    return CarryOver(
        instructions="" if note.startswith("No instruction chain") else note,
        latest_user_request="" if request in (_NONE, REQUEST_FOLLOWS) else request,
        todos="" if todos == _NONE else todos,
        files_touched=files,
    )


def _call_path(call: ToolCallBlock) -> str | None:
    try:
        args = json.loads(call.arguments)
    except (ValueError, RecursionError):
        return None
    if not isinstance(args, dict):
        return None
    for key in _PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def files_touched(messages: Sequence[Message]) -> list[str]:
    """Paths of read_file / write_file / edit_file calls, first-touched first, without repeats.

    Files listed in the carry-over of an earlier summary message count, at that message's place.
    """
    seen: dict[str, None] = {}
    for message in messages:
        if message.kind == "summary":
            carried = parse_carry_over(message.text)
            if carried is not None:
                for carried_path in carried.files_touched:
                    seen.setdefault(carried_path)
        for call in message.tool_calls:
            if call.name in FILE_TOOLS:
                path = _call_path(call)
                if path is not None:
                    seen.setdefault(path)
    return list(seen)


def latest_user_request(messages: Sequence[Message]) -> str:
    """The text of the last user message of kind "normal".

    When a summary message comes later than any such message (after a hard reset), the request
    it carries over is returned; "" when there is none.
    """
    for message in reversed(messages):
        if message.role == "user" and message.kind == "normal":
            return message.text
        if message.kind == "summary":
            carried = parse_carry_over(message.text)
            if carried is not None and carried.latest_user_request:
                return carried.latest_user_request
    return ""


def complete_carry_over(carry: CarryOver, messages: Sequence[Message]) -> CarryOver:
    """`carry` with the files touched in `messages` added and an empty request filled in."""
    files = dict.fromkeys(carry.files_touched)
    for path in files_touched(messages):
        files.setdefault(path)
    request = carry.latest_user_request or latest_user_request(messages)
    return replace(carry, latest_user_request=request, files_touched=tuple(files))


def _context_text(messages: Sequence[Message]) -> str:
    parts: list[str] = []
    for message in messages:
        for block in message.content:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ToolCallBlock):
                parts.append(block.arguments)
            elif isinstance(block, ToolResultBlock):
                parts.append(block.content)
    return "\n".join(parts)


def carry_over_missing(messages: Sequence[Message], carry: CarryOver) -> list[str]:
    """The parts of `carry` not found verbatim in `messages` (empty parts are never missing)."""
    text = _context_text(messages)
    missing: list[str] = []
    if carry.latest_user_request and carry.latest_user_request not in text:
        missing.append("latest user request")
    if carry.todos.strip() and carry.todos.strip() not in text:
        missing.append("todos")
    missing.extend(f"file {p}" for p in carry.files_touched if p not in text)
    return missing


# --------------------------------------------------------------------------- structure


def atomic_groups(messages: Sequence[Message]) -> list[range]:
    """A partition of the indices into units compaction never cuts through.

    An assistant message with tool calls forms one unit with the tool messages that follow it
    (and with any later message answering one of its calls); every other message is a unit.
    """
    count = len(messages)
    reach = [i + 1 for i in range(count)]
    result_at: dict[str, int] = {}
    for index, message in enumerate(messages):
        for result in message.tool_results:
            result_at[result.call_id] = index
    for index, message in enumerate(messages):
        calls = message.tool_calls if message.role == "assistant" else []
        if not calls:
            continue
        end = index + 1
        while end < count and messages[end].role == "tool":
            end += 1
        for call in calls:
            answered = result_at.get(call.id)
            if answered is not None and answered > index:
                end = max(end, answered + 1)
        reach[index] = end
    groups: list[range] = []
    start = 0
    while start < count:
        end = reach[start]
        cursor = start
        while cursor < end:
            end = max(end, reach[cursor])
            cursor += 1
        groups.append(range(start, end))
        start = end
    return groups


def validate_sequence(messages: Sequence[Message]) -> list[str]:
    """What makes `messages` an invalid request; empty when it is valid.

    Checked: there is a message and the first one is a user message; every tool result answers a
    call of the assistant message just before it, once; every call is answered before any other
    message (or the end).
    """
    if not messages:
        return ["the sequence is empty"]
    problems: list[str] = []
    first = messages[0]
    if first.role != "user":
        problems.append(f"the first message {_ref(first, 0)} is {first.role}, not user")
    pending: dict[str, str] = {}
    answered: set[str] = set()
    owner = ""
    for index, message in enumerate(messages):
        ref = _ref(message, index)
        if message.role == "tool":
            if not message.tool_results:
                problems.append(f"tool message {ref} carries no result")
            for result in message.tool_results:
                if result.call_id in pending:
                    del pending[result.call_id]
                    answered.add(result.call_id)
                elif result.call_id in answered:
                    problems.append(f"tool result {result.call_id} in {ref} answers a call twice")
                else:
                    problems.append(f"tool result {result.call_id} in {ref} has no preceding call")
            continue
        if pending:
            problems.append(f"calls {sorted(pending)} of {owner} have no result before {ref}")
            pending = {}
        if message.role == "assistant":
            pending = {c.id: c.name for c in message.tool_calls}
            answered = set()
            owner = ref
    if pending:
        problems.append(f"calls {sorted(pending)} of {owner} have no result at the end")
    return problems


def _ref(message: Message, index: int) -> str:
    return message.id or f"#{index}"


def id_ranges(messages: Sequence[Message], indices: Iterable[int]) -> list[str]:
    """Runs of consecutive indices as "first_id..last_id" labels (for a compaction event)."""
    ordered = sorted(set(indices))
    labels: list[str] = []
    run_start: int | None = None
    previous = -2
    for index in [*ordered, -1]:
        if run_start is not None and index != previous + 1:
            first, last = messages[run_start], messages[previous]
            labels.append(f"{_ref(first, run_start)}..{_ref(last, previous)}")
            run_start = None
        if index >= 0 and run_start is None:
            run_start = index
        previous = index
    return labels


def _check_tokens(messages: Sequence[Message], tokens: Sequence[int]) -> None:
    if len(messages) != len(tokens):
        raise ValueError(f"{len(messages)} messages but {len(tokens)} token counts")


def recent_window_start(tokens: Sequence[int], keep_recent_tokens: int) -> int:
    """The index where the recent window starts.

    The window is the shortest run of newest messages holding at least `keep_recent_tokens`
    (the message that crosses the mark is inside); everything when they hold less; nothing when
    `keep_recent_tokens` is 0.
    """
    if keep_recent_tokens <= 0:
        return len(tokens)
    total = 0
    for index in range(len(tokens) - 1, -1, -1):
        total += tokens[index]
        if total >= keep_recent_tokens:
            return index
    return 0


def _latest_user_index(messages: Sequence[Message]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "user" and message.kind == "normal":
            return index
    return None


def has_earlier_context(messages: Sequence[Message]) -> bool:
    """Whether there is anything besides the latest user request that compaction could shrink.

    A path of only that request (a fresh session) is never compacted: it is the request.
    """
    return len(messages) > 1 or _latest_user_index(messages) is None


def _copy(message: Message, **update: object) -> Message:
    changes: dict[str, object] = {"content": list(message.content)}
    changes.update(update)
    return message.model_copy(update=changes)


# --------------------------------------------------------------------------- micro-compaction


@dataclass(frozen=True, slots=True)
class MicroPlan:
    """The outcome of micro-compaction: the new messages and their estimated token counts."""

    messages: list[Message]
    tokens: list[int]
    tokens_saved: int
    changed_ids: list[str]
    changed_indices: list[int] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether any tool result was stubbed."""
        return bool(self.changed_indices)


def _short_arguments(call: ToolCallBlock | None) -> str:
    if call is None:
        return "(call not in context)"
    raw = call.arguments
    try:
        text = json.dumps(json.loads(raw), ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):
        text = " ".join(raw.split())
    if len(text) > _ARGS_LIMIT:
        text = text[: _ARGS_LIMIT - 1] + "…"
    return text


def stub_text(result: ToolResultBlock, tokens: int, call: ToolCallBlock | None) -> str:
    """The stub standing for an elided tool result."""
    head = f"{STUB_PREFIX}{result.name} result of {tokens} tokens; "
    head += f"arguments {_short_arguments(call)}"
    artifact = _ARTIFACT_RE.search(result.content)
    if artifact is not None:
        return f"{head}; artifact {artifact.group(0)} — read_artifact to see it]"
    return f"{head}; not stored — run the tool again if it is needed]"


def _result_share(message_tokens: int, block: ToolResultBlock, results: int, chars: int) -> int:
    if results == 1:
        return message_tokens
    if chars == 0:
        return message_tokens // results
    return message_tokens * len(block.content) // chars


def micro_compact(
    messages: Sequence[Message],
    tokens: Sequence[int],
    *,
    keep_recent_tokens: int,
    stub_threshold_tokens: int = 200,
    aggressive: bool = False,
    estimate: Callable[[str], int] = approx_tokens,
) -> MicroPlan:
    """Stub the tool results older than the recent window whose size is over the threshold.

    `tokens` holds one estimate per message. A result's size is its message's estimate (shared
    by content length when a message carries several results). A result is stubbed only when
    the stub is smaller; results already stubbed are left alone. `aggressive` uses threshold 0
    and half the recent window. Message ids, parents and kinds are kept; copies are returned.
    """
    _check_tokens(messages, tokens)
    keep = keep_recent_tokens // 2 if aggressive else keep_recent_tokens
    threshold = 0 if aggressive else stub_threshold_tokens
    cutoff = recent_window_start(tokens, keep)
    calls: dict[str, ToolCallBlock] = {}
    out: list[Message] = []
    new_tokens: list[int] = []
    changed_ids: list[str] = []
    changed_indices: list[int] = []
    saved = 0
    for index, message in enumerate(messages):
        for call in message.tool_calls:
            calls[call.id] = call
        results = message.tool_results
        if index >= cutoff or message.role != "tool" or not results:
            out.append(_copy(message))
            new_tokens.append(tokens[index])
            continue
        chars = sum(len(r.content) for r in results)
        content: list[ContentBlock] = []
        message_saved = 0
        for block in message.content:
            if not isinstance(block, ToolResultBlock) or block.content.startswith(STUB_PREFIX):
                content.append(block)
                continue
            size = _result_share(tokens[index], block, len(results), chars)
            stub = stub_text(block, size, calls.get(block.call_id))
            stub_size = estimate(stub)
            if size <= threshold or stub_size >= size:
                content.append(block)
                continue
            content.append(
                ToolResultBlock(
                    call_id=block.call_id, name=block.name, content=stub, is_error=block.is_error
                )
            )
            message_saved += size - stub_size
        if message_saved > 0:
            changed_ids.append(message.id)
            changed_indices.append(index)
        out.append(_copy(message, content=content))
        new_tokens.append(tokens[index] - message_saved)
        saved += message_saved
    return MicroPlan(
        messages=out,
        tokens=new_tokens,
        tokens_saved=saved,
        changed_ids=changed_ids,
        changed_indices=changed_indices,
    )


# --------------------------------------------------------------------------- summaries


@dataclass(frozen=True, slots=True)
class SummarySelection:
    """The messages `start … end-1` of the active path, to be replaced by a summary."""

    start: int
    end: int
    tokens: int
    first_id: str
    last_id: str

    @property
    def indices(self) -> range:
        """The selected indices."""
        return range(self.start, self.end)

    @property
    def label(self) -> str:
        """The selection as "first_id..last_id", for the compaction event."""
        return f"{self.first_id}..{self.last_id}"


def select_for_summary(
    messages: Sequence[Message],
    tokens: Sequence[int],
    *,
    keep_recent_tokens: int,
    max_slice_tokens: int | None = None,
    protect_latest_user: bool = True,
) -> SummarySelection | None:
    """The prefix to summarise: everything older than the recent window, in whole groups.

    The prefix ends at an `atomic_groups` boundary at or before the window start, and (with
    `protect_latest_user`) before the latest normal user message, which stays verbatim.
    With `max_slice_tokens`, only the oldest whole groups up to that many tokens are taken (at
    least one group, so the rung always makes progress). None when there is nothing worth
    summarising: an empty prefix, one holding no tokens, or only an earlier summary.
    """
    _check_tokens(messages, tokens)
    if not messages:
        return None
    limit = recent_window_start(tokens, keep_recent_tokens)
    if protect_latest_user:
        latest = _latest_user_index(messages)
        if latest is not None:
            limit = min(limit, latest)
    groups = atomic_groups(messages)
    end = 0
    for group in groups:
        if group.stop > limit:
            break
        end = group.stop
    if max_slice_tokens is not None:
        taken = 0
        slice_end = 0
        for group in groups:
            if group.stop > end:
                break
            size = sum(tokens[group.start : group.stop])
            if slice_end > 0 and taken + size > max_slice_tokens:
                break
            taken += size
            slice_end = group.stop
        end = slice_end
    if end <= 0:
        return None
    selected = sum(tokens[:end])
    if selected <= 0 or (end == 1 and messages[0].kind == "summary"):
        return None
    return SummarySelection(
        start=0,
        end=end,
        tokens=selected,
        first_id=_ref(messages[0], 0),
        last_id=_ref(messages[end - 1], end - 1),
    )


def summary_problem(
    text: str | None, *, max_summary_tokens: int, tokens: int | None = None
) -> str | None:
    """Why a summary from the compact model cannot be used, or None when it can.

    `tokens` is its counted size (estimated when not given).
    """
    if text is None or not text.strip():
        return "the summary is empty"
    size = tokens if tokens is not None else approx_tokens(text)
    if size > max_summary_tokens:
        return f"the summary is {size} tokens, over max_summary_tokens ({max_summary_tokens})"
    return None


def _aligned_end(messages: Sequence[Message], start: int, end: int) -> int:
    """`end` moved to a group boundary (back if possible) and past any orphan tool message."""
    count = len(messages)
    groups = atomic_groups(messages)
    boundaries = {g.start for g in groups} | {count}
    aligned = min(end, count)
    while aligned > start and aligned not in boundaries:
        aligned -= 1
    if aligned <= start:
        aligned = min(end, count)
        while aligned < count and aligned not in boundaries:
            aligned += 1
    while aligned < count and messages[aligned].role == "tool":
        aligned += 1
        while aligned < count and aligned not in boundaries:
            aligned += 1
    return aligned


def _summary_message(
    text: str, *, summary_id: str, parent_id: str | None, carry: CarryOver
) -> Message:
    body = f"{text}\n\n{render_carry_over(carry)}"
    return Message(
        id=summary_id,
        parent_id=parent_id,
        role="user",
        kind="summary",
        content=[TextBlock(text=body)],
    )


def apply_summary(
    messages: Sequence[Message],
    selection: SummarySelection,
    summary_text: str,
    carry: CarryOver,
    *,
    summary_id: str,
) -> list[Message]:
    """The new active path: a summary message standing for the selection, then the rest.

    The summary is a user message of kind "summary" holding `summary_text` and the carry-over
    (completed with the files touched and latest request found in `messages`); its parent is
    the first dropped message's parent, and the first kept message's parent becomes
    `summary_id`. The selection's end is moved to a group boundary, and past a tool message
    that would be orphaned, so a call is never cut from its result. Copies are returned.
    """
    count = len(messages)
    if not 0 <= selection.start < count:
        raise ValueError(f"selection starts at {selection.start}, outside {count} messages")
    groups = atomic_groups(messages)
    start = max(g.start for g in groups if g.start <= selection.start)
    end = _aligned_end(messages, start, selection.end)
    carry = complete_carry_over(carry, messages)
    label = f"{_ref(messages[start], start)}..{_ref(messages[end - 1], end - 1)}"
    header = (
        f"[Summary of the earlier conversation: {end - start} messages ({label}) were compacted "
        "into this summary.]"
    )
    summary = _summary_message(
        f"{header}\n\n{summary_text.strip()}",
        summary_id=summary_id,
        parent_id=messages[start].parent_id,
        carry=carry,
    )
    out = [_copy(m) for m in messages[:start]]
    out.append(summary)
    for offset, message in enumerate(messages[end:]):
        out.append(_copy(message, parent_id=summary_id) if offset == 0 else _copy(message))
    return out


def hard_reset(messages: Sequence[Message], carry: CarryOver, *, summary_id: str) -> list[Message]:
    """The last rung: a summary message saying earlier context was dropped, with the carry-over,
    followed by the latest user request itself.

    The latest normal user message is never dropped: it is not earlier context but what the
    model is working on, so it stays a verbatim user message after the note (the carry-over
    points at it instead of repeating it). Without one, the carry-over holds the request an
    earlier summary carried. The loop continues from a valid path ending in a user message.
    """
    carry = complete_carry_over(carry, messages)
    latest = _latest_user_index(messages)
    if messages:
        label = f"{_ref(messages[0], 0)}..{_ref(messages[-1], len(messages) - 1)}"
        what = f"{len(messages)} messages ({label})"
    else:
        what = "no messages"
    kept = " except the latest user request" if latest is not None else ""
    note = (
        f"[The earlier context — {what}{kept} — was dropped to fit the context window because "
        "it could not be summarised. Continue the work from the carry-over below; re-read files "
        "as needed.]"
    )
    parent = messages[0].parent_id if messages else None
    if latest is None:
        return [_summary_message(note, summary_id=summary_id, parent_id=parent, carry=carry)]
    carry = replace(carry, latest_user_request=REQUEST_FOLLOWS)
    summary = _summary_message(note, summary_id=summary_id, parent_id=parent, carry=carry)
    return [summary, _copy(messages[latest], parent_id=summary_id)]


# --------------------------------------------------------------------------- the ladder


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What one compaction did, for the compaction event."""

    strategy: Rung
    tokens_before: int
    tokens_after: int
    dropped: list[str] = field(default_factory=list)
    rungs_failed: list[str] = field(default_factory=list)

    @property
    def tokens_saved(self) -> int:
        """How many tokens the compaction removed."""
        return self.tokens_before - self.tokens_after


def next_rung(current: Rung, outcome: Outcome) -> Rung | None:
    """The rung after `current` ended with `outcome`; None when compaction is over.

    "ok" ends the ladder; "failed" and "still_over" go one rung down. `hard_reset` is final.
    The ladder only moves forward, so no rung runs twice and there are at most len(LADDER)
    steps.
    """
    if outcome == "ok":
        return None
    position = LADDER.index(current)
    if position + 1 >= len(LADDER):
        return None
    return LADDER[position + 1]


class CompactionLadder:
    """A tiny state machine over `next_rung` that remembers what ran and what failed."""

    def __init__(self, start: Rung = "micro") -> None:
        self._current: Rung | None = start
        self._ran: list[Rung] = []
        self._failed: list[Rung] = []

    @property
    def current(self) -> Rung | None:
        """The rung to run now; None once the ladder is over."""
        return self._current

    @property
    def ran(self) -> list[Rung]:
        """The rungs run so far, in order."""
        return list(self._ran)

    @property
    def failed(self) -> list[str]:
        """The rungs that failed (error, empty or too long), in order."""
        return list(self._failed)

    @property
    def done(self) -> bool:
        """Whether the ladder is over."""
        return self._current is None

    def record(self, outcome: Outcome) -> Rung | None:
        """Record how the current rung ended; returns the next rung (None when over)."""
        current = self._current
        if current is None:
            return None
        self._ran.append(current)
        if outcome == "failed":
            self._failed.append(current)
        self._current = next_rung(current, outcome)
        return self._current
