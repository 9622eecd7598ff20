"""A real loopback HTTP server that speaks the OpenAI Chat Completions streaming format.

Tests script it with responses, point a provider (or the CLI, in a subprocess) at `base_url`,
and inspect what it received::

    with FakeOpenAIServer() as srv:
        srv.enqueue(text_response("Hello there"), tool_call_response([("c1", "read_file", "{}")]))
        ...  # use srv.base_url ("http://127.0.0.1:<port>/v1")
        assert srv.requests[0].json["stream"] is True

POST .../chat/completions is answered from the queue in FIFO order (500 "no scripted response
left" when it is empty); any other POST, and every GET, gets 404. It runs in background threads.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Framing = Literal["chunked", "close", "length"]


@dataclass
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case keys
    body: bytes
    client_port: int = 0  # the client's source port: equal ports mean a reused connection

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class ScriptedResponse:
    """What to answer to one request.

    `chunks` are written one by one, each flushed. `framing` is how the body is delimited:
    chunked transfer encoding, connection close, or Content-Length. `cut_after` closes the
    connection abruptly after that many chunks (for chunked framing the client then sees an
    unfinished body). `delay_s` is slept before every chunk but the first.
    """

    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    framing: Framing = "chunked"
    cut_after: int | None = None
    delay_s: float = 0.0

    def with_delay(self, delay_s: float) -> ScriptedResponse:
        return replace(self, delay_s=delay_s)

    def with_framing(self, framing: Framing) -> ScriptedResponse:
        return replace(self, framing=framing)


# --- chunk builders --------------------------------------------------------------------------

_SSE_HEADERS = [("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-cache")]
_DONE = b"data: [DONE]\n\n"


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class _Chunks:
    """Builds the `data:` events of one streamed completion, byte for byte like OpenAI."""

    def __init__(self, model: str, usage: bool) -> None:
        self.id = "chatcmpl-" + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.model = model
        self.usage = usage
        self.out: list[bytes] = []

    def _event(self, choices: list[dict[str, Any]], usage: Any = None) -> None:
        obj: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake0001",
            "choices": choices,
        }
        if self.usage:
            obj["usage"] = usage
        self.out.append(f"data: {_dumps(obj)}\n\n".encode())

    def delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> None:
        self._event(
            [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
        )

    def finish(
        self, finish_reason: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int
    ) -> list[bytes]:
        self.delta({}, finish_reason)
        if self.usage:
            self._event(
                [],
                {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                    "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
                    "completion_tokens_details": {
                        "reasoning_tokens": 0,
                        "audio_tokens": 0,
                        "accepted_prediction_tokens": 0,
                        "rejected_prediction_tokens": 0,
                    },
                },
            )
        self.out.append(_DONE)
        return self.out


def split_text(text: str, pieces: int) -> list[str]:
    """`text` cut into at most `pieces` non-empty parts of nearly equal length."""
    if not text:
        return []
    pieces = max(1, min(pieces, len(text)))
    size, extra = divmod(len(text), pieces)
    out: list[str] = []
    start = 0
    for i in range(pieces):
        end = start + size + (1 if i < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def text_response(
    text: str,
    *,
    pieces: int = 3,
    usage: bool = True,
    finish_reason: str = "stop",
    model: str = "fake-model",
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    cached_tokens: int = 0,
) -> ScriptedResponse:
    """A streamed answer of `text` in `pieces` content deltas."""
    c = _Chunks(model, usage)
    c.delta({"role": "assistant", "content": "", "refusal": None})
    for piece in split_text(text, pieces):
        c.delta({"content": piece})
    chunks = c.finish(finish_reason, prompt_tokens, completion_tokens, cached_tokens)
    return ScriptedResponse(headers=list(_SSE_HEADERS), chunks=chunks)


def tool_call_response(
    calls: list[tuple[str, str, str]],
    *,
    fragments: int = 3,
    repeat_id_and_name: bool = False,
    text: str = "",
    usage: bool = True,
    interleave: bool = False,
    model: str = "fake-model",
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    cached_tokens: int = 0,
) -> ScriptedResponse:
    """A streamed answer making the tool calls `(id, name, arguments_json)`.

    Each call starts with a fragment holding its id and name (empty arguments), then its
    arguments arrive in `fragments` pieces. `repeat_id_and_name` repeats id and name in every
    fragment (as some gateways do); `interleave` mixes the fragments of parallel calls.
    """
    c = _Chunks(model, usage)
    role: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    if text:
        c.delta({"role": "assistant", "content": "", "refusal": None})
        for piece in split_text(text, 3):
            c.delta({"content": piece})
        role = {}

    def head(index: int, call_id: str, name: str, arguments: str) -> dict[str, Any]:
        return {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }

    per_call: list[list[dict[str, Any]]] = []
    for index, (call_id, name, arguments) in enumerate(calls):
        frags = [head(index, call_id, name, "")]
        for piece in split_text(arguments, fragments):
            if repeat_id_and_name:
                frags.append(head(index, call_id, name, piece))
            else:
                frags.append({"index": index, "function": {"arguments": piece}})
        per_call.append(frags)
    if interleave:
        ordered = [f for group in _round_robin(per_call) for f in group]
    else:
        ordered = [f for frags in per_call for f in frags]
    for fragment in ordered:
        c.delta({**role, "tool_calls": [fragment]})
        role = {}
    chunks = c.finish("tool_calls", prompt_tokens, completion_tokens, cached_tokens)
    return ScriptedResponse(headers=list(_SSE_HEADERS), chunks=chunks)


def _round_robin(groups: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    rounds: list[list[dict[str, Any]]] = []
    for i in range(max((len(g) for g in groups), default=0)):
        rounds.append([g[i] for g in groups if i < len(g)])
    return rounds


def error_response(
    status: int,
    *,
    message: str = "fake error",
    type_: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> ScriptedResponse:
    """A non-streamed JSON error in OpenAI's shape: {"error": {message, type, param, code}}."""
    if type_ is None:
        type_ = "server_error" if status >= 500 else "invalid_request_error"
    body = _dumps({"error": {"message": message, "type": type_, "param": None, "code": code}})
    all_headers = [("Content-Type", "application/json")]
    all_headers += list((headers or {}).items())
    return ScriptedResponse(
        status=status, headers=all_headers, chunks=[body.encode()], framing="length"
    )


