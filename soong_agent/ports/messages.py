"""Provider-neutral conversation messages made of typed content blocks."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Block(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextBlock(_Block):
    """Plain text written by the user or the model."""

    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(_Block):
    """Model reasoning; `signature` is sent back unchanged where a provider requires it.

    `redacted` holds the opaque data of a reasoning block the provider encrypted (its text is
    then empty); it too is sent back unchanged.
    """

    type: Literal["thinking"] = "thinking"
    text: str
    signature: str | None = None
    redacted: str | None = None


class ToolCallBlock(_Block):
    """A tool call made by the model; `arguments` is the raw JSON text the model produced."""

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: str


class ToolResultBlock(_Block):
    """The one result of one tool call, sent back to the model."""

    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str
    is_error: bool = False


ContentBlock = Annotated[
    TextBlock | ThinkingBlock | ToolCallBlock | ToolResultBlock, Field(discriminator="type")
]

Role = Literal["user", "assistant", "tool"]
MessageKind = Literal["normal", "continuation", "summary", "synthetic", "reminder", "mail"]
"""`normal`: the user's words or the model's; `continuation`: the runtime asks the model to go on
after an output cut; `summary`: a compaction summary; `synthetic`: results the runtime made up for
calls that never ran; `reminder`: the runtime steering the model (a loop noticed); `mail`: mails
of teammates, delivered at the start of a turn, each labelled by its sender."""


class Message(BaseModel):
    """One message of a session's tree; `parent_id` links it to the message before it."""

    model_config = ConfigDict(extra="forbid")

    id: str = ""
    parent_id: str | None = None
    role: Role
    content: list[ContentBlock]
    kind: MessageKind = "normal"

    @property
    def text(self) -> str:
        """The concatenated text blocks of this message."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_calls(self) -> list[ToolCallBlock]:
        """The tool calls this message makes (assistant messages only)."""
        return [b for b in self.content if isinstance(b, ToolCallBlock)]

    @property
    def tool_results(self) -> list[ToolResultBlock]:
        """The tool results this message carries (tool messages only)."""
        return [b for b in self.content if isinstance(b, ToolResultBlock)]


MESSAGE_LIST = TypeAdapter(list[Message])

_BLOCK_TYPES = (TextBlock, ThinkingBlock, ToolCallBlock, ToolResultBlock)


def assembled(role: Role, content: list[ContentBlock]) -> Message:
    """``Message(role=role, content=content)`` for blocks that are already validated blocks
    (what the runtime assembles from a model's answer and its tools' results, two messages a
    turn), made without validating them again: `content` becomes the message's own list.
    TypeError when an item is not a block (as validation would refuse it)."""
    for block in content:
        if type(block) not in _BLOCK_TYPES:
            raise TypeError(f"not a content block: {type(block).__name__}")
    message = _new(Message)
    _set(
        message,
        "__dict__",
        {"id": "", "parent_id": None, "role": role, "content": content, "kind": "normal"},
    )
    _set(message, "__pydantic_fields_set__", {"role", "content"})  # (its own: not frozen)
    _set(message, "__pydantic_extra__", None)
    _set(message, "__pydantic_private__", None)
    return message


_new = object.__new__
_set = object.__setattr__


def user_text(text: str, *, id: str = "", parent_id: str | None = None) -> Message:
    """A user message holding one text block."""
    return Message(id=id, parent_id=parent_id, role="user", content=[TextBlock(text=text)])
