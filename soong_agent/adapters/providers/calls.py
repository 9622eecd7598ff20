"""How a stored tool call is sent back to a provider: what strict servers accept.

A model can stream broken arguments (cut off, not an object) or an empty or odd name. The
call is stored as it came, and the model is told the call failed; but sent back verbatim it
would make every later request of the session fail on a strict server (vLLM parses the
arguments; the official APIs check names against ``^[a-zA-Z0-9_-]{1,64}$``). So the wire
formats send the arguments as a JSON object (``{}`` when they are not one) and a name that
matches the pattern.
"""

from __future__ import annotations

import json
import re
from typing import Any

_NOT_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
NAME_MAX = 64
UNNAMED = "unnamed_tool"


def _parsed(arguments: str) -> dict[str, Any] | None:
    if not arguments:
        return None
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def arguments_object(arguments: str) -> dict[str, Any]:
    """The JSON object of a call's raw arguments text; ``{}`` when it is not one."""
    parsed = _parsed(arguments)
    return {} if parsed is None else parsed


def arguments_text(arguments: str) -> str:
    """The arguments as JSON text of an object: the raw text when it is one, else ``"{}"``."""
    return arguments if _parsed(arguments) is not None else "{}"


def wire_name(name: str) -> str:
    """`name` as the APIs accept a tool name: other characters become "_", at most 64."""
    return _NOT_NAME_CHARS.sub("_", name)[:NAME_MAX] or UNNAMED
