"""A real loopback HTTP server that speaks Ollama's native `/api/chat` NDJSON stream.

Tests script it with responses, point a provider (or the CLI, in a subprocess) at `base_url`,
and inspect what it received::

    with FakeOllamaServer() as srv:
        srv.enqueue(text_response("Hello there"), tool_call_response([("", "read_file", "{}")]))
        ...  # use srv.base_url ("http://127.0.0.1:<port>", the server root as for Ollama)
        assert srv.requests[0].json["stream"] is True

The builders have the names and main parameters of `fake_openai`'s, so that one contract suite
can drive every provider. The lines are those Ollama writes (`Content-Type:
application/x-ndjson`, one compact JSON object and "\\n" per line):

- content: {"model","created_at","message":{"role":"assistant","content":"…"},"done":false}
- thinking (models that think): the same with "message":{…,"content":"","thinking":"…"}
- a tool call, whole, its arguments an object: "message":{…,"content":"","tool_calls":
  [{"id":"call_…","function":{"index":0,"name":"…","arguments":{…}}}]} (older versions send
  no "id"; the builders leave it out when the scripted id is "")
- the final line: "message":{"role":"assistant","content":""},"done_reason":"stop","done":true,
  then total_duration, load_duration, prompt_eval_count, prompt_eval_duration, eval_count,
  eval_duration (nanoseconds; counts and durations are left out when `usage=False`)
- an error: {"error":"…"}, as the body of an HTTP error, or as a line in the middle of a stream.

POST /api/chat is answered from the queue in FIFO order (500 "no scripted response left" when
it is empty); `GET /` (and HEAD) answers 200 "Ollama is running"; anything else gets Ollama's
plain "404 page not found". It runs in background threads.

Strict mode (the default; `FakeOllamaServer(strict=False)` turns it off) validates each POST to
/api/chat before a scripted response is consumed. An invalid request is recorded, consumes
nothing, is answered as Ollama answers it, HTTP 400 {"error": <the first problem>}, and is kept
in `server.rejections` (`.messages` lists every problem). Ollama decodes the body into Go
structs (`api.ChatRequest`), so most rules are its JSON decoding errors, quoted where known; the
rules, one a line:

- the body is a JSON object ("invalid character ... looking for beginning of value").
- `model` a non-empty string ("model is required").
- `messages` a non-empty list (with none Ollama only loads the model and answers nothing, which
  no chat request means to do).
- a message is an object whose `role` is system, user, assistant or tool (Ollama lowercases and
  passes others to the template, which drops them).
- `content`, when present, a string or null ("json: cannot unmarshal array into Go struct field
  Message.messages.content of type string").
- `images` a list of base64 strings (standard alphabet, padded: "illegal base64 data at input
  byte N" otherwise), each an image Ollama can decode (PNG, JPEG, GIF or WebP here: "image:
  unknown format"); `thinking` and `tool_name` strings.
- `think`, when present, true, false or one of "high", "medium", "low" ("invalid think value:
  \"x\" (must be \"high\", \"medium\", \"low\", true, or false)").
- `tool_calls` only on assistant messages, a list of {"function": {"name": <non-empty string>,
  "arguments": <a JSON object>}}: arguments as a string are refused ("json: cannot unmarshal
  string into Go struct field ChatRequest.messages.tool_calls.function.arguments of type
  api.ToolCallFunctionArguments").
- a tool message names its tool in a non-empty `tool_name` (Ollama accepts one without, but
  the chat template then cannot tell the model which call a result answers).
- `tools` a list of {"type": "function", "function": {"name": <non-empty string>,
  "parameters": <an object whose `properties`, if any, is an object>}} ("json: cannot unmarshal
  array into Go struct field ToolFunctionParameters.tools.function.parameters.properties").
- `stream` a boolean; `options` an object whose `num_predict` is an integer and `temperature`
  a number ("option \"num_predict\" must be of type integer").

There is no tool_choice in `/api/chat`; an unknown top-level field is ignored, as Ollama's
decoder does.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.fake_openai import Framing, RecordedRequest, ScriptedResponse, split_text

__all__ = [
    "FakeOllamaServer",
    "Framing",
    "RecordedRequest",
    "Rejection",
    "ScriptedResponse",
    "cut_stream_response",
    "error_response",
    "malformed_chunk_response",
    "raw_bytes_response",
    "raw_ndjson_response",
    "split_text",
    "stream_error_response",
    "text_response",
    "tool_call_response",
    "validate_chat_request",
]

# --- line builders ---------------------------------------------------------------------------

NDJSON_HEADERS = [("Content-Type", "application/x-ndjson")]
_JSON_HEADERS = [("Content-Type", "application/json; charset=utf-8")]
_TEXT_HEADERS = [("Content-Type", "text/plain; charset=utf-8")]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class _Lines:
    """Builds the lines of one streamed chat answer, field for field like Ollama."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.out: list[bytes] = []

    def _line(self, obj: dict[str, Any]) -> None:
        self.out.append((_dumps(obj) + "\n").encode())

    def _head(self) -> dict[str, Any]:
        now = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        return {"model": self.model, "created_at": now}

    def message(self, **fields: Any) -> None:
        self._line(
            {
                **self._head(),
                "message": {"role": "assistant", "content": "", **fields},
                "done": False,
            }
        )

    def text(self, text: str, pieces: int) -> None:
        for piece in split_text(text, pieces):
            self.message(content=piece)

    def thinking(self, text: str, pieces: int) -> None:
        for piece in split_text(text, pieces):
            self.message(thinking=piece)

    def finish(
        self, done_reason: str | None, usage: bool, prompt_eval_count: int, eval_count: int
    ) -> list[bytes]:
        obj: dict[str, Any] = {
            **self._head(),
            "message": {"role": "assistant", "content": ""},
        }
        if done_reason is not None:
            obj["done_reason"] = done_reason
        obj["done"] = True
        if usage:
            prompt_ns = 1_000_000 * max(prompt_eval_count, 1)
            eval_ns = 20_000_000 * max(eval_count, 1)
            load_ns = 3_753_500
            obj.update(
                total_duration=load_ns + prompt_ns + eval_ns + 1_000_000,
                load_duration=load_ns,
                prompt_eval_count=prompt_eval_count,
                prompt_eval_duration=prompt_ns,
                eval_count=eval_count,
                eval_duration=eval_ns,
            )
        self._line(obj)
        return self.out


