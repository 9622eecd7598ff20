"""What crosses from the declarative-tool loader (an adapter) to the tool builders (application)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from soong_agent.ports.approval import PermissionClass

ParameterType = Literal["string", "integer", "number", "boolean", "array"]
ItemType = Literal["string", "integer", "number", "boolean"]


@dataclass(frozen=True, slots=True)
class DeclarativeParameter:
    """One argument of a declarative tool, as its JSON schema declares it.

    Attributes:
        name: the property name; `{name}` in the command template is replaced by its value.
        type: the JSON type of the value.
        required: whether the model must give it.
        description: what the model is told about it.
        default: the value used when an optional argument is absent (see `has_default`).
        has_default: whether the schema gives a `default` (it may be JSON null).
        enum: the only values allowed, when the schema lists them.
        items: the JSON type of the items of an array (None: any scalar).
        constraints: the supported bounds, by JSON Schema keyword (`minLength`, `maximum` …).
    """

    name: str
    type: ParameterType
    required: bool
    description: str | None = None
    default: Any = None
    has_default: bool = False
    enum: tuple[Any, ...] | None = None
    items: ItemType | None = None
    constraints: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class DeclarativeToolSpec:
    """A checked tool definition from `${SOONG_AGENT_HOME}/tools/<file>.json` (TOOL-3).

    Attributes:
        name: the tool's name as the model sees it.
        description: what the model is told the tool does.
        parameters: the arguments, in the order the schema lists them.
        schema: the arguments' JSON schema as shown to the model (an object schema that allows
            no other properties).
        command: the argv template; an item that is exactly `{name}` is replaced by that
            argument's value as one whole argv item (never through a shell).
        permission_class: what kind of effect a call has (default `exec`).
        timeout_ms: the tool's own timeout, if it sets one.
        source: the file it was read from, for messages.
    """

    name: str
    description: str
    parameters: tuple[DeclarativeParameter, ...]
    schema: dict[str, Any]
    command: tuple[str, ...]
    permission_class: PermissionClass = "exec"
    timeout_ms: int | None = None
    source: str = field(default="", compare=False)

    def placeholder(self, item: str) -> str | None:
        """The parameter name when `item` is a whole-item placeholder `{name}`, else None."""
        if len(item) > 2 and item.startswith("{") and item.endswith("}"):
            name = item[1:-1]
            if any(p.name == name for p in self.parameters):
                return name
        return None
