"""Default factories for pydantic fields that start empty.

Plain functions, not `list` or `dict`: pydantic reads a default factory's signature when it
builds a model, and a builtin's is parsed from text (with Python's tokenizer), ~0.5–1 ms
apiece at start-up; a function's costs next to nothing.
"""

from __future__ import annotations

from typing import Any


def no_items() -> list[Any]:
    """An empty list (a field's default)."""
    return []


def no_entries() -> dict[str, Any]:
    """An empty dict (a field's default)."""
    return {}
