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

from soong_agent.adapters.mcp.forms import schema_problem, with_defaults
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
