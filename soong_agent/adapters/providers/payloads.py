"""What a provider trusts of a payload, before and after parsing it: bounds, types, clean text.

A payload is an SSE event's data, an NDJSON line, or an error body. Before it is parsed it is
bounded: the framing refuses an event or line longer than `MAX_PAYLOAD_CHARS`, and JSON nested
deeper than `MAX_JSON_DEPTH` levels is refused before the parser recurses into it. The parsers
then check the type of every field they read; a `ShapeError` names the field, what was
expected and what came. Strings are handed on as they decode: a lone surrogate from a
``\\ud800``-style escape is the run's to write out (`ports.text`, where text enters a run).
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_JSON_DEPTH = 512
"""The deepest nesting of arrays and objects a payload may have (real ones stay under 20)."""
MAX_PAYLOAD_CHARS = 16 * 1024 * 1024
"""The longest SSE event (characters of its data) or NDJSON line (bytes) taken: 16 MiB."""
MAX_ERROR_BODY_BYTES = 1024 * 1024
"""How much of an error answer (or an answer that is not a stream) is read."""
EXCERPT_CHARS = 120
"""How much of a refused payload an error message quotes."""

_loads = json.loads
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


class PayloadError(ValueError):
    """A payload that cannot be taken as JSON: not JSON, nested too deeply, or too large."""


class ShapeError(Exception):
    """A parsed payload whose field at `path` does not hold what the format promises."""

    def __init__(self, path: str, expected: str, found: Any) -> None:
        self.path = path
        self.expected = expected
        self.found = found
        where = f"{path}: " if path else ""
        super().__init__(f"{where}expected {expected}, found {describe(found)}")

    def under(self, prefix: str) -> ShapeError:
        """The same error with its path inside `prefix` (``choices[0]`` + ``delta``)."""
        path = self.path if not prefix else f"{prefix}{sep(self.path)}{self.path}"
        return ShapeError(path, self.expected, self.found)


def sep(path: str) -> str:
    return "" if not path or path.startswith("[") else "."


def describe(value: Any) -> str:
    """A short description of a JSON value, for an error message."""
    if value is None:
        return "nothing (null)"
    if value is True or value is False:
        return f"a boolean ({'true' if value else 'false'})"
    if isinstance(value, int):
        return f"an integer ({_short(str(value))})"
    if isinstance(value, float):
        return f"a number ({_short(repr(value))})"
    if isinstance(value, str):
        return f"a string ({_short(json.dumps(value, ensure_ascii=False))})"
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    if isinstance(value, dict):
        return "an object" if value else "an empty object"
    return type(value).__name__


def _short(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def excerpt(payload: str) -> str:
    """The start of `payload`, at most `EXCERPT_CHARS` characters."""
    if len(payload) <= EXCERPT_CHARS:
        return payload
    return payload[: EXCERPT_CHARS - 1] + "…"


def nesting_exceeds(text: str, limit: int) -> bool:
    """Whether the JSON in `text` opens more than `limit` arrays or objects inside each other
    (brackets inside strings do not count). Cheap when it cannot: counting brackets first."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        elif token in ("]", "}"):
            depth -= 1
    return False


def parse_json(text: str) -> Any:
    """The JSON value of `text`, bounded (see the module doc); `PayloadError` says why not."""
    if len(text) > MAX_JSON_DEPTH and nesting_exceeds(text, MAX_JSON_DEPTH):
        raise PayloadError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = _loads(text)
    except RecursionError as exc:  # the stack was already deep: still a bad payload, not a crash
        raise PayloadError("nested too deeply to parse") from exc
    except ValueError as exc:
        raise PayloadError(f"not JSON ({exc})") from exc
    return value


# --- typed reads ------------------------------------------------------------------------------

MAX_COUNT = 2**53
"""The largest token count taken (anything larger is not a count a model could report)."""


def opt_str(obj: dict[str, Any], key: str) -> str | None:
    """`obj[key]` when it is a string, None when absent or null; else `ShapeError`."""
    value = obj.get(key)
    if value is None or type(value) is str:
        return value
    raise ShapeError(key, "a string", value)


def req_str(obj: dict[str, Any], key: str) -> str:
    """`obj[key]`, which must be a string; else `ShapeError`."""
    value = obj.get(key)
    if type(value) is not str:
        raise ShapeError(key, "a string", value)
    return value


def opt_dict(obj: dict[str, Any], key: str) -> dict[str, Any] | None:
    """`obj[key]` when it is an object, None when absent or null; else `ShapeError`."""
    value = obj.get(key)
    if value is None or type(value) is dict:
        return value
    raise ShapeError(key, "an object", value)


def opt_count(obj: dict[str, Any], key: str) -> int:
    """`obj[key]` as a token count (0 when absent or null); `ShapeError` for anything but a
    whole number from 0 to `MAX_COUNT`."""
    value = obj.get(key)
    if value is None:
        return 0
    if type(value) is int and 0 <= value <= MAX_COUNT:
        return value
    raise ShapeError(key, "a token count (a whole number ≥ 0)", value)


def count_or_none(obj: dict[str, Any], key: str) -> int | None:
    """`obj[key]` as a token count, None when absent or null (`ShapeError` for a non-count)."""
    return None if obj.get(key) is None else opt_count(obj, key)


def opt_index(obj: dict[str, Any], key: str = "index") -> int | None:
    """`obj[key]` when it is an integer (not a boolean), None when absent; else `ShapeError`."""
    value = obj.get(key)
    if value is None or type(value) is int:
        return value
    raise ShapeError(key, "an integer", value)