def text_response(
    text: str,
    *,
    pieces: int = 3,
    usage: bool = True,
    done_reason: str | None = "stop",
    thinking: str = "",
    model: str = "fake-model",
    prompt_eval_count: int = 11,
    eval_count: int = 7,
) -> ScriptedResponse:
    """A streamed answer of `text` in `pieces` content lines (after `thinking` lines, if any),
    then the final line. `done_reason=None` leaves it out, as Ollama before 0.2 did."""
    lines = _Lines(model)
    lines.thinking(thinking, pieces)
    lines.text(text, pieces)
    chunks = lines.finish(done_reason, usage, prompt_eval_count, eval_count)
    return ScriptedResponse(headers=list(NDJSON_HEADERS), chunks=chunks)


def _arguments(arguments_json: str) -> Any:
    """The arguments as Ollama sends them: an object (text that is no JSON stays a string)."""
    if not arguments_json:
        return {}
    try:
        return json.loads(arguments_json)
    except ValueError:
        return arguments_json


def tool_call_response(
    calls: list[tuple[str, str, str]],
    *,
    fragments: int = 3,
    text: str = "",
    usage: bool = True,
    one_line: bool = False,
    done_reason: str = "stop",
    model: str = "fake-model",
    prompt_eval_count: int = 11,
    eval_count: int = 7,
) -> ScriptedResponse:
    """A streamed answer making the tool calls `(id, name, arguments_json)`.

    Ollama sends every call whole, so `fragments` is accepted for the shared builder API and
    ignored. Each call gets a line of its own (after `text`, if any) unless `one_line` puts
    them all in one `tool_calls` list. An id of "" is left out of the wire (older Ollama).
    """
    del fragments
    lines = _Lines(model)
    lines.text(text, 3)
    wire: list[dict[str, Any]] = []
    for index, (call_id, name, arguments_json) in enumerate(calls):
        call: dict[str, Any] = {}
        if call_id:
            call["id"] = call_id
        call["function"] = {"index": index, "name": name, "arguments": _arguments(arguments_json)}
        wire.append(call)
    if one_line:
        lines.message(tool_calls=wire)
    else:
        for call in wire:
            lines.message(tool_calls=[call])
    chunks = lines.finish(done_reason, usage, prompt_eval_count, eval_count)
    return ScriptedResponse(headers=list(NDJSON_HEADERS), chunks=chunks)


