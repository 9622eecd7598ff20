"""What a server may ask the client (MCP-4), answered for the SDK's `ClientSession`:

- `elicitation/create`: put to the `Elicitor` (the terminal, an SDK callback); with none, it is
  declined. A form answer gets the schema's defaults for the fields it leaves out (SEP-1034)
  and is checked against the schema before it is sent: an answer that does not fit is not sent
  (the server gets an error naming the field);
- `sampling/createMessage`: answered by the `Sampler` (the run's model, once the user approved);
  with none, or when it declines, the server gets an error saying so;
- `roots/list`: the project folder and the write roots, as `file://` URIs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.client.context import ClientRequestContext

from soong_agent.ports.mcp import (
    ElicitationAnswer,
    ElicitationRequest,
    Elicitor,
    Sampler,
    SamplingDeclined,
    SamplingRequest,
)

log = logging.getLogger("soong_agent.adapters.mcp.hub")


@dataclass
class AskSettings:
    """Who answers what servers ask, for every server of a hub (`roots` may change)."""

    elicitor: Elicitor | None = None
    sampler: Sampler | None = None
    roots: tuple[Path, ...] = ()

    def for_server(self, server: str) -> ServerAsks:
        return ServerAsks(server, settings=self)


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


def _choices(prop: Mapping[str, Any]) -> list[Any] | None:
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
        allowed = _choices(items) if isinstance(items, Mapping) else None
        for item in value:
            if allowed is not None and item not in allowed:
                return f"{item!r} is not one of {allowed}"
        if "minItems" in prop and len(value) < int(prop["minItems"]):
            return f"fewer than {prop['minItems']} items"
        if "maxItems" in prop and len(value) > int(prop["maxItems"]):
            return f"more than {prop['maxItems']} items"
        return None
    allowed = _choices(prop)
    if allowed is not None and value not in allowed:
        return f"{value!r} is not one of {allowed}"
    return None


class ServerAsks:
    """The callbacks of one server's sessions."""

    def __init__(self, server: str, *, settings: AskSettings) -> None:
        self._server = server
        self._settings = settings

    def session_callbacks(self) -> dict[str, Any]:
        """The keyword arguments of `ClientSession` for what this client answers."""
        found: dict[str, Any] = {"elicitation_callback": self.elicit}
        found["sampling_callback"] = self.sample
        if self._settings.roots:
            found["list_roots_callback"] = self.list_roots
        return found

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        if isinstance(params, types.ElicitRequestURLParams):
            request = ElicitationRequest(self._server, params.message, "url", url=params.url)
            schema: Mapping[str, Any] | None = None
        else:
            schema = dict(params.requested_schema)
            request = ElicitationRequest(self._server, params.message, "form", schema=schema)
        elicitor = self._settings.elicitor
        if elicitor is None:
            log.info("mcp server %r asked a question with nobody to answer: declined", self._server)
            return types.ElicitResult(action="decline")
        try:
            answer: ElicitationAnswer = await elicitor(request)
        except Exception as exc:  # the asker's own failure: the server gets it as an error
            log.warning("mcp server %r: its question could not be put: %s", self._server, exc)
            return types.ErrorData(
                code=types.INTERNAL_ERROR, message=f"the question could not be put: {exc}"
            )
        if answer.action != "accept" or schema is None:
            return types.ElicitResult(action=answer.action)
        content = with_defaults(schema, answer.content or {})
        problem = schema_problem(schema, content)
        if problem is not None:
            return types.ErrorData(
                code=types.INVALID_PARAMS, message=f"the answer does not fit the form: {problem}"
            )
        return types.ElicitResult(action="accept", content=content)

    async def sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        sampler = self._settings.sampler
        if sampler is None:
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message="sampling declined: this client has nobody to approve it",
            )
        messages = tuple((message.role, _text_of(message.content)) for message in params.messages)
        request = SamplingRequest(
            self._server,
            messages,
            system_prompt=params.system_prompt,
            max_tokens=params.max_tokens,
            temperature=params.temperature,
        )
        try:
            answer = await sampler(request)
        except SamplingDeclined as exc:
            return types.ErrorData(code=types.INVALID_REQUEST, message=f"sampling declined: {exc}")
        except Exception as exc:  # the sampler's own failure: the server gets it as an error
            log.warning("mcp server %r: sampling failed: %s", self._server, exc)
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"sampling failed: {exc}")
        if answer is None:
            return types.ErrorData(
                code=types.INVALID_REQUEST, message="sampling declined by the user"
            )
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=answer.text),
            model=answer.model,
            stop_reason=answer.stop_reason,
        )

    async def list_roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(
            roots=[
                types.Root(uri=root.resolve().as_uri(), name=root.name or str(root))
                for root in self._settings.roots
            ]
        )


def _text_of(content: object) -> str:
    """The text of a sampling message's content (other blocks described by their type)."""
    blocks = content if isinstance(content, list) else [content]
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        else:
            parts.append(f"[{getattr(block, 'type', type(block).__name__)} content]")
    return "\n".join(parts)
