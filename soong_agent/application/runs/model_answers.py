"""Asking a model for one plain answer, and reading JSON operations out of it: what the
summariser, memory recall, extraction and consolidation share."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from soong_agent.domain.skills import one_line
from soong_agent.ports.model import ModelProvider, ModelRequest
from soong_agent.ports.streaming import TextDelta

M = TypeVar("M", bound=BaseModel)

FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
"""A Markdown code fence around an answer (models add one around JSON)."""


async def answer_text(provider: ModelProvider, request: ModelRequest) -> str:
    """The text of the model's answer to `request` (its stream's text pieces, joined)."""
    parts: list[str] = []
    async for event in provider.stream(request):
        if isinstance(event, TextDelta):
            parts.append(event.text)
    return "".join(parts)


def _outer_json(text: str) -> str | None:
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return None
    start = min(starts)
    end = max(text.rfind("}"), text.rfind("]"))
    return text[start : end + 1] if end > start else None


def operations_in(
    answer: str,
    model: type[M],
    failed: type[Exception],
    *,
    keys: Sequence[str] = ("operations",),
) -> tuple[list[M], list[str]]:
    """The operations of an answer holding ``{"<key>": [...]}`` (the first of `keys` present)
    or a bare list (a code fence or words around the JSON are tolerated), each validated as
    `model`, and one line per entry that is not a valid operation. Raises `failed` when there
    is no such list, or when no entry of a non-empty one is valid."""
    text = FENCE.sub("", answer.strip())
    value: Any = None
    for candidate in (text, _outer_json(text)):
        if candidate is None:
            continue
        try:
            value = json.loads(candidate)
            break
        except ValueError:
            continue
    if isinstance(value, dict):
        value = next((value[k] for k in keys if k in value), None)
    if not isinstance(value, list):
        raise failed(f"the answer is not a JSON list of operations: {one_line(answer, 80)!r}")
    operations: list[M] = []
    problems: list[str] = []
    for index, item in enumerate(value):
        try:
            operations.append(model.model_validate(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "operation"
            problems.append(f"operation {index + 1} ignored: {where}: {first['msg']}")
    if value and not operations:
        raise failed("; ".join(problems))
    return operations, problems
