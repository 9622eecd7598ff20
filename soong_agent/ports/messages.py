"""Provider-neutral conversation messages made of typed content blocks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Block(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


ImageType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
"""The image formats every provider takes (PNG, JPEG, GIF, WebP)."""


class ImageBlock(_Block):
    """An image shown to the model: in a user message, or attached to a tool result.

    `data` is the image file's bytes (stored inline in the session, base64 in its JSON: the
    size is capped where an image enters a run, `tools.max_image_bytes`); `source` says
    where it came from (a path), for people and for the text a model that cannot see is given.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64"
    )

    type: Literal["image"] = "image"
    media_type: ImageType
    data: bytes = Field(repr=False)
    source: str = ""


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
    images: tuple[ImageBlock, ...] = Field(default=(), exclude_if=lambda images: not images)
    """Images the tool returned beside its text (read_file on an image); each provider sends
    them where its API takes them. Left out of the JSON when there are none."""


ContentBlock = Annotated[
    TextBlock | ThinkingBlock | ToolCallBlock | ToolResultBlock | ImageBlock,
    Field(discriminator="type"),
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

    @property
    def images(self) -> list[ImageBlock]:
        """The images of this message: its own and those of its tool results."""
        out: list[ImageBlock] = []
        for block in self.content:
            if isinstance(block, ImageBlock):
                out.append(block)
            elif isinstance(block, ToolResultBlock) and block.images:
                out.extend(block.images)
        return out


MESSAGE_LIST = TypeAdapter(list[Message])

_BLOCK_TYPES = (TextBlock, ThinkingBlock, ToolCallBlock, ToolResultBlock, ImageBlock)


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


class PromptWithImages(str):
    """A user's message with images attached (SDK `run(images=…)`): a `str` to everything that
    passes a run's message on (events, hooks, titles), and `user_text` puts its images in the
    user message, before the text (where models read them best)."""

    images: tuple[ImageBlock, ...]

    def __new__(cls, text: str, images: Sequence[ImageBlock]) -> PromptWithImages:
        made = super().__new__(cls, text)
        made.images = tuple(images)
        return made


def user_text(text: str, *, id: str = "", parent_id: str | None = None) -> Message:
    """A user message holding one text block (after the images of a `PromptWithImages`)."""
    if isinstance(text, PromptWithImages):
        content: list[ContentBlock] = [*text.images, TextBlock(text=str(text))]
        return Message(id=id, parent_id=parent_id, role="user", content=content)
    return Message(id=id, parent_id=parent_id, role="user", content=[TextBlock(text=text)])
