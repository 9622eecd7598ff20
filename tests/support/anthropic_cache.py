"""The Anthropic prompt cache, modelled as Anthropic documents it, for the strict fake server.

A request is a sequence of blocks in the order the API caches them: every tool, then the
system blocks, then each message's content blocks. A block carrying `cache_control` is a
breakpoint. What the API does with them, and what this model does:

- writes happen only at breakpoints: the prefix up to and including a breakpoint block is
  cached, when it holds at least `min_tokens` tokens (1024 for Claude Sonnet and Opus; a
  shorter prefix is silently not cached);
- a read is the longest cached prefix that ends at a breakpoint, or at a block boundary up to
  `lookback` (about 20) blocks before a breakpoint (the API's automatic prefix check);
- the usage then reports `cache_read_input_tokens` (the prefix read),
  `cache_creation_input_tokens` (from there to the last breakpoint, when that prefix is long
  enough to be written) and `input_tokens` (the rest, after the last breakpoint);
- a prefix matches only byte for byte: the same model, the same blocks in the same order;
  `cache_control` itself is not part of what is compared (moving a breakpoint does not change
  the content before it).

Tokens are counted as the API's tokenizer would roughly count them: a quarter of the block's
compact JSON (without `cache_control`), and 1,600 tokens an image (about a 1.2-megapixel
picture, width x height / 750). Entries never expire here (no clock: the 5-minute TTL, which
each read refreshes, does not lapse within a scripted session).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

IMAGE_TOKENS = 1_600
DEFAULT_MIN_TOKENS = 1_024
DEFAULT_LOOKBACK = 20


@dataclass(frozen=True)
class CacheUsage:
    """The three input counts of one answer's usage."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def _images(value: Any) -> int:
    if isinstance(value, dict):
        own = 1 if value.get("type") == "image" else 0
        return own + sum(_images(v) for k, v in value.items() if k != "source")
    if isinstance(value, list):
        return sum(_images(v) for v in value)
    return 0


def _strip_image_data(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get("type") == "image":
            return {k: v for k, v in value.items() if k != "source"} | {"source": "<image>"}
        return {k: _strip_image_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_image_data(v) for v in value]
    return value


def block_tokens(block: Any) -> int:
    """The tokens one block costs (see the module doc)."""
    text = json.dumps(_strip_image_data(_without_cache_control(block)), separators=(",", ":"))
    return (len(text) + 3) // 4 + IMAGE_TOKENS * _images(block)


def _blocks(body: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(where, block) of every block in cache order: tools, system, messages."""
    for tool in body.get("tools") or []:
        yield "tool", tool
    system = body.get("system")
    if isinstance(system, str):
        yield "system", {"type": "text", "text": system}
    else:
        for block in system or []:
            yield "system", block
    for n, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for m, block in enumerate(content or []):
            yield f"{n}:{message.get('role')}:{m}", block


class PromptCache:
    """What one fake server has cached, across its requests (thread-safe)."""

    def __init__(
        self, *, min_tokens: int = DEFAULT_MIN_TOKENS, lookback: int = DEFAULT_LOOKBACK
    ) -> None:
        self.min_tokens = min_tokens
        self.lookback = lookback
        self._written: set[str] = set()
        self._lock = threading.Lock()

    def usage(self, body: dict[str, Any]) -> CacheUsage:
        """Read and write the cache for this request; the usage the answer reports."""
        digest = hashlib.sha256(str(body.get("model")).encode())
        keys: list[str] = []
        totals: list[int] = []
        marks: list[int] = []
        total = 0
        for index, (where, block) in enumerate(_blocks(body)):
            canonical = json.dumps(
                _without_cache_control(block), sort_keys=True, separators=(",", ":")
            )
            digest.update(f"\x00{where.split(':', 1)[-1]}\x00{canonical}".encode())
            keys.append(digest.hexdigest())
            total += block_tokens(block)
            totals.append(total)
            if isinstance(block, dict) and block.get("cache_control") is not None:
                marks.append(index)
        if not marks:
            return CacheUsage(total, 0, 0)
        with self._lock:
            hit = -1
            for mark in marks:
                for at in range(mark, max(-1, mark - self.lookback - 1), -1):
                    if keys[at] in self._written:
                        hit = max(hit, at)
                        break
            read = totals[hit] if hit >= 0 else 0
            last = marks[-1]
            written = totals[last] >= self.min_tokens and last > hit
            creation = totals[last] - read if written else 0
            for mark in marks:
                if totals[mark] >= self.min_tokens:
                    self._written.add(keys[mark])
        return CacheUsage(total - read - creation, creation, read)
