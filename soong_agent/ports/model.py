"""The model provider port: one streaming call over the neutral message model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from soong_agent.ports.messages import Message
from soong_agent.ports.streaming import StreamEvent


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told about a tool: its name, purpose and JSON schema of arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SystemPart:
    """One section of the system prompt; `stable` parts come first and may be cached."""

    label: str
    text: str
    stable: bool = True


ToolChoiceMode = Literal["auto", "none", "required", "tool"]


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """Whether the model may, must or must not call tools, or which one it must call.

    `mode` ``"tool"`` names the tool in `name`; the other modes have no name. Each provider
    sends it in its own wire shape (Ollama has none: see its adapter).
    """

    mode: ToolChoiceMode
    name: str | None = None

    @classmethod
    def parse(cls, text: str) -> ToolChoice:
        """``auto``, ``none``, ``required``, or any other text as the name of a tool."""
        value = text.strip()
        if not value:
            raise ValueError("tool_choice is empty; use auto, none, required or a tool name")
        if value in ("auto", "none", "required"):
            return cls(mode=value)  # type: ignore[arg-type]
        return cls(mode="tool", name=value)

    def __str__(self) -> str:
        return self.name if self.mode == "tool" and self.name else self.mode


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything a provider needs for one call."""

    system: Sequence[SystemPart]
    messages: Sequence[Message]
    tools: Sequence[ToolSpec] = ()
    max_output_tokens: int | None = None
    temperature: float | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    tool_choice: ToolChoice | None = None
    """None leaves the choice to the provider's default (the model decides)."""


@runtime_checkable
class ModelProvider(Protocol):
    """A model behind some wire format.

    Implementations convert the neutral request to their wire format and stream neutral events
    back; provider types never leave the adapter. Failures raise `ProviderError`.
    """

    @property
    def label(self) -> str:
        """A short description for messages, e.g. ``openai gpt-4o at http://…``."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Send `request` and yield its events; the last one is `StreamFinished`."""
        ...
