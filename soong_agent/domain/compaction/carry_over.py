"""The carry-over set: render and parse it, the files touched, the latest user request, and
the skills loaded (SKILL-1: a skill the model loaded stays in force after compaction)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from soong_agent.ports.messages import Message, TextBlock, ToolCallBlock, ToolResultBlock

FILE_TOOLS = frozenset({"read_file", "write_file", "edit_file"})
"""Tools whose `path` / `file_path` argument counts as a touched file."""

CARRY_OPEN = "<carry-over>"
CARRY_CLOSE = "</carry-over>"
_H_REQUEST = "## Latest user request"
_H_TODOS = "## Todo list / plan / task board"
_H_FILES = "## Files touched"
_H_SKILLS = "## Skills loaded (still in force)"
_SKILL_OPEN = "<skill>"
_SKILL_CLOSE = "</skill>"
LOAD_SKILL = "load_skill"
"""The tool whose results are skills to carry over (a call that names a `resource` is not)."""
_NONE = "(none)"
REQUEST_FOLLOWS = "(the latest user request follows this message, verbatim)"
"""Stands in the carry-over for a request that was kept as a message of its own."""

_PATH_KEYS = ("path", "file_path")


@dataclass(frozen=True, slots=True)
class CarryOver:
    """What must be in the context after every compaction."""

    instructions: str
    latest_user_request: str
    todos: str = ""
    files_touched: tuple[str, ...] = ()
    skills: tuple[str, ...] = ()
    """What `load_skill` returned for each skill loaded, in full."""


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
    skills: list[str] = []
    if carry.skills:
        skills = ["", _H_SKILLS]
        for text in carry.skills:
            skills += [_SKILL_OPEN, text, _SKILL_CLOSE]
    return "\n".join(
        [
            CARRY_OPEN,
            note,
            *skills,
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
    skills: tuple[str, ...] = ()
    skills_at = note.find(f"\n{_H_SKILLS}\n")
    if skills_at >= 0:
        block = note[skills_at + len(_H_SKILLS) + 2 :]
        note = note[:skills_at].strip()
        skills = tuple(
            part.split(f"\n{_SKILL_CLOSE}", 1)[0] for part in block.split(f"{_SKILL_OPEN}\n")[1:]
        )
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
        skills=skills,
    )


def call_path(call: ToolCallBlock) -> str | None:
    """The `path` (or `file_path`) argument of a call, when it has one."""
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
                path = call_path(call)
                if path is not None:
                    seen.setdefault(path)
    return list(seen)


def _skill_name(call: ToolCallBlock) -> str | None:
    """The skill a `load_skill` call loads whole (None for a resource read or bad args)."""
    try:
        args = json.loads(call.arguments)
    except (ValueError, RecursionError):
        return None
    if not isinstance(args, dict) or args.get("resource"):
        return None
    name = args.get("name")
    return name if isinstance(name, str) and name else None


def skills_loaded(messages: Sequence[Message]) -> list[str]:
    """What `load_skill` returned for each skill loaded in `messages` (and carried by an
    earlier summary), the latest load of a skill winning, in first-load order."""
    loaded: dict[str, str] = {}
    pending: dict[str, str] = {}
    for message in messages:
        if message.kind == "summary":
            carried = parse_carry_over(message.text)
            for text in carried.skills if carried is not None else ():
                loaded[text.split("\n", 1)[0]] = text
        for call in message.tool_calls:
            if call.name == LOAD_SKILL:
                name = _skill_name(call)
                if name is not None:
                    pending[call.id] = name
        for result in message.tool_results:
            name = pending.pop(result.call_id, None)
            if name is not None and not result.is_error:
                loaded[f"skill:{name}"] = result.content
    return list(loaded.values())


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
    skills = dict.fromkeys(carry.skills)
    for text in skills_loaded(messages):
        skills.setdefault(text)
    return replace(
        carry, latest_user_request=request, files_touched=tuple(files), skills=tuple(skills)
    )


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