def cut_stream_response(text: str, *, framing: Framing = "chunked") -> ScriptedResponse:
    """Some text deltas, then the connection closes without `data: [DONE]`.

    With chunked framing the body is left unfinished; with "close" framing it ends cleanly
    (the client only notices the missing [DONE]).
    """
    c = _Chunks("fake-model", True)
    c.delta({"role": "assistant", "content": "", "refusal": None})
    for piece in split_text(text, 3):
        c.delta({"content": piece})
    return ScriptedResponse(
        headers=list(_SSE_HEADERS), chunks=c.out, framing=framing, cut_after=len(c.out)
    )


def malformed_chunk_response() -> ScriptedResponse:
    """A role delta, then a `data:` line that is not JSON, then [DONE]."""
    c = _Chunks("fake-model", True)
    c.delta({"role": "assistant", "content": "", "refusal": None})
    chunks = [*c.out, b'data: {"id":"chatcmpl-broken","choices":[{"delta":\n\n', _DONE]
    return ScriptedResponse(headers=list(_SSE_HEADERS), chunks=chunks)


def raw_sse_response(
    lines: list[str], *, status: int = 200, framing: Framing = "chunked"
) -> ScriptedResponse:
    """Each string is sent as one line (a "\\n" is appended) and flushed on its own."""
    return ScriptedResponse(
        status=status,
        headers=list(_SSE_HEADERS),
        chunks=[(line + "\n").encode() for line in lines],
        framing=framing,
    )


def raw_bytes_response(
    chunks: list[bytes], *, status: int = 200, framing: Framing = "chunked"
) -> ScriptedResponse:
    """Exactly these bytes, each piece flushed on its own."""
    return ScriptedResponse(
        status=status, headers=list(_SSE_HEADERS), chunks=list(chunks), framing=framing
    )


def _no_script_left() -> ScriptedResponse:
    return error_response(
        500, message="fake server: no scripted response left", type_="server_error"
    )


# --- the server ------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, add=False)

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _record(self, body: bytes) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        path = self.path
        port = int(self.client_address[1])
        self.server.owner._record(RecordedRequest(self.command, path, headers, body, port))

    def do_GET(self) -> None:
        self._record(b"")
        self._serve(error_response(404, message=f"no route for GET {self.path}"))

    def do_POST(self) -> None:
        body = self._read_body()
        self._record(body)
        if self.path.split("?")[0].rstrip("/").endswith("/chat/completions"):
            response = self.server.owner._next() or _no_script_left()
        else:
            response = error_response(404, message=f"no route for POST {self.path}")
        self._serve(response)

    def _serve(self, response: ScriptedResponse) -> None:
        try:
            self._write(response)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
            self.close_connection = True
            self.server.owner._disconnected()

    def _write(self, r: ScriptedResponse) -> None:
        self.send_response(r.status)
        for name, value in r.headers:
            self.send_header(name, value)
        if r.framing == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
        elif r.framing == "length":
            self.send_header("Content-Length", str(sum(len(c) for c in r.chunks)))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.flush()
        for i, chunk in enumerate(r.chunks):
            if r.cut_after is not None and i >= r.cut_after:
                break
            if i and r.delay_s:
                time.sleep(r.delay_s)
            if r.framing == "chunked":
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            else:
                self.wfile.write(chunk)
            self.wfile.flush()
        if r.cut_after is not None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if r.framing == "chunked":
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, owner: FakeOpenAIServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)


class FakeOpenAIServer:
    """A scripted OpenAI-compatible server on 127.0.0.1 (a free port), in background threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[ScriptedResponse] = deque()
        self._requests: list[RecordedRequest] = []
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.client_disconnected = threading.Event()
        self.disconnects = 0
        self.base_url = ""

    # -- lifecycle --

    def start(self) -> FakeOpenAIServer:
        if self._httpd is not None:
            return self
        self._httpd = _HTTPServer(self)
        port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting and inspection --

    def enqueue(self, *responses: ScriptedResponse) -> None:
        with self._lock:
            self._queue.extend(responses)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        """How many scripted responses have not been served yet."""
        with self._lock:
            return len(self._queue)

    def wait_for_disconnect(self, timeout: float = 5.0) -> bool:
        """Whether the server saw a client go away in the middle of a response."""
        return self.client_disconnected.wait(timeout)

    # -- called from handler threads --

    def _next(self) -> ScriptedResponse | None:
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _disconnected(self) -> None:
        with self._lock:
            self.disconnects += 1
        self.client_disconnected.set()

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)
