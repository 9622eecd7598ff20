"""A response body of `HttpxWebFetcher` read in bounds (SBX-2): streamed and cut at
``max_bytes`` after decompression, which is itself bounded per chunk."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import httpx

from soong_agent.ports.errors import ToolInputError


@dataclass(frozen=True, slots=True)
class Body:
    data: bytes
    truncated: bool
    unsupported: str | None = None  # a content-encoding that was not decoded


class Inflater:
    """Bounded gzip/deflate decoding: never produces more than asked for per call."""

    def __init__(self, encoding: str) -> None:
        self._encoding = encoding
        self._raw_deflate_tried = False
        wbits = zlib.MAX_WBITS | 16 if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self._z = zlib.decompressobj(wbits)
        self._started = False

    def feed(self, chunk: bytes, limit: int) -> bytes:
        try:
            out = self._z.decompress(chunk, limit)
        except zlib.error:
            if self._encoding != "deflate" or self._started or self._raw_deflate_tried:
                raise
            self._raw_deflate_tried = True  # "deflate" without the zlib wrapper
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._z.decompress(chunk, limit)
        self._started = True
        return out

    def rest(self, limit: int) -> bytes:
        return self._z.decompress(self._z.unconsumed_tail, limit) + self._z.flush()


async def read_body(response: httpx.Response, max_bytes: int, host: str) -> Body:
    encoding = response.headers.get("content-encoding", "").strip().lower()
    inflater: Inflater | None = None
    unsupported: str | None = None
    if encoding in ("gzip", "x-gzip", "deflate"):
        inflater = Inflater(encoding)
    elif encoding not in ("", "identity"):
        unsupported = encoding
    parts: list[bytes] = []
    size = 0
    truncated = False
    try:
        async for raw in response.aiter_raw():
            room = max_bytes - size
            data = raw if inflater is None else inflater.feed(raw, room + 1)
            if len(data) > room:
                parts.append(data[:room])
                size = max_bytes
                truncated = True
                break
            parts.append(data)
            size += len(data)
        if inflater is not None and not truncated:
            tail = inflater.rest(max_bytes - size + 1)
            truncated = len(tail) > max_bytes - size
            parts.append(tail[: max_bytes - size])
    except zlib.error as exc:
        raise ToolInputError(
            f"the {encoding} body from {host} could not be decoded: {exc}"
        ) from None
    return Body(b"".join(parts), truncated, unsupported)
