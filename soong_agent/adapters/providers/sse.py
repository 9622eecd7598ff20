"""An incremental Server-Sent Events decoder that returns the `data` payload of each event.

Byte pieces arrive from the socket cut anywhere (even inside a UTF-8 character); each piece is
decoded once with an incremental UTF-8 decoder, then split into lines. Only the `data` field
is kept; comments (`:` lines) and other fields (`event`, `id`, `retry`) are skipped. Lines may end
with LF, CRLF or CR, and an event may carry several `data` lines (joined with LF, as the SSE
spec says). An invalid UTF-8 byte becomes U+FFFD rather than an error.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncGenerator, AsyncIterable

_LF = "\n"
_CR = "\r"


class SSEDecoder:
    """Feed it byte pieces in order; it returns the payloads of the events they complete."""

    __slots__ = ("_data", "_decode", "_partial", "_skip_lf")

    def __init__(self) -> None:
        self._decode = codecs.getincrementaldecoder("utf-8")("replace").decode
        self._partial: list[str] = []  # text of an unfinished line
        self._data: list[str] = []  # data lines of the event being built
        self._skip_lf = False  # the previous piece ended with CR: a leading LF belongs to it

    def feed(self, piece: bytes) -> list[str]:
        """Decode one piece; return the payloads of the events it completed (often none)."""
        return self._feed_text(self._decode(piece))

    def flush(self) -> list[str]:
        """End of stream: return the last event even if its closing blank line never came."""
        out = self._feed_text(self._decode(b"", True))
        if self._partial:
            out += self._feed_text(_LF)
        if self._data:
            data = self._data
            out.append(data[0] if len(data) == 1 else _LF.join(data))
            data.clear()
        return out

    def _feed_text(self, text: str) -> list[str]:
        if not text:
            return []
        if _CR in text:
            text = self._normalise_cr(text)
        elif self._skip_lf:
            self._skip_lf = False
            if text[0] == _LF:
                text = text[1:]
        if _LF not in text:
            if text:
                self._partial.append(text)
            return []
        lines = text.split(_LF)
        if self._partial:
            self._partial.append(lines[0])
            lines[0] = "".join(self._partial)
            self._partial.clear()
        tail = lines.pop()
        if tail:
            self._partial.append(tail)

        out: list[str] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    out.append(data[0] if len(data) == 1 else _LF.join(data))
                    data.clear()
            elif line.startswith("data:"):
                data.append(line[6:] if line[5:6] == " " else line[5:])
            elif line == "data":
                data.append("")
            # anything else: a comment or a field we do not use
        return out

    def _normalise_cr(self, text: str) -> str:
        if self._skip_lf and text[0] == _LF:
            text = text[1:]
        self._skip_lf = text.endswith(_CR)
        return text.replace("\r\n", _LF).replace(_CR, _LF)


async def payload_batches(pieces: AsyncIterable[bytes]) -> AsyncGenerator[list[str], None]:
    """The `data` payloads of an SSE body, in batches: one per byte piece that ends events."""
    decoder = SSEDecoder()
    feed = decoder.feed
    async for piece in pieces:
        batch = feed(piece)
        if batch:
            yield batch
    batch = decoder.flush()
    if batch:
        yield batch
