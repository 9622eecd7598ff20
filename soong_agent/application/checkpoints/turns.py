"""Which user message started each run of a session, and which stored messages are copies
(RWD-1). Pure functions over what the store holds.

A root run stores exactly one message the user wrote (role ``user``, kind ``normal``), first,
with its `RunStarted` event. A compaction, or the pruning of a loop, makes the active path anew:
the messages it keeps are stored again as copies under new ids, on a new root. `originals`
tells each copy of a user message from the message it copies, so that a rewind to a copy means
the turn of the original.
"""

from __future__ import annotations

from collections.abc import Sequence

from soong_agent.ports.messages import Message


def is_turn_message(message: Message) -> bool:
    """Whether the user wrote `message` (not a summary, reminder, mail or continuation)."""
    return message.role == "user" and message.kind == "normal"


def _same(a: Message, b: Message) -> bool:
    """Whether `a` copies `b`: the same role and kind, and the same content unless it is a tool
    result (a compaction may have cut those to a stub)."""
    if a.role != b.role or a.kind != b.kind:
        return False
    return a.role == "tool" or a.content == b.content


def _path_to(by_id: dict[str, Message], leaf: str) -> list[Message]:
    path: list[Message] = []
    seen: set[str] = set()
    current = by_id.get(leaf)
    while current is not None and current.id not in seen:
        seen.add(current.id)
        path.append(current)
        current = by_id.get(current.parent_id) if current.parent_id is not None else None
    path.reverse()
    return path


def _path_from(messages: Sequence[Message], start: int) -> list[Message]:
    """The path written from the root at `start` on (each step its first-written child)."""
    path = [messages[start]]
    for message in messages[start + 1 :]:
        if message.parent_id == path[-1].id:
            path.append(message)
    return path


def _aligned(old: list[Message], new: list[Message]) -> list[tuple[Message, Message]]:
    """(copy, original) pairs of user messages: the new path's first messages as copies of the
    old path's last ones (a compaction keeps the newest; its summary aside) or of its first ones
    (a pruned loop keeps the oldest), whichever run of copies is longer."""
    if new and new[0].kind == "summary":
        new = new[1:]
    most = min(len(old), len(new))
    suffix = next((k for k in range(most, 0, -1) if all(map(_same, new[:k], old[-k:]))), 0)
    prefix = next((k for k in range(most, 0, -1) if all(map(_same, new[:k], old[:k]))), 0)
    if prefix > suffix:
        pairs = zip(new[:prefix], old[:prefix], strict=True)
    else:
        pairs = zip(new[:suffix], old[len(old) - suffix :], strict=True)
    return [(copy, original) for copy, original in pairs if is_turn_message(copy)]


def originals(messages: Sequence[Message]) -> dict[str, str]:
    """The copies among `messages` (every message of a session, in the order written): the id
    of each copied user message to the id of the message it copies (a copy of a copy to the
    first one)."""
    by_id = {m.id: m for m in messages}
    out: dict[str, str] = {}
    for index, root in enumerate(messages):
        if index == 0 or root.parent_id is not None:
            continue
        old = _path_to(by_id, messages[index - 1].id)
        for copy, original in _aligned(old, _path_from(messages, index)):
            out[copy.id] = out.get(original.id, original.id)
    return out


def turn_messages(
    started: Sequence[str | None], messages: Sequence[Message], copies: dict[str, str]
) -> list[str | None]:
    """The user message each run started with, by run: `started` is each run's message text
    (None: the run has no `RunStarted`, e.g. a rewind's record). Matched in order against the
    messages the user wrote (copies aside); None where no message matches."""
    written = [m for m in messages if is_turn_message(m) and m.id not in copies]
    out: list[str | None] = []
    cursor = 0
    for text in started:
        found = None
        if text is not None:
            for index in range(cursor, len(written)):
                if written[index].text == text:
                    found, cursor = written[index].id, index + 1
                    break
        out.append(found)
    return out
