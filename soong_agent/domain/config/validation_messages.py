"""One-line messages for `config.toml` schema errors (CFG-2).

`format_validation_error` turns a pydantic `ValidationError` raised by `SoongConfig` into a single
line naming the file, the key path (`model.timeout_ms`), what was expected and what was found.
Values of unknown keys and of secret-looking keys are never shown.

What the schema expects at a key path is read by `schema_walk`.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from soong_agent.domain.config.retired import FIXED_VALUE_REASONS, RETIRED_KEYS
from soong_agent.domain.config.schema_walk import (
    EXPECTED_BY_TYPE,
    KeyPart,
    Where,
    describe_expected,
    walk,
)

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
# Key names whose values may be secrets (`api_key`, `token`, `client_secret` …, not `max_tokens`).
_SECRETISH = re.compile(
    r"(^|_)(api_?key|key|secret|password|passwd|credentials?|bearer|token)$", re.IGNORECASE
)
_MAX_SHOWN = 60


def format_key_path(parts: Sequence[KeyPart]) -> str:
    """`("agents", "worker_pools", 0, "pool_id")` → `agents.worker_pools[0].pool_id`.

    Keys that are not bare TOML keys are quoted: `tools.overrides."my.tool".timeout_ms`.
    """
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        key = part if _BARE_KEY.match(part) else json.dumps(part, ensure_ascii=False)
        out = key if not out else f"{out}.{key}"
    return out


def toml_value(value: object, *, limit: int = _MAX_SHOWN) -> str:
    """A short TOML-looking rendering of `value` (`'abc'`, `1.5`, `true`, `[1, 2]`)."""
    text = _toml_value(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def toml_type(value: object) -> str:
    """The TOML name of `value`'s type: string, integer, float, boolean, list, table, datetime …"""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping | BaseModel):
        return "table"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, _dt.datetime):
        return "datetime"
    if isinstance(value, _dt.date):
        return "date"
    if isinstance(value, _dt.time):
        return "time"
    if value is None:
        return "nothing"
    return type(value).__name__


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if "'" not in value and value.isprintable():
            return f"'{value}'"
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        # Keys only: a table put where a scalar belongs may hold anything, secrets included.
        inner = ", ".join(f"{format_key_path([str(k)])} = …" for k in value)
        return "{" + inner + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, _dt.date | _dt.time):
        return value.isoformat()
    return repr(value)


# --- turning pydantic errors into problems ---------------------------------------------------


@dataclass(frozen=True)
class _Problem:
    path: str
    text: str  # what follows "<file>: <path>: "


def _found(value: object, key: KeyPart | None) -> str:
    if isinstance(key, str) and _SECRETISH.search(key) and not key.endswith("_env"):
        return f"a {toml_type(value)} (value hidden)"
    return f"{toml_value(value)} ({toml_type(value)})"


def _unknown_key_text(where: Where) -> str:
    model = where.parent_model
    assert model is not None
    known = list(model.model_fields)
    key = where.display[-1]
    if where.parent_display:
        text = f"unknown key (known keys of [{format_key_path(where.parent_display)}]: "
    else:
        text = "unknown key (known top-level sections: "
    text += ", ".join(known) + ")"
    if isinstance(key, str):
        if _SECRETISH.search(key) and not key.endswith("_env") and "api_key_env" in known:
            return (
                text + " — put the NAME of the environment variable that holds the secret in "
                'api_key_env (e.g. api_key_env = "OPENAI_API_KEY"); the config never holds '
                "secret values"
            )
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.7)
        if close:
            text += f" — did you mean {close[0]!r}?"
    return text


def _problem_for(error: Mapping[str, Any], where: Where) -> _Problem:
    kind = str(error.get("type", ""))
    path = format_key_path(where.display) or "(top level)"
    key = where.display[-1] if where.display else None
    if kind == "extra_forbidden" and path in RETIRED_KEYS:
        return _Problem(path, RETIRED_KEYS[path])
    if kind == "extra_forbidden" and where.parent_model is not None:
        return _Problem(path, _unknown_key_text(where))
    if kind == "extra_forbidden":
        return _Problem(path, "unknown key")
    expected = (
        describe_expected(where.annotation, where.metadata)
        if where.annotation is not None
        else EXPECTED_BY_TYPE.get(kind)
    )
    if kind == "missing":
        suffix = f" (expected {expected})" if expected else ""
        return _Problem(path, f"is required{suffix}")
    if kind in ("value_error", "assertion_error"):
        message = str(error.get("msg", ""))
        message = re.sub(r"^(Value error|Assertion failed), ", "", message)
        return _Problem(path, message)
    if expected is None:
        message = str(error.get("msg", "invalid value"))
        message = message[:1].lower() + message[1:]
        return _Problem(path, f"{message}, found {_found(error.get('input'), key)}")
    text = f"expected {expected}, found {_found(error.get('input'), key)}"
    if path in FIXED_VALUE_REASONS:
        text += f": {FIXED_VALUE_REASONS[path]}"
    return _Problem(path, text)


def _problems(errors: list[Mapping[str, Any]]) -> Iterator[_Problem]:
    walked = [(err, walk(tuple(err.get("loc", ())))) for err in errors]
    # Errors inside a `str | table` union come once per branch; keep the branch the value took.
    groups: dict[tuple[KeyPart, ...], list[tuple[Mapping[str, Any], Where]]] = {}
    for err, where in walked:
        if where.union_at is not None:
            prefix = tuple(err["loc"][: where.union_at])
            groups.setdefault(prefix, []).append((err, where))
    emitted: set[tuple[KeyPart, ...]] = set()
    for err, where in walked:
        if where.union_at is None:
            yield _problem_for(err, where)
            continue
        prefix = tuple(err["loc"][: where.union_at])
        if prefix in emitted:
            continue
        emitted.add(prefix)
        members = groups[prefix]
        deep = [(e, w) for e, w in members if len(e["loc"]) > where.union_at + 1]
        if deep:
            for e, w in deep:
                yield _problem_for(e, w)
            continue
        path = format_key_path(prefix)
        expected = describe_expected(where.union_annotation, where.union_metadata)
        key = prefix[-1] if prefix else None
        yield _Problem(path, f"expected {expected}, found {_found(err.get('input'), key)}")


def format_validation_error(exc: ValidationError, *, file: str) -> str:
    """ONE line describing the first problem of `exc`, and how many more there are.

    `<file>: <key.path>: expected <what>, found <value> (<type>)`.
    """
    problems: list[_Problem] = []
    seen: set[tuple[str, str]] = set()
    for problem in _problems([dict(e) for e in exc.errors()]):
        if (problem.path, problem.text) not in seen:
            seen.add((problem.path, problem.text))
            problems.append(problem)
    if not problems:
        return f"{file}: invalid configuration"
    first = problems[0]
    line = f"{file}: {first.path}: {first.text}"
    more = len(problems) - 1
    if more:
        line += f" (and {more} more problem{'s' if more > 1 else ''})"
    return line.replace("\n", " ")