def error_response(
    status: int,
    *,
    message: str = "fake error",
    headers: dict[str, str] | None = None,
) -> ScriptedResponse:
    """A non-streamed error in Ollama's shape: {"error": "<message>"}."""
    body = _dumps({"error": message})
    all_headers = [*_JSON_HEADERS, *(headers or {}).items()]
    return ScriptedResponse(
        status=status, headers=all_headers, chunks=[body.encode()], framing="length"
    )


def stream_error_response(
    message: str, *, text: str = "Working on it", model: str = "fake-model"
) -> ScriptedResponse:
    """Some content lines (none when `text` is ""), then an {"error": …} line; the body then
    ends, as when Ollama's model runner fails in the middle of an answer."""
    lines = _Lines(model)
    lines.text(text, 2)
    chunks = [*lines.out, (_dumps({"error": message}) + "\n").encode()]
    return ScriptedResponse(headers=list(NDJSON_HEADERS), chunks=chunks)


def cut_stream_response(text: str, *, framing: Framing = "chunked") -> ScriptedResponse:
    """Some content lines, then the connection closes without the final (done) line.

    With chunked framing the body is left unfinished; with "close" framing it ends cleanly
    (the client only notices the missing final line).
    """
    lines = _Lines("fake-model")
    lines.text(text, 3)
    return ScriptedResponse(
        headers=list(NDJSON_HEADERS), chunks=lines.out, framing=framing, cut_after=len(lines.out)
    )


def malformed_chunk_response() -> ScriptedResponse:
    """A content line, then a line that is not JSON, then the final line."""
    lines = _Lines("fake-model")
    lines.text("ok", 1)
    broken = b'{"model":"fake-model","message":{"role":"assistant","content":"bro\n'
    chunks = [*lines.out, broken]
    final = _Lines("fake-model").finish("stop", True, 11, 7)
    return ScriptedResponse(headers=list(NDJSON_HEADERS), chunks=chunks + final)


def raw_ndjson_response(
    lines: list[str], *, status: int = 200, framing: Framing = "chunked"
) -> ScriptedResponse:
    """Each string is sent as one line (a "\\n" is appended) and flushed on its own."""
    return ScriptedResponse(
        status=status,
        headers=list(NDJSON_HEADERS),
        chunks=[(line + "\n").encode() for line in lines],
        framing=framing,
    )


def raw_bytes_response(
    chunks: list[bytes], *, status: int = 200, framing: Framing = "chunked"
) -> ScriptedResponse:
    """Exactly these bytes, each piece flushed on its own."""
    return ScriptedResponse(
        status=status, headers=list(NDJSON_HEADERS), chunks=list(chunks), framing=framing
    )


def _no_script_left() -> ScriptedResponse:
    return error_response(500, message="fake server: no scripted response left")


def _plain(status: int, text: str) -> ScriptedResponse:
    return ScriptedResponse(
        status=status, headers=list(_TEXT_HEADERS), chunks=[text.encode()], framing="length"
    )


# --- strict request validation ---------------------------------------------------------------

_ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Rejection:
    """A request the strict server refused: the 400 went out, no script was consumed."""

    request_index: int  # its index in `FakeOllamaServer.requests`
    status: int
    problems: tuple[str, ...]  # the first one is the answer's "error"

    @property
    def messages(self) -> list[str]:
        return list(self.problems)

    def __str__(self) -> str:
        return f"request {self.request_index} (HTTP {self.status}): " + "; ".join(self.problems)


