"""The forms of MCP servers' questions (`elicitation/create`, MCP-4): their flat JSON
schemas, the defaults a form's answer gets, and whether an answer fits. Plain data, no SDK:
the terminal that asks uses it too."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["choices_of", "schema_problem", "with_defaults"]


def with_defaults(schema: Mapping[str, Any], content: Mapping[str, Any]) -> dict[str, Any]:
    """`content` with the schema's default for every property it leaves out."""
    filled = dict(content)
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name, prop in properties.items():
            if name not in filled and isinstance(prop, Mapping) and "default" in prop:
                filled[name] = prop["default"]
    return filled


def schema_problem(schema: Mapping[str, Any], content: Mapping[str, Any]) -> str | None:
    """Why `content` does not fit `schema`, a form's flat schema (one line naming the field),
    or None. Checked: required fields, unknown fields, each value's type, enums (`enum`,
    `oneOf`/`anyOf` of `const`), string lengths, number bounds, array items and counts."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        properties = {}
    for name in schema.get("required") or ():
        if name not in content or content[name] is None:
            return f"{name}: required"
    for name, value in content.items():
        prop = properties.get(name)
        if not isinstance(prop, Mapping):
            return f"{name}: not a field of the form"
        problem = _value_problem(prop, value)
        if problem is not None:
            return f"{name}: {problem}"
    return None


def choices_of(prop: Mapping[str, Any]) -> list[Any] | None:
    """The values an enum field allows (`enum`, `oneOf`/`anyOf` of `const`), or None."""
    if isinstance(prop.get("enum"), list):
        return list(prop["enum"])
    for key in ("oneOf", "anyOf"):
        options = prop.get(key)
        if isinstance(options, list):
            return [o.get("const") for o in options if isinstance(o, Mapping) and "const" in o]
    return None


def _value_problem(prop: Mapping[str, Any], value: Any) -> str | None:
    kind = prop.get("type")
    if kind == "string":
        if not isinstance(value, str):
            return "expected a string"
        if len(value) < int(prop.get("minLength", 0)):
            return f"shorter than {prop['minLength']} characters"
        if "maxLength" in prop and len(value) > int(prop["maxLength"]):
            return f"longer than {prop['maxLength']} characters"
    elif kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"expected {'an integer' if kind == 'integer' else 'a number'}"
        if kind == "integer" and not float(value).is_integer():
            return "expected an integer"
        if "minimum" in prop and value < prop["minimum"]:
            return f"less than {prop['minimum']}"
        if "maximum" in prop and value > prop["maximum"]:
            return f"more than {prop['maximum']}"
    elif kind == "boolean":
        if not isinstance(value, bool):
            return "expected true or false"
    elif kind == "array":
        if not isinstance(value, list):
            return "expected a list"
        items = prop.get("items")
        allowed = choices_of(items) if isinstance(items, Mapping) else None
        for item in value:
            if allowed is not None and item not in allowed:
                return f"{item!r} is not one of {allowed}"
        if "minItems" in prop and len(value) < int(prop["minItems"]):
            return f"fewer than {prop['minItems']} items"
        if "maxItems" in prop and len(value) > int(prop["maxItems"]):
            return f"more than {prop['maxItems']} items"
        return None
    allowed = choices_of(prop)
    if allowed is not None and value not in allowed:
        return f"{value!r} is not one of {allowed}"
    return None
