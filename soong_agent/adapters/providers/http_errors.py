"""Turn HTTP statuses, error bodies and httpx exceptions into classified `ProviderError`s.

Everything here builds one-line messages that carry the server's own words when it sent any,
and scrubs the API key out of them in case a server echoes it back.
"""

from __future__ import annotations

import errno
import json
import math
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from soong_agent.adapters.providers.payloads import PayloadError, parse_json
from soong_agent.ports.errors import ProviderError, ProviderErrorKind
from soong_agent.ports.text import safe_text

MAX_MESSAGE_CHARS = 300

_CONTEXT_PHRASES = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "too many tokens",
    "too long",
    "context limit",
)
_AUTH_MARKERS = ("authentication", "invalid_api_key", "unauthorized", "permission")
_RATE_MARKERS = ("rate_limit", "rate limit", "too many requests")


class ErrorContext:
    """Who is talking to whom, so the errors can say it; holds the key only to scrub it."""

    __slots__ = ("base_url", "provider", "secret")

    def __init__(self, *, provider: str, base_url: str, secret: str | None = None) -> None:
        self.provider = provider
        self.base_url = base_url
        self.secret = secret

    def error(
        self,
        kind: ProviderErrorKind,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        unreachable: bool = False,
        should_retry: bool | None = None,
    ) -> ProviderError:
        return ProviderError(
            self.clean(message),
            kind=kind,
            provider=self.provider,
            base_url=self.base_url,
            status=status,
            retry_after=retry_after,
            unreachable=unreachable,
            should_retry=should_retry,
        )

    def clean(self, text: str) -> str:
        """One line, at most MAX_MESSAGE_CHARS characters, without the API key (nor a lone
        surrogate, which no terminal or database could take)."""
        if self.secret and len(self.secret) >= 4:
            text = text.replace(self.secret, "***")
        text = " ".join(safe_text(text).split())
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[: MAX_MESSAGE_CHARS - 1] + "…"
        return text


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `retry-after` (seconds or an HTTP-date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            value = float(raw_ms) / 1000.0
        except ValueError:
            value = -1.0
        if math.isfinite(value) and value >= 0:
            return value
    raw = headers.get("retry-after")
    if not raw:
        return None
    raw = raw.strip()
    try:
        value = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        now = time.time() if now is None else now
        return max(0.0, when.timestamp() - now)
    if not math.isfinite(value) or value < 0:
        return None
    return value


def parse_should_retry(headers: Mapping[str, str]) -> bool | None:
    """The server's verdict in `x-should-retry`, as the official OpenAI and Anthropic SDKs read
    it (`_should_retry` in their `_base_client.py`): exactly ``true`` retries whatever the
    status, exactly ``false`` never does, anything else (or no header) leaves it to the status.
    """
    value = headers.get("x-should-retry")
    if value == "true":
        return True
    if value == "false":
        return False
    return None


def _error_fields(body: Any) -> tuple[str, str, str | int | None]:
    """(message, type, code) from the usual error body shapes."""
    if not isinstance(body, dict):
        return "", "", None
    err = body.get("error", body)
    if isinstance(err, str):
        return err, "", None
    if not isinstance(err, dict):
        return "", "", None
    message = err.get("message") or err.get("detail") or body.get("message") or ""
    if not isinstance(message, str):
        message = json.dumps(message)
    type_ = err.get("type") or ""
    code = err.get("code")
    if code is not None and type(code) is not str and not _http_status(code):
        code = str(code)  # a boolean, a number that is no HTTP status, a list...
    return message, str(type_), code


def _http_status(code: Any) -> bool:
    return type(code) is int and 100 <= code <= 599


def _mentions(haystack: str, needles: tuple[str, ...]) -> bool:
    return any(n in haystack for n in needles)


def mentions_context_overflow(message: str) -> bool:
    """Whether an error message says the prompt does not fit the model's context window."""
    return _mentions(message.lower(), _CONTEXT_PHRASES)


def classify(
    status: int | None, message: str, type_: str, code: str | int | None
) -> ProviderErrorKind:
    """The kind of an error from its HTTP status and the error object's fields."""
    if isinstance(code, int) and status is None:
        status, code = code, None
    text = f"{type_} {code or ''} {message}".lower()
    if status == 529 or "overloaded" in text:
        return "overloaded"
    if status is not None:
        if status in (401, 403):
            return "auth"
        if status == 429:
            return "bad_request" if "insufficient_quota" in text else "rate_limit"
        if status == 408:
            return "timeout"
        if status == 404:
            return "not_found"
        if status in (400, 413, 422) and _mentions(text, _CONTEXT_PHRASES):
            return "context_too_long"
        if status == 409 or status >= 500:
            return "server"
        if 400 <= status < 500:
            return "bad_request"
        return "server"
    # No status: an error object inside a stream.
    if _mentions(text, ("context_length_exceeded", "context length", "maximum context")):
        return "context_too_long"
    if _mentions(text, _AUTH_MARKERS):
        return "auth"
    if _mentions(text, _RATE_MARKERS):
        return "rate_limit"
    if "timeout" in text or "timed out" in text:
        return "timeout"
    if _mentions(text, ("invalid_request", "bad_request", "invalid request")):
        return "bad_request"
    return "server"


def error_from_response(
    ctx: ErrorContext, status: int, headers: Mapping[str, str], body: bytes
) -> ProviderError:
    """A ProviderError for an HTTP error response whose body has been read."""
    message, type_, code = "", "", None
    try:
        parsed = parse_json(body.decode("utf-8", "replace").lstrip("\ufeff")) if body else None
    except PayloadError:
        parsed = None
    if parsed is not None:
        message, type_, code = _error_fields(parsed)
    if not message:
        message = body[:1000].decode("utf-8", "replace").strip() or "(empty body)"
    kind = classify(status, message, type_, code)
    if code and isinstance(code, str) and code not in message:
        message = f"{message} [{code}]"
    return ctx.error(
        kind,
        message,
        status=status,
        retry_after=parse_retry_after(headers),
        should_retry=parse_should_retry(headers),
    )


def error_from_chunk(ctx: ErrorContext, error: Any) -> ProviderError:
    """A ProviderError for an `error` object that arrived inside the event stream."""
    message, type_, code = _error_fields({"error": error})
    status = code if isinstance(code, int) else None
    kind = classify(status, message, type_, None if status is not None else code)
    label = " ".join(p for p in (type_, code if isinstance(code, str) else "") if p)
    text = message or json.dumps(error)[:MAX_MESSAGE_CHARS]
    return ctx.error(kind, f"error in stream: {text}" + (f" [{label}]" if label else ""))


def error_from_httpx(ctx: ErrorContext, exc: httpx.HTTPError) -> ProviderError:
    """A ProviderError for an exception httpx raised while connecting or reading."""
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        phase = "connect" if isinstance(exc, httpx.ConnectTimeout) else "response"
        return ctx.error("timeout", f"{phase} timed out: {detail}")
    if isinstance(exc, httpx.ConnectError):
        root = _root_os_error(exc)
        if root is not None and root.strerror and root.strerror not in detail:
            detail = f"{detail} ({root.strerror})"
        refused = root is not None and root.errno == errno.ECONNREFUSED
        return ctx.error("transport", f"cannot connect: {detail}", unreachable=refused)
    if isinstance(exc, httpx.UnsupportedProtocol):
        return ctx.error("bad_request", f"invalid base_url: {detail}")
    if isinstance(exc, httpx.DecodingError):
        return ctx.error("protocol", f"cannot decode the response: {detail}")
    if isinstance(exc, httpx.TransportError):
        return ctx.error("transport", f"connection lost: {detail}")
    return ctx.error("transport", f"{type(exc).__name__}: {detail}")


def connection_refused(exc: BaseException) -> bool:
    """Whether `exc` (an httpx ConnectError) was caused by a refused TCP connection."""
    root = _root_os_error(exc)
    return root is not None and root.errno == errno.ECONNREFUSED


def _root_os_error(exc: BaseException) -> OSError | None:
    """The innermost OSError with an errno behind `exc` (e.g. ConnectionRefusedError)."""
    found: OSError | None = None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno is not None:
            found = current
        current = current.__cause__ or current.__context__
    return found
