"""Summaries: what to summarise, applying a summary, and the hard reset that ends the ladder."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from soong_agent.domain.compaction.carry_over import (
    REQUEST_FOLLOWS,
    CarryOver,
    complete_carry_over,
    render_carry_over,
)
from soong_agent.domain.compaction.structure import (
    _check_tokens,
    _copy,
    _latest_user_index,
    _ref,
    approx_tokens,
    atomic_groups,
    recent_window_start,
)
from soong_agent.ports.messages import Message, TextBlock


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
