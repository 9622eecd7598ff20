"""An incremental Server-Sent Events decoder that returns the `data` payload of each event.

Byte pieces arrive from the socket cut anywhere (even inside a UTF-8 character); each piece is
decoded once with an incremental UTF-8 decoder, then split into lines. Only the `data` field
is kept; comments (`:` lines) and other fields (`event`, `id`, `retry`) are skipped. Lines may end
with LF, CRLF or CR, and an event may carry several `data` lines (joined with LF, as the SSE
spec says). An invalid UTF-8 byte becomes U+FFFD rather than an error, and a byte order mark
at the start of the stream is skipped (the SSE spec says so; a server that sends one would
otherwise lose its first event). An event whose data grows past `MAX_PAYLOAD_CHARS` raises
`OversizedPayload` before more of it is kept.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncGenerator, AsyncIterable

from soong_agent.adapters.providers.payloads import MAX_PAYLOAD_CHARS, PayloadError

_LF = "\n"
_CR = "\r"


class OversizedPayload(PayloadError):
    """An event (or line) longer than the limit."""

    def __init__(self, what: str = "event") -> None:
        super().__init__(
            f"an {what} of the stream is longer than {MAX_PAYLOAD_CHARS // (1024 * 1024)} MiB "
            f"(the limit of one {what})"
        )


class SSEDecoder:
    """Feed it byte pieces in order; it returns the payloads of the events they complete."""

    __slots__ = ("_data", "_data_size", "_decode", "_partial", "_partial_size", "_skip_lf")

    def __init__(self) -> None:
        # utf-8-sig: a byte order mark at the start is dropped, even split across pieces
        self._decode = codecs.getincrementaldecoder("utf-8-sig")("replace").decode
        self._partial: list[str] = []  # text of an unfinished line
        self._partial_size = 0
        self._data: list[str] = []  # data lines of the event being built
        self._data_size = 0  # their size, when the event is still open after a piece
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
                self._partial_size += len(text)
                if self._partial_size > MAX_PAYLOAD_CHARS:
                    raise OversizedPayload()
            return []
        lines = text.split(_LF)
        if self._partial:
            self._partial.append(lines[0])
            lines[0] = "".join(self._partial)
            self._partial.clear()
            if len(lines[0]) > MAX_PAYLOAD_CHARS:
                raise OversizedPayload()
        tail = lines.pop()
        self._partial_size = len(tail)
        if tail:
            self._partial.append(tail)

        out: list[str] = []
        data = self._data
        open_before = len(data)
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
        if data or len(text) > MAX_PAYLOAD_CHARS or self._partial_size > MAX_PAYLOAD_CHARS:
            self._check_size(out, open_before)
        return out

    def _check_size(self, out: list[str], open_before: int) -> None:
        """Raise `OversizedPayload` for an event over the limit: one completed by this piece,
        the one still open (its data lines so far), or the unfinished line."""
        if self._partial_size > MAX_PAYLOAD_CHARS:
            raise OversizedPayload()
        if any(len(payload) > MAX_PAYLOAD_CHARS for payload in out):
            raise OversizedPayload()
        data = self._data
        if not data:
            self._data_size = 0
            return
        # the lines added by this piece: all of them when an event was completed in it
        carried = bool(open_before) and not out  # the event was open before this piece too
        new = data[open_before:] if carried else data
        size = (self._data_size if carried else 0) + sum(map(len, new)) + len(new)
        if size > MAX_PAYLOAD_CHARS:
            raise OversizedPayload()
        self._data_size = size

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
