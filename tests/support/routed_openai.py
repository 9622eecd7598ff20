"""A `FakeOpenAIServer` that answers each request by what it asks, not by arrival order.

With child agents several conversations talk to one server at once (a parent and its
children), so a FIFO script cannot say which answer goes where. Here each route is keyed by
a piece of text; a request goes to the first route whose key its last user message contains,
and a route answers its n-th request with its n-th response (the last one again after that)::

    with RoutedOpenAIServer() as srv:
        srv.route("parent question", tool_call_response([...]), text_response("done"))
        srv.route("child task", text_response("child answer"))

A request no route takes gets the queue's next response (`enqueue`), else the base server's
500 "no scripted response left". Everything else (strict validation, `requests`,
`rejections`) is the base server's.
"""

from __future__ import annotations

import threading
from typing import Any

from tests.support.fake_openai import FakeOpenAIServer, RecordedRequest, ScriptedResponse


def last_user_text(body: Any) -> str:
    """The text of the last user message of a Chat Completions request body."""
    messages = body.get("messages") if isinstance(body, dict) else None
    for message in reversed(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class RoutedOpenAIServer(FakeOpenAIServer):
    """Answers by route (see the module docstring); `served[key]` counts each route's answers."""

    def __init__(self, *, strict: bool = True) -> None:
        super().__init__(strict=strict)
        self._routes: list[tuple[str, tuple[ScriptedResponse, ...]]] = []
        self.served: dict[str, int] = {}
        self._current = threading.local()  # the request this handler thread is answering

    def route(self, key: str, *responses: ScriptedResponse) -> None:
        assert responses, "a route needs at least one response"
        with self._lock:
            self._routes.append((key, responses))
            self.served.setdefault(key, 0)

    def requests_for(self, key: str) -> list[RecordedRequest]:
        """The chat requests whose last user message contains `key`, in arrival order."""
        return [r for r in self.requests if r.body and key in last_user_text(_body(r))]

    def _record(self, request: RecordedRequest) -> int:
        self._current.request = request
        return super()._record(request)

    def _next(self) -> ScriptedResponse | None:
        request: RecordedRequest | None = getattr(self._current, "request", None)
        text = last_user_text(_body(request)) if request is not None else ""
        with self._lock:
            for key, responses in self._routes:
                if key in text:
                    count = self.served[key]
                    self.served[key] = count + 1
                    return responses[min(count, len(responses) - 1)]
        return super()._next()


def _body(request: RecordedRequest) -> Any:
    try:
        return request.json
    except ValueError:
        return None
