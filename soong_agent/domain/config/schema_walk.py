"""What the config schema expects at a key path (CFG-2): the walk from `SoongConfig` along an
error's location, and the words for an expected type ("an integer ≥ 1", "a table")."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

from soong_agent.domain.config.schema import ModelOverride, SoongConfig

KeyPart = str | int
"""One part of a key path: a table key or a list index."""


# --- walking the schema along an error location ----------------------------------------------


@dataclass(frozen=True)
class Where:
    """What the schema says about one error location."""

    display: tuple[KeyPart, ...]  # the key path as the user wrote it (union tags removed)
    annotation: Any  # the expected type at the location, or None if the walk failed
    metadata: tuple[object, ...]  # constraints (Ge, Gt, …) of the field at the location
    parent_model: type[BaseModel] | None  # set when the last key is unknown to this table
    parent_display: tuple[KeyPart, ...]  # key path of that table
    union_at: int | None  # index in `loc` of the union tag, if the location crossed a union
    union_tag: str | None
    union_annotation: Any  # the whole union (for messages that collapse its branches)
    union_metadata: tuple[object, ...]


def _union_members(annotation: Any) -> tuple[Any, ...] | None:
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for a in get_args(annotation) if a is not type(None))
    return None


def _strip_optional(annotation: Any) -> Any:
    members = _union_members(annotation)
    if members is not None and len(members) == 1:
        return members[0]
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _union_tag(member: Any) -> str:
    if isinstance(member, type):
        return member.__name__
    return str(member)


def walk(loc: tuple[KeyPart, ...]) -> Where:
    """What `SoongConfig` says about the error location `loc`."""
    annotation: Any = SoongConfig
    metadata: tuple[object, ...] = ()
    display: list[KeyPart] = []
    union_at: int | None = None
    union_tag: str | None = None
    union_annotation: Any = None
    union_metadata: tuple[object, ...] = ()
    index = 0
    while index < len(loc):
        part = loc[index]
        annotation = _strip_optional(annotation)
        members = _union_members(annotation)
        if members is not None:
            chosen = next((m for m in members if _union_tag(m) == part), None)
            if chosen is None:
                break
            if union_at is None:
                union_at, union_tag = index, str(part)
                union_annotation, union_metadata = annotation, metadata
            annotation = chosen
            index += 1
            continue
        if _is_model(annotation):
            fields = annotation.model_fields
            if not isinstance(part, str) or part not in fields:
                if index == len(loc) - 1:
                    return Where(
                        display=(*display, part),
                        annotation=None,
                        metadata=(),
                        parent_model=annotation,
                        parent_display=tuple(display),
                        union_at=union_at,
                        union_tag=union_tag,
                        union_annotation=union_annotation,
                        union_metadata=union_metadata,
                    )
                annotation = None
                display.extend(loc[index:])
                break
            field = fields[part]
            annotation, metadata = field.annotation, tuple(field.metadata)
        elif get_origin(annotation) is dict:
            annotation, metadata = get_args(annotation)[1], ()
        elif get_origin(annotation) is list:
            annotation, metadata = get_args(annotation)[0], ()
        else:
            annotation = None
            display.extend(loc[index:])
            break
        display.append(part)
        index += 1
    return Where(
        display=tuple(display),
        annotation=annotation,
        metadata=metadata,
        parent_model=None,
        parent_display=(),
        union_at=union_at,
        union_tag=union_tag,
        union_annotation=union_annotation,
        union_metadata=union_metadata,
    )


# --- describing what was expected ------------------------------------------------------------


def _bounds(metadata: tuple[object, ...], *, integer: bool) -> str:
    low: object = None
    high: object = None
    low_strict = high_strict = False
    for item in metadata:
        if getattr(item, "ge", None) is not None:
            low = item.ge  # type: ignore[attr-defined]
        if getattr(item, "gt", None) is not None:
            low, low_strict = item.gt, True  # type: ignore[attr-defined]
        if getattr(item, "le", None) is not None:
            high = item.le  # type: ignore[attr-defined]
        if getattr(item, "lt", None) is not None:
            high, high_strict = item.lt, True  # type: ignore[attr-defined]
    if integer:
        if low_strict and isinstance(low, int):
            low, low_strict = low + 1, False
        if high_strict and isinstance(high, int):
            high, high_strict = high - 1, False
    if low is not None and high is not None and not low_strict and not high_strict:
        return f" from {low} to {high}"
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_strict else '≥'} {low}")
    if high is not None:
        parts.append(f"{'<' if high_strict else '≤'} {high}")
    return (" " + " and ".join(parts)) if parts else ""


def _literal_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def describe_expected(annotation: Any, metadata: tuple[object, ...] = ()) -> str:
    """Human words for a schema type: "an integer ≥ 1", "one of 'openai', 'anthropic'", …"""
    annotation = _strip_optional(annotation)
    members = _union_members(annotation)
    if members is not None:
        if str in members and ModelOverride in members:
            return "a profile name from [model_overrides] (a string) or an inline table"
        return " or ".join(describe_expected(m, metadata) for m in members)
    if get_origin(annotation) is Literal:
        values = get_args(annotation)
        if len(values) == 1:
            return f"{_literal_text(values[0])} (the only supported value)"
        return "one of " + ", ".join(_literal_text(v) for v in values)
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "an integer" + _bounds(metadata, integer=True)
    if annotation is float:
        return "a number" + _bounds(metadata, integer=False)
    if annotation is str:
        return "a string"
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        item = _strip_optional(item)
        if item is str:
            return "a list of strings"
        if _is_model(item):
            return "a list of tables"
        if get_origin(item) is Literal:
            return "a list of " + ", ".join(_literal_text(v) for v in get_args(item))
        return "a list"
    if get_origin(annotation) is dict or _is_model(annotation):
        return "a table"
    return "a valid value"


EXPECTED_BY_TYPE: dict[str, str] = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
}
