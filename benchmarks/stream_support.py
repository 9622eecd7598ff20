"""What the stream-parse benchmarks share: a wire stream cut into socket-sized pieces and an
httpx client that serves it from memory."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import httpx


def split_pieces(data: bytes, seed: int = 11) -> list[bytes]:
    """The stream cut into pieces of 4-16 KiB, as a socket would deliver it."""
    rng = random.Random(seed)
    pieces: list[bytes] = []
    i = 0
    while i < len(data):
        size = rng.randint(4 * 1024, 16 * 1024)
        pieces.append(data[i : i + size])
        i += size
    return pieces


class PieceStream(httpx.AsyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece


def make_client(pieces: list[bytes], content_type: str) -> httpx.AsyncClient:
    """A client whose every request is answered with `pieces`, streamed."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": content_type}, stream=PieceStream(pieces)
        )

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))
