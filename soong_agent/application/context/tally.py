"""Token accounting of one run's active path (CTX-4): every message is counted once, when it
is first measured; a run that stays small never loads the tokenizer (the UTF-8 size of a text
bounds its token count), so short runs start fast; near the compaction trigger both parts are
counted exactly before anything is decided."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from soong_agent.application.context.summarizer import message_text
from soong_agent.domain import compaction as cp
from soong_agent.domain.budget import ContextBudget
from soong_agent.domain.token_estimate import ProviderCalibration
from soong_agent.ports.errors import ConfigError
from soong_agent.ports.messages import Message
from soong_agent.ports.system import TokenCounter
from soong_agent.ports.text import safe_text

__all__ = ["BACKGROUND_AT", "MESSAGE_OVERHEAD", "WARM_UP_AT", "Measure", "TokenTally"]

MESSAGE_OVERHEAD = 4
BACKGROUND_AT = 0.8
WARM_UP_AT = 0.4


@dataclass(slots=True)
class Measure:
    """The size of the context the next request would send (never changed once made; not
    frozen, as one is made every turn)."""

    system_tokens: int
    non_system_tokens: int
    exact: bool


class TokenTally:
    """The token counts of one run's active path and system prompt, and the budget fitted to
    them (`ContextWindow` adds the compaction ladder)."""

    def __init__(
        self,
        *,
        counter: TokenCounter | None,
        budget: ContextBudget,
        calibration: ProviderCalibration,
        system_text: str,
    ) -> None:
        self._base = budget
        self.budget = budget  # `_base` fitted to the system prompt's measured size
        self._fitted_budget: tuple[int, ContextBudget] | None = None  # see `_fitted`
        self._counter = counter
        self.calibration = calibration
        self._system_text = system_text
        self._system_bytes: int | None = None  # its UTF-8 size, measured once
        self._system_o200k: int | None = None
        self._ids: list[str] = []
        self._o200k: dict[str, int] = {}
        self._text_len: dict[str, int] = {}  # to notice a copy whose content changed (stubs)
        self._size: dict[str, int] = {}
        self._known = 0
        self._unknown_bytes = 0
        self._unknown: list[Message] = []
        self._warming = False

    # --- accounting -------------------------------------------------------------------------
    def _loaded(self) -> bool:
        return self._counter is not None and self._counter.loaded

    def _warm_up(self) -> None:
        """Start loading the tokenizer in the background, once the context is big enough that
        an exact count may soon matter (a short run never pays for loading it)."""
        if self._warming or self._loaded():
            return
        self._warming = True
        if self._counter is not None:
            self._counter.warm_up()

    def _count(self, text: str) -> int:
        if self._counter is None:
            return cp.approx_tokens(text)
        try:
            return self._counter.count(text)
        except UnicodeError:  # a lone surrogate that came past the run's boundaries
            return self._counter.count(safe_text(text))

    def _sync(self, history: Sequence[Message], loaded: bool | None = None) -> None:
        """Take in the messages added since the last call (`loaded`: whether the tokenizer is,
        when the caller knows)."""
        if len(self._ids) > len(history) or (
            self._ids and self._ids[-1] != history[len(self._ids) - 1].id
        ):
            self.reset(history)
            return
        known = self._o200k
        if loaded is None:
            loaded = self._loaded()
        for message in history[len(self._ids) :]:
            mid = message.id
            self._ids.append(mid)
            tokens = known.get(mid)
            if tokens is not None:
                self._known += tokens
                continue
            text = message_text(message)
            if loaded:
                tokens = known[mid] = self._count(text) + MESSAGE_OVERHEAD
                self._text_len[mid] = len(text)
                self._known += tokens
            else:  # its UTF-8 size (an ASCII text's is its length: nothing to encode)
                size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
                size += MESSAGE_OVERHEAD
                self._size[mid] = size
                self._unknown_bytes += size
                self._unknown.append(message)

    def _count_unknown(self) -> None:
        for message in self._unknown:
            text = message_text(message)
            tokens = self._count(text) + MESSAGE_OVERHEAD
            self._o200k[message.id] = tokens
            self._text_len[message.id] = len(text)
            self._known += tokens
            self._unknown_bytes -= self._size.pop(message.id, 0)
        self._unknown = []

    def reset(self, history: Sequence[Message]) -> None:
        """Forget the tally and measure `history` afresh (after a compaction)."""
        self._ids, self._known, self._unknown_bytes, self._unknown = [], 0, 0, []
        self._size = {}
        self._sync(history)

    def _estimate(self, o200k: int) -> int:
        return math.ceil(o200k * self.calibration.factor)

    def set_system_text(self, text: str) -> None:
        """The system prompt changed between model calls (tools joined, an instruction file
        loaded): measure the new one from now on."""
        if text != self._system_text:
            self._system_text = text
            self._system_o200k = None
            self._system_bytes = None

    def system_tokens(self, loaded: bool | None = None) -> int:
        if self._system_o200k is None:
            if not (self._loaded() if loaded is None else loaded):
                kept = self._remembered(self._system_text)
                if kept is not None:  # an earlier process counted this very prompt
                    self._system_o200k = kept
                    return self._estimate(kept)
                if self._system_bytes is None:
                    self._system_bytes = len(self._system_text.encode("utf-8", "surrogatepass"))
                return self._estimate(self._system_bytes)
            self._system_o200k = self._count(self._system_text)
        return self._estimate(self._system_o200k)

    def _remembered(self, text: str) -> int | None:
        counter = self._counter
        if counter is None or self._system_bytes is not None:  # (looked for once)
            return None
        try:
            return counter.remembered(text)
        except UnicodeError:  # a lone surrogate that came past the run's boundaries
            return counter.remembered(safe_text(text))

    def measure(self, history: Sequence[Message], *, exact: bool = False) -> Measure:
        """Tokens of the system part and of the messages; exact once it could matter.

        Before the tokenizer is loaded, sizes are upper bounds (UTF-8 bytes). When the bounds
        come near the compaction trigger, or leave the window no room, both parts are counted
        exactly before anything is decided, so a context that fits is never compacted.
        Raises ConfigError when the measured system prompt leaves the window no room.
        """
        loaded = self._loaded()  # (asked once: it turns True when a background load ends)
        self._sync(history, loaded)
        system = self.system_tokens(loaded)
        non_system = self._estimate(self._known + self._unknown_bytes)
        inexact = bool(self._unknown) or self._system_o200k is None
        if inexact and (exact or self._could_matter(system, non_system)):
            self._count_unknown()
            self._system_o200k = self._count(self._system_text)
            system = self.system_tokens()
            non_system = self._estimate(self._known + self._unknown_bytes)
        try:
            self.budget = self._fitted(system)
        except ValueError as exc:
            raise ConfigError(f"context budget of the model: {exc}") from exc
        return Measure(system, non_system, not self._unknown)

    def _fitted(self, system: int) -> ContextBudget:
        """`_base` fitted to a system part of `system` tokens (ValueError: no room left); the
        last one is kept, as the system part keeps its size for most turns."""
        fitted = self._fitted_budget
        if fitted is None or fitted[0] != system:
            fitted = self._fitted_budget = (system, self._base.with_system(system))
        return fitted[1]

    def _could_matter(self, system: int, bound: int) -> bool:
        """Whether the upper bounds (`system` and `bound` tokens) come near the trigger (or
        leave no room at all); past `WARM_UP_AT` of it the tokenizer starts loading in the
        background."""
        try:
            budget = self._fitted(system)
        except ValueError:
            return True
        if bound > budget.compact_trigger * WARM_UP_AT:
            self._warm_up()
        return bound > budget.compact_trigger * BACKGROUND_AT

    def count_text(self, text: str) -> int | None:
        """The estimated tokens of `text` once the tokenizer is loaded (None before: loading it
        just for this would cost more than it tells)."""
        if not self._loaded():
            return None
        return self._estimate(self._count(text))

    def o200k_of(self, history: Sequence[Message]) -> int | None:
        """The exact o200k count of a request's messages and system part, when known."""
        if self._system_o200k is None:  # not counted exactly (the tokenizer was not needed)
            return None
        self._sync(history)
        if self._unknown or self._system_o200k is None:
            return None
        return self._known + self._system_o200k

    def recalibrate(self, *, estimated_o200k: int | None, reported: int) -> None:
        """Move the provider factor toward what the provider reported for a request."""
        if estimated_o200k:
            self.calibration = self.calibration.recalibrated(
                estimated_o200k=estimated_o200k, reported=reported
            )

    def _tokens(self, messages: Sequence[Message]) -> list[int]:
        """Estimates per message; a micro-compacted copy keeps its id, so its text is checked."""
        out = []
        for message in messages:
            text = message_text(message)
            known = self._o200k.get(message.id)
            if known is None or self._text_len.get(message.id) != len(text):
                known = self._count(text) + MESSAGE_OVERHEAD
            out.append(self._estimate(known))
        return out
