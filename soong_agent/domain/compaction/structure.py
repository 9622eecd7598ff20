"""The shape of an active path: atomic groups, validity, id ranges and the recent window."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from soong_agent.ports.messages import Message


def approx_tokens(text: str) -> int:
    """A rough token count (four characters a token), used when no counter is given."""
    return (len(text) + 3) // 4


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
