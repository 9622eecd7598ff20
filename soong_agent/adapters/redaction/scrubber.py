"""The runtime's `SecretRedactor` (CFG-6): key values from the environment, then known patterns.

Two kinds of secret are replaced by ``[redacted:NAME]``:

- the value of every environment variable the runtime reads a key from (the `api_key_env` of
  each model profile and the providers' default key variables), NAME being the variable; values
  shorter than `min_length` are ignored (too likely to occur in ordinary text). The values are
  read from the `SecretSource` when first needed and again at most once every `refresh_s`, so a
  key set after the runtime started is covered too, and nothing is read at start;
- the high-confidence patterns of `detectors.py` (AWS keys, GitHub/GitLab/Slack/Stripe/npm/PyPI
  tokens, private key blocks, ``sk-…`` API keys, JWTs, passwords in URLs, …), NAME being the
  kind (``aws_access_key``).

Ordinary text pays for one `str.find` per known value and one regex search for the patterns'
literal anchors; a pattern itself runs only on text holding one of its anchors.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Sequence

from soong_agent.adapters.redaction.detectors import (
    DETECTORS,
    Detector,
    anchors_of,
    literal_trie,
)
from soong_agent.ports.secrets import redaction_mark
from soong_agent.ports.system import SecretSource

SHORT = 256
"""Texts shorter than this are probed with one regex of every anchor, longer ones per detector."""
CLEAN_KEPT = 512
"""At most this many short texts are remembered as holding no secret."""
MAX_HELD = 4096
"""`settled` never holds back more than this of a run of text without whitespace."""
MAX_BLOCK = 16_384
"""... nor more than this of a private key block waiting for its END line."""

_CONTEXT = re.compile("aws|AWS|uthorization|://|_authToken|Private-Lines")
"""Anchors of the patterns that recognise a secret by what precedes it on its line."""
_PEM_HEAD = r"BEGIN[ A-Z0-9]*PRIVATE KEY"
_SO_FAR = r"BEGIN[ A-Z0-9]{0,40}"
_PEM_END = r"END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)? ?-{4,5}"
# (compiled by `re`'s own cache when a text first holds "BEGIN": no compile at start)

Span = tuple[int, int, str]


class SecretScrubber:
    """Replaces key values and recognised secrets by ``[redacted:NAME]``."""

    def __init__(
        self,
        secrets: SecretSource | None = None,
        names: Iterable[str] = (),
        *,
        min_length: int = 8,
        refresh_s: float = 1.0,
        detectors: Sequence[Detector] = DETECTORS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._secrets = secrets
        self._names = tuple(sorted({n for n in names if n}))
        self._min_length = min_length
        self._refresh_s = refresh_s
        self._detectors = tuple(detectors)
        self._anchors: re.Pattern[str] | None = None  # compiled at first use
        self._by_regex = tuple(bool(d.probe_source) or len(d.anchors) == 1 for d in self._detectors)
        anchors = {a for d in self._detectors for a in d.anchors}
        self._prefixes = frozenset(a[:k] for a in anchors for k in range(1, len(a)))
        """Every proper start of an anchor: a text ending in one may go on into a secret."""
        ends: dict[str, set[int]] = {}
        for prefix in self._prefixes:
            ends.setdefault(prefix[-1], set()).add(len(prefix))
        self._prefix_ends = {c: tuple(sorted(lengths)) for c, lengths in ends.items()}
        """The lengths of the starts of anchors ending in each character: a text is checked
        against only the starts its last character could end."""
        self._monotonic = monotonic
        self._read_at = -math.inf
        self._values: tuple[tuple[str, str], ...] = ()  # (value, name), longest first
        self._quick_re: re.Pattern[str] | None = None  # any anchor or value (for short texts)
        self._clean: set[str] = set()
        """Short texts `_quick_re` found nothing in (forgotten with it, when the key values
        change): a run redacts the same ones again and again (a permission reason, the
        arguments of a repeated call, a text both an event and a message carry)."""
        self._marks: dict[str, str] = {}

    # --- the port --------------------------------------------------------------------------

    def redact(self, text: str, *, before: str = "") -> str:
        if len(text) + len(before) < SHORT:  # the common case: one regex search
            quick = self._quick_re
            if quick is None or self._monotonic() - self._read_at >= self._refresh_s:
                quick = self._quick()
            if before:
                if quick.search(before + text) is None:
                    return text
            elif text in self._clean:
                return text
            elif quick.search(text) is None:
                if len(self._clean) >= CLEAN_KEPT:
                    self._clean.clear()
                self._clean.add(text)
                return text
        if before:
            full, offset = before + text, len(before)
        else:
            full, offset = text, 0
        spans = self._spans(full)
        if not spans:
            return text
        parts: list[str] = []
        pos = offset
        for start, end, name in spans:
            if end <= pos:
                continue  # wholly in `before`: handed on already
            parts.append(full[pos : max(start, pos)])
            parts.append(self._mark(name))
            pos = end
        if pos == offset and not parts:
            return text
        parts.append(full[pos:])
        return "".join(parts)

    def settled(self, text: str, *, before: str = "") -> int:
        n = len(text)
        cut = n
        # the last run without whitespace is held when it may be a secret still being written:
        # it holds an anchor, ends with the start of one, or the line names a secret whose
        # value comes next (``Authorization: Bearer …``); ordinary words go out at once
        run_at = max(text.rfind(" "), text.rfind("\n"), text.rfind("\t"), text.rfind("\r")) + 1
        if run_at < n and self._may_begin_secret(text, run_at, before):
            cut = max(run_at, n - MAX_HELD)
        # a private key block is held until its END line
        begin = text.rfind("BEGIN", max(0, n - MAX_BLOCK))
        if begin >= 0 and begin < cut:
            tail = text[begin:]
            head = re.match(_PEM_HEAD, tail)
            open_block = head is not None and re.search(_PEM_END, tail[head.end() :]) is None
            maybe_head = head is None and "\n" not in tail and bool(re.fullmatch(_SO_FAR, tail))
            if open_block or maybe_head:
                start = begin
                while start > 0 and text[start - 1] in "- ":
                    start -= 1
                cut = min(cut, start)
        # a key value may have begun near the end
        for value, _ in self._known():
            first = value[0]
            at = text.find(first, max(0, n - len(value) + 1))
            while 0 <= at < cut:
                if value.startswith(text[at:]):
                    cut = at
                    break
                at = text.find(first, at + 1)
        return cut

    def _may_begin_secret(self, text: str, run_at: int, before: str) -> bool:
        run = text[run_at:] if run_at else text
        anchors = self._anchors
        if anchors is None:
            anchors = self._anchors = anchors_of(self._detectors)
        if anchors.search(run) is not None:
            return True
        prefixes = self._prefixes
        for k in self._prefix_ends.get(run[-1], ()):
            if k > len(run):
                break
            if run[-k:] in prefixes:
                return True
        if run_at:
            newline = text.rfind("\n", 0, run_at)
            if newline >= 0:
                return _CONTEXT.search(text, newline + 1, run_at) is not None
        if before and _CONTEXT.search(before, before.rfind("\n") + 1) is not None:
            return True
        return bool(run_at) and _CONTEXT.search(text, 0, run_at) is not None

    # --- the work --------------------------------------------------------------------------

    def _known(self) -> tuple[tuple[str, str], ...]:
        """The key values to replace, read again once `refresh_s` has passed."""
        if self._secrets is None or not self._names:
            self._read_at = math.inf  # nothing to read, ever
            return self._values
        now = self._monotonic()
        if now - self._read_at < self._refresh_s:
            return self._values
        self._read_at = now
        found: dict[str, str] = {}
        for name in self._names:
            value = self._secrets.get(name)
            if not value:
                continue
            for candidate in (value, value.strip()):
                if len(candidate) >= self._min_length:
                    found.setdefault(candidate, name)
        values = tuple(sorted(found.items(), key=lambda vn: -len(vn[0])))
        if values != self._values:
            self._values, self._quick_re = values, None
            self._clean = set()
        return self._values

    def _quick(self) -> re.Pattern[str]:
        """One regex finding any anchor or any key value: a short text it does not match
        holds no secret."""
        self._known()
        quick = self._quick_re
        if quick is None:
            literals = [a for d in self._detectors for a in d.anchors]
            literals += [v for v, _ in self._values]
            quick = self._quick_re = re.compile(literal_trie(literals))
        return quick

    def _spans(self, text: str) -> list[Span]:
        """Where the secrets of `text` are, sorted, overlapping ones merged."""
        spans: list[Span] = []
        for value, name in self._known():
            at = text.find(value)
            while at >= 0:
                spans.append((at, at + len(value), name))
                at = text.find(value, at + len(value))
        if len(text) < SHORT:
            anchors = self._anchors
            if anchors is None:
                anchors = self._anchors = anchors_of(self._detectors)
            if anchors.search(text) is not None:
                for detector in self._detectors:
                    if any(anchor in text for anchor in detector.anchors):
                        spans.extend(_matches(detector, text))
        else:  # one probe per detector: a regex with a literal prefix, or `in` per anchor
            for detector, by_regex in zip(self._detectors, self._by_regex, strict=True):
                if (
                    detector.probe.search(text) is not None
                    if by_regex
                    else any(anchor in text for anchor in detector.anchors)
                ):
                    spans.extend(_matches(detector, text))
        if len(spans) < 2:
            return spans
        spans.sort(key=lambda s: (s[0], -s[1]))  # stable: a key value wins over a pattern
        merged = [spans[0]]
        for start, end, name in spans[1:]:
            last_start, last_end, last_name = merged[-1]
            if start < last_end:
                if end > last_end:
                    merged[-1] = (last_start, end, last_name)
            else:
                merged.append((start, end, name))
        return merged

    def _mark(self, name: str) -> str:
        mark = self._marks.get(name)
        if mark is None:
            mark = self._marks[name] = redaction_mark(name)
        return mark


def _matches(detector: Detector, text: str) -> Iterable[Span]:
    for match in detector.pattern.finditer(text):
        start, end = match.span(detector.group)
        if end > start and (detector.valid is None or detector.valid(text[start:end])):
            yield start, end, detector.name