def _go_type(value: Any) -> str:
    """A JSON value's kind, as Go's encoding/json names it in its errors."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _unmarshal(value: Any, field: str, go_type: str) -> str:
    return (
        f"json: cannot unmarshal {_go_type(value)} into Go struct field {field} of type {go_type}"
    )


class _Validator:
    """Walks one /api/chat request body and collects what Ollama (strictly) refuses."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, message: str) -> None:
        self.problems.append(message)

    def body(self, raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            self.fail("invalid character in the request body: it is not JSON")
            return
        if not isinstance(body, dict):
            self.fail(_unmarshal(body, "", "api.ChatRequest").replace(" struct field ", " value"))
            return
        if not isinstance(body.get("model"), str) or not body["model"]:
            self.fail("model is required")
        if "stream" in body and not isinstance(body["stream"], bool):
            self.fail(_unmarshal(body["stream"], "ChatRequest.stream", "bool"))
        messages = body.get("messages")
        if not isinstance(messages, list):
            if messages is not None:
                self.fail(_unmarshal(messages, "ChatRequest.messages", "[]api.Message"))
            else:
                self.fail("messages is empty: nothing to answer")
        elif not messages:
            self.fail("messages is empty: nothing to answer")
        else:
            for i, message in enumerate(messages):
                self.message(i, message)
        self.tools(body.get("tools"))
        self.options(body.get("options"))
        think = body.get("think")
        if think is not None and not isinstance(think, bool):
            if isinstance(think, str) and think not in ("high", "medium", "low"):
                self.fail(
                    f'invalid think value: "{think}" (must be "high", "medium", "low", true, '
                    "or false)"
                )
            elif not isinstance(think, str):
                self.fail(_unmarshal(think, "ChatRequest.think", "api.ThinkValue"))

    def message(self, i: int, message: Any) -> None:
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            self.fail(_unmarshal(message, "ChatRequest.messages", "api.Message"))
            return
        role = message.get("role")
        if not isinstance(role, str) or role.lower() not in _ROLES:
            self.fail(f"{where}: role must be one of {', '.join(_ROLES)}, not {role!r}")
            return
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            self.fail(_unmarshal(content, "Message.messages.content", "string"))
        for name in ("thinking", "tool_name"):
            value = message.get(name)
            if value is not None and not isinstance(value, str):
                self.fail(_unmarshal(value, f"Message.messages.{name}", "string"))
        images = message.get("images")
        if images is not None and (
            not isinstance(images, list) or not all(isinstance(x, str) for x in images)
        ):
            self.fail(_unmarshal(images, "Message.messages.images", "[]api.ImageData"))
        else:
            for image in images or []:
                self.image(image)
        if role == "tool" and not message.get("tool_name"):
            self.fail(f"{where}: a tool message must name its tool in `tool_name`")
        calls = message.get("tool_calls")
        if calls is None:
            return
        if role != "assistant":
            self.fail(f"{where}: only assistant messages carry tool_calls")
        if not isinstance(calls, list):
            self.fail(_unmarshal(calls, "ChatRequest.messages.tool_calls", "[]api.ToolCall"))
            return
        for j, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                self.fail(f"{where}.tool_calls[{j}]: a tool call needs a function object")
                continue
            name = function.get("name")
            if not isinstance(name, str) or not name:
                self.fail(f"{where}.tool_calls[{j}].function.name is required")
            arguments = function.get("arguments")
            if arguments is not None and not isinstance(arguments, dict):
                self.fail(
                    _unmarshal(
                        arguments,
                        "ChatRequest.messages.tool_calls.function.arguments",
                        "api.ToolCallFunctionArguments",
                    )
                )

    def image(self, data: str) -> None:
        try:
            raw = base64.b64decode(data, validate=True)
        except binascii.Error:
            bad = next((i for i, c in enumerate(data) if not (c.isalnum() or c in "+/=")), 0)
            self.fail(f"illegal base64 data at input byte {bad}")
            return
        if not raw.startswith(
            (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a")
        ) and not (raw[:4] == b"RIFF" and raw[8:12] == b"WEBP"):
            self.fail("image: unknown format")

    def tools(self, tools: Any) -> None:
        if tools is None:
            return
        if not isinstance(tools, list):
            self.fail(_unmarshal(tools, "ChatRequest.tools", "api.Tools"))
            return
        for j, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(tool, dict) or tool.get("type") != "function":
                self.fail(f'tools[{j}]: type must be "function"')
            if not isinstance(function, dict):
                self.fail(f"tools[{j}]: a tool needs a function object")
                continue
            if not isinstance(function.get("name"), str) or not function["name"]:
                self.fail(f"tools[{j}].function.name is required")
            parameters = function.get("parameters")
            if parameters is None:
                continue
            if not isinstance(parameters, dict):
                self.fail(
                    _unmarshal(parameters, "Tool.tools.function.parameters", "api.ToolFunction")
                )
                continue
            properties = parameters.get("properties")
            if properties is not None and not isinstance(properties, dict):
                self.fail(
                    _unmarshal(
                        properties,
                        "ToolFunctionParameters.tools.function.parameters.properties",
                        "map[string]api.ToolProperty",
                    )
                )

    def options(self, options: Any) -> None:
        if options is None:
            return
        if not isinstance(options, dict):
            self.fail(_unmarshal(options, "ChatRequest.options", "map[string]interface {}"))
            return
        num_predict = options.get("num_predict")
        if num_predict is not None and (
            isinstance(num_predict, bool) or not isinstance(num_predict, int | float)
        ):
            self.fail('option "num_predict" must be of type integer')
        temperature = options.get("temperature")
        if temperature is not None and (
            isinstance(temperature, bool) or not isinstance(temperature, int | float)
        ):
            self.fail('option "temperature" must be of type float32')


def validate_chat_request(body: bytes) -> list[str]:
    """What a strict Ollama refuses in this /api/chat request body (empty: valid)."""
    validator = _Validator()
    validator.body(body)
    return validator.problems


# --- the server ------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each chunk leaves at once (Nagle would hold it ~40 ms)
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

    def _record(self, body: bytes) -> int:
        headers = {k.lower(): v for k, v in self.headers.items()}
        port = int(self.client_address[1])
        return self.server.owner._record(
            RecordedRequest(self.command, self.path, headers, body, port)
        )

    def _root(self) -> bool:
        return self.path.split("?")[0] in ("", "/")

    def do_GET(self) -> None:
        self._record(b"")
        if self._root():
            self._serve(_plain(200, "Ollama is running"))
        else:
            self._serve(_plain(404, "404 page not found"))

    def do_HEAD(self) -> None:
        self._record(b"")
        status = 200 if self._root() else 404
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = self._read_body()
        index = self._record(body)
        owner = self.server.owner
        if self.path.split("?")[0].rstrip("/") == "/api/chat":
            problems = validate_chat_request(body) if owner.strict else []
            if problems:
                response = error_response(400, message=problems[0])
                owner._reject(Rejection(index, response.status, tuple(problems)))
            else:
                response = owner._next() or _no_script_left()
        else:
            response = _plain(404, "404 page not found")
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

    def __init__(self, owner: FakeOllamaServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)


class FakeOllamaServer:
    """A scripted Ollama server on 127.0.0.1 (a free port), in background threads.

    `strict` (the default) refuses invalid /api/chat requests as Ollama does: see the module
    docstring for the rules, and `rejections` for what was refused.
    """

    def __init__(self, *, strict: bool = True) -> None:
        self.strict = strict
        self._lock = threading.Lock()
        self._queue: deque[ScriptedResponse] = deque()
        self._requests: list[RecordedRequest] = []
        self._rejections: list[Rejection] = []
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.client_disconnected = threading.Event()
        self.disconnects = 0
        self.base_url = ""

    # -- lifecycle --

    def start(self) -> FakeOllamaServer:
        if self._httpd is not None:
            return self
        self._httpd = _HTTPServer(self)
        port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}"
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

    def __enter__(self) -> FakeOllamaServer:
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
    def rejections(self) -> list[Rejection]:
        """The requests strict mode refused, in arrival order (empty when all were valid)."""
        with self._lock:
            return list(self._rejections)

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """The POST /api/chat requests only (health checks left out)."""
        return [r for r in self.requests if r.method == "POST"]

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

    def _record(self, request: RecordedRequest) -> int:
        with self._lock:
            self._requests.append(request)
            return len(self._requests) - 1

    def _reject(self, rejection: Rejection) -> None:
        with self._lock:
            self._rejections.append(rejection)

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
