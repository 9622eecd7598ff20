"""Reads declarative tool definitions from `${SOONG_AGENT_HOME}/tools/*.json` (TOOL-3).

A file looks like::

    {
      "name": "git_log",
      "description": "Show the last commits of a file.",
      "parameters": {
        "type": "object",
        "properties": {
          "path": {"type": "string", "description": "File to show the history of."},
          "count": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}
        },
        "required": ["path"]
      },
      "command": ["git", "log", "-n", "{count}", "--oneline", "--", "{path}"],
      "permission_class": "read_only",
      "timeout_ms": 10000
    }

An argv item that is exactly `{name}` is replaced by that argument's value as one whole item;
a placeholder inside a longer item (`--n={count}`) is rejected, since nothing is ever spliced
into a string or run through a shell. A bad file is reported with its path and the reason; the
other files still load.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from soong_agent.domain.config.schema import ToolsConfig
from soong_agent.ports.approval import PermissionClass
from soong_agent.ports.tools import (
    DeclarativeParameter,
    DeclarativeToolSpec,
    ItemType,
    ParameterType,
)

MAX_FILE_BYTES = 1_000_000

_TOOL_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_PARAM_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

_FILE_KEYS = (
    "name",
    "description",
    "parameters",
    "command",
    "permission_class",
    "timeout_ms",
    "$schema",
)
_SCHEMA_KEYS = (
    "type",
    "properties",
    "required",
    "additionalProperties",
    "description",
    "title",
    "$schema",
)
_PERMISSION_CLASSES: tuple[PermissionClass, ...] = ("read_only", "write", "exec", "network")
_PARAM_TYPES: tuple[ParameterType, ...] = ("string", "integer", "number", "boolean", "array")
_ITEM_TYPES: tuple[ItemType, ...] = ("string", "integer", "number", "boolean")
_COMMON_KEYS = ("type", "description", "title", "default", "enum")
_TYPE_KEYS: dict[str, tuple[str, ...]] = {
    "string": ("minLength", "maxLength", "pattern"),
    "integer": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"),
    "boolean": (),
    "array": ("items", "minItems", "maxItems"),
}
_COUNT_KEYS = ("minLength", "maxLength", "minItems", "maxItems")


class _Bad(Exception):
    """Why a file cannot be used."""


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _unknown_keys(where: str, found: dict[str, Any], allowed: tuple[str, ...]) -> None:
    extra = [k for k in found if k not in allowed]
    if extra:
        prefix = f"{where}: " if where else ""
        raise _Bad(f"{prefix}unknown key {extra[0]!r} (supported: {', '.join(allowed)})")


def _is_type(value: Any, kind: str, items: ItemType | None = None) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list) and all(
            _is_type(v, items) if items else _is_scalar(v) for v in value
        )
    return False


def _is_scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def _items(where: str, raw: Any) -> ItemType:
    if not isinstance(raw, dict):
        raise _Bad(f'{where}: expected an object such as {{"type": "string"}}, found {_kind(raw)}')
    _unknown_keys(where, raw, ("type", "description", "title"))
    kind = raw.get("type")
    for item in _ITEM_TYPES:
        if kind == item:
            return item
    raise _Bad(f"{where}.type: expected one of {', '.join(_ITEM_TYPES)}, found {_shown(kind)}")


def _parameter(name: str, raw: Any, required: bool) -> DeclarativeParameter:
    where = f"parameters.properties.{name}"
    if not _PARAM_NAME.fullmatch(name):
        raise _Bad(
            f"{where}: a parameter name must start with a letter and hold only letters, digits "
            "and '_' (at most 64 characters)"
        )
    if not isinstance(raw, dict):
        raise _Bad(f"{where}: expected a schema object, found {_kind(raw)}")
    kind_raw = raw.get("type")
    kind: ParameterType | None = next((t for t in _PARAM_TYPES if t == kind_raw), None)
    if kind is None:
        raise _Bad(
            f"{where}.type: expected one of {', '.join(_PARAM_TYPES)}, found {_shown(kind_raw)}"
        )
    _unknown_keys(where, raw, _COMMON_KEYS + _TYPE_KEYS[kind])
    description = raw.get("description")
    if description is not None and not isinstance(description, str):
        raise _Bad(f"{where}.description: expected a string, found {_kind(description)}")
    items = _items(f"{where}.items", raw["items"]) if "items" in raw else None
    constraints: list[tuple[str, Any]] = []
    for key in _TYPE_KEYS[kind]:
        if key == "items" or key not in raw:
            continue
        value = raw[key]
        if key in _COUNT_KEYS:
            if not _is_type(value, "integer") or value < 0:
                raise _Bad(f"{where}.{key}: expected a whole number >= 0, found {_shown(value)}")
        elif key == "pattern":
            if not isinstance(value, str):
                raise _Bad(f"{where}.pattern: expected a string, found {_kind(value)}")
            try:
                re.compile(value)
            except re.error as exc:
                raise _Bad(f"{where}.pattern: not a valid regular expression ({exc})") from None
        elif not _is_type(value, "number"):
            raise _Bad(f"{where}.{key}: expected a number, found {_shown(value)}")
        constraints.append((key, value))
    enum: tuple[Any, ...] | None = None
    if "enum" in raw:
        values = raw["enum"]
        if kind == "array" or not isinstance(values, list) or not values:
            raise _Bad(f"{where}.enum: expected a non-empty array of {kind} values")
        for value in values:
            if not _is_type(value, kind):
                raise _Bad(f"{where}.enum: {_shown(value)} is not {kind}")
        enum = tuple(values)
    has_default = "default" in raw
    default = raw.get("default")
    if has_default and default is not None:
        if not _is_type(default, kind, items):
            raise _Bad(f"{where}.default: {_shown(default)} is not {kind}")
        if enum is not None and default not in enum:
            raise _Bad(f"{where}.default: {_shown(default)} is not one of the enum values")
    if required and has_default:
        raise _Bad(f"{where}: a required parameter cannot have a default")
    return DeclarativeParameter(
        name=name,
        type=kind,
        required=required,
        description=description,
        default=default,
        has_default=has_default,
        enum=enum,
        items=items,
        constraints=tuple(constraints),
    )


def _parameters(raw: Any) -> tuple[tuple[DeclarativeParameter, ...], dict[str, Any]]:
    if raw is None:
        raw = {"type": "object", "properties": {}}
    if not isinstance(raw, dict):
        raise _Bad(f"parameters: expected a JSON Schema object, found {_kind(raw)}")
    _unknown_keys("parameters", raw, _SCHEMA_KEYS)
    if raw.get("type") != "object":
        raise _Bad(f'parameters.type: expected "object", found {_shown(raw.get("type"))}')
    if raw.get("additionalProperties", False) is not False:
        raise _Bad(
            "parameters.additionalProperties: only false is supported (arguments that are not "
            "declared cannot be placed in the command)"
        )
    properties = raw.get("properties", {})
    if not isinstance(properties, dict):
        raise _Bad(f"parameters.properties: expected an object, found {_kind(properties)}")
    required = raw.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise _Bad("parameters.required: expected an array of parameter names")
    for name in required:
        if name not in properties:
            raise _Bad(f"parameters.required: {name!r} is not in parameters.properties")
    if len(set(required)) != len(required):
        raise _Bad("parameters.required: a name is listed twice")
    params = tuple(_parameter(n, p, n in required) for n, p in properties.items())
    shown_props = {}
    for name, prop in properties.items():
        shown = copy.deepcopy(prop)
        shown.pop("title", None)
        shown_props[name] = shown
    schema: dict[str, Any] = {"type": "object", "properties": shown_props}
    if required:
        schema["required"] = list(required)
    schema["additionalProperties"] = False
    return params, schema


def _command(raw: Any, params: tuple[DeclarativeParameter, ...]) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw:
        raise _Bad(
            "command: expected a non-empty array of strings (the argv, e.g. "
            f'["git", "log", "{{path}}"]), found {_kind(raw)}'
        )
    declared = {p.name for p in params}
    used: set[str] = set()
    for index, item in enumerate(raw):
        where = f"command[{index}]"
        if not isinstance(item, str):
            raise _Bad(f"{where}: expected a string, found {_kind(item)} {_shown(item)}")
        whole = _PLACEHOLDER.fullmatch(item)
        if whole:
            name = whole.group(1)
            if name not in declared:
                known = ", ".join(sorted(declared)) or "none"
                raise _Bad(
                    f"{where}: placeholder {item!r} names no declared parameter "
                    f"(parameters: {known})"
                )
            if index == 0:
                raise _Bad(f"{where}: the program itself cannot be a placeholder")
            used.add(name)
            continue
        inner = _PLACEHOLDER.search(item)
        if inner:
            raise _Bad(
                f"{where}: {item!r}: a placeholder must be a whole argv item; arguments are "
                f"never spliced into a string (pass {inner.group(0)!r} as an item of its own)"
            )
        if not item and index == 0:
            raise _Bad(f"{where}: the program name is empty")
    unused = [p.name for p in params if p.name not in used]
    if unused:
        raise _Bad(
            f"parameters.properties.{unused[0]}: declared but not used in command "
            f"(add {'{' + unused[0] + '}'!r} as an argv item)"
        )
    return tuple(raw)


def _spec(path: Path, data: Any) -> DeclarativeToolSpec:
    if not isinstance(data, dict):
        raise _Bad(f"expected a JSON object, found {_kind(data)}")
    _unknown_keys("", data, _FILE_KEYS)
    name = data.get("name")
    if not isinstance(name, str):
        raise _Bad(f"name: expected a string, found {_kind(name)}")
    if not _TOOL_NAME.fullmatch(name):
        raise _Bad(
            f"name: {name!r} must start with a lower-case letter and hold only a-z, 0-9 and '_' "
            "(at most 64 characters)"
        )
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        raise _Bad(f"description: expected a non-empty string, found {_kind(description)}")
    params, schema = _parameters(data.get("parameters"))
    command = _command(data.get("command"), params)
    permission_raw = data.get("permission_class", "exec")
    permission: PermissionClass | None = next(
        (p for p in _PERMISSION_CLASSES if p == permission_raw), None
    )
    if permission is None:
        raise _Bad(
            f"permission_class: expected one of {', '.join(_PERMISSION_CLASSES)}, "
            f"found {_shown(permission_raw)}"
        )
    timeout = data.get("timeout_ms")
    if timeout is not None and (not _is_type(timeout, "integer") or timeout <= 0):
        raise _Bad(
            f"timeout_ms: expected a whole number of milliseconds > 0, found {_shown(timeout)}"
        )
    return DeclarativeToolSpec(
        name=name,
        description=description.strip(),
        parameters=params,
        schema=schema,
        command=command,
        permission_class=permission,
        timeout_ms=timeout,
        source=str(path),
    )


def _read(path: Path) -> Any:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise _Bad(f"the file is {size} bytes, more than the {MAX_FILE_BYTES} allowed")
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Bad(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise _Bad(f"cannot be read ({exc.strerror or exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Bad(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise _Bad("invalid JSON: nested too deeply") from None


def load_declarative_tools(tools_dir: Path) -> tuple[list[DeclarativeToolSpec], list[str]]:
    """The tool definitions in `tools_dir/*.json` (by file name) and one line per bad file.

    A problem line reads `<path>: <reason>`. A missing folder holds no tools and is no problem.
    When two files define the same name, the first (by file name) wins and the later one is
    reported. Never raises for a bad file.
    """
    try:
        if not tools_dir.is_dir():
            if tools_dir.exists():
                return [], [f"{tools_dir}: expected a folder of *.json tool definitions"]
            return [], []
        paths = sorted(p for p in tools_dir.glob("*.json") if not p.name.startswith("."))
    except OSError as exc:
        return [], [f"{tools_dir}: cannot be listed ({exc.strerror or exc})"]
    specs: list[DeclarativeToolSpec] = []
    problems: list[str] = []
    first: dict[str, Path] = {}
    for path in paths:
        try:
            if not path.is_file():
                raise _Bad("not a regular file")
            spec = _spec(path, _read(path))
        except _Bad as exc:
            problems.append(f"{path}: {exc}")
            continue
        if spec.name in first:
            problems.append(
                f"{path}: name: tool {spec.name!r} is already defined by {first[spec.name]}; "
                "this file is skipped"
            )
            continue
        first[spec.name] = path
        specs.append(spec)
    return specs, problems


def load_enabled_declarative_tools(
    tools_dir: Path, config: ToolsConfig
) -> tuple[list[DeclarativeToolSpec], list[str]]:
    """`load_declarative_tools` when `tools.declarative_enabled`; when off, nothing is read."""
    if not config.declarative_enabled:
        return [], []
    return load_declarative_tools(tools_dir)
