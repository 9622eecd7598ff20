"""Machine-readable CLI output (`--output json`): one JSON object per line on stdout.

A run writes each run event as it happens — the same typed events the SDK yields and SQLite
stores, each with ``"schema_version": 1`` — and a ``{"type": "result", …}`` object last.
Status lines, warnings and approval questions stay on stderr, so stdout is only JSON.
`event_schema()` is the JSON schema every line validates against (`soong-agent schema events`).
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from soong_agent.application.runs.handle import RunResult
from soong_agent.ports.events import RunEvent
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.text import safe_json_text

SCHEMA_VERSION = 1


def result_object(result: RunResult, clean: Any = None) -> dict[str, Any]:
    """The last line of a run: how it ended, its usage and cost, and the answer."""
    scrub = clean or (lambda text: text)
    return {
        "schema_version": SCHEMA_VERSION,
        "type": "result",
        "session_id": result.session_id,
        "run_id": result.run_id,
        "status": result.status,
        "reason": scrub(result.reason) if result.reason else None,
        "final_text": scrub(result.final_text),
        "turns": result.turns,
        "usage": result.usage.model_dump(mode="json"),
        "cost_usd": result.cost_usd,
    }


def line(obj: dict[str, Any]) -> str:
    """One JSON line; a lone surrogate that came past the run's boundaries is written out by
    the rule of `ports.text` (valid JSON, valid UTF-8)."""
    return safe_json_text(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))[0] + "\n"


class JsonRenderer:
    """The renderer of `run --output json` (same interface as `Renderer`)."""

    def __init__(self, *, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self._out = out or sys.stdout
        self._err = err or sys.stderr
        self._redactor: SecretRedactor | None = None

    def use_redactor(self, redactor: SecretRedactor | None) -> None:
        self._redactor = redactor

    def clean(self, text: str) -> str:
        return self._redactor.redact(text) if self._redactor is not None else text

    def status(self, text: str) -> None:
        self._err.write(self.clean(text) + "\n")
        self._err.flush()

    def prompt(self, text: str) -> None:
        self._err.write(self.clean(text))
        self._err.flush()

    def handle(self, event: RunEvent) -> None:
        # events were scrubbed of secrets by the run's recorder before they were published
        data = event.model_dump(mode="json")
        self._out.write(line({"schema_version": SCHEMA_VERSION, **data}))
        self._out.flush()

    def finished(self, result: RunResult) -> None:
        self._out.write(line(result_object(result, self.clean)))
        self._out.flush()


def event_schema() -> dict[str, Any]:
    """The JSON schema of one line of `run --output json`: a run event or the result."""
    from pydantic import TypeAdapter

    schema = TypeAdapter(RunEvent).json_schema()
    defs: dict[str, Any] = schema.setdefault("$defs", {})
    version = {"const": SCHEMA_VERSION, "type": "integer"}
    for definition in defs.values():
        props = definition.get("properties")
        if isinstance(props, dict) and "type" in props and "seq" in props:
            props["schema_version"] = version
            definition.setdefault("required", []).append("schema_version")
    defs["RunResultLine"] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["schema_version", "type", "session_id", "run_id", "status", "turns"],
        "properties": {
            "schema_version": version,
            "type": {"const": "result"},
            "session_id": {"type": "string"},
            "run_id": {"type": "string"},
            "status": {"type": "string"},
            "reason": {"type": ["string", "null"]},
            "final_text": {"type": "string"},
            "turns": {"type": "integer"},
            "usage": {"type": "object"},
            "cost_usd": {"type": ["number", "null"]},
        },
    }
    union = {k: v for k, v in schema.items() if k != "$defs"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "soong-agent run --output json line",
        "$defs": defs,
        "anyOf": [union, {"$ref": "#/$defs/RunResultLine"}],
    }
