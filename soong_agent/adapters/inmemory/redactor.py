"""A fake `SecretRedactor`: replaces the values it was given, recognises no patterns."""

from __future__ import annotations

from collections.abc import Mapping

from soong_agent.ports.secrets import redaction_mark


class DictSecretRedactor:
    """Replaces each value of `values` (name -> secret value) by ``[redacted:NAME]``.

    Like the real redactor it returns the very same string when there is nothing to replace,
    keeps `before` out of what it returns, and holds back (`settled`) the end of a growing text
    that could be the start of a value. `calls` counts the `redact` calls.
    """

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._values = sorted(
            ((v, n) for n, v in (values or {}).items() if v), key=lambda vn: -len(vn[0])
        )
        self.calls = 0

    def redact(self, text: str, *, before: str = "") -> str:
        self.calls += 1
        full, offset = (before + text, len(before)) if before else (text, 0)
        spans: list[tuple[int, int, str]] = []
        for value, name in self._values:
            at = full.find(value)
            while at >= 0:
                end = at + len(value)
                if end > offset and not any(s < end and at < e for s, e, _ in spans):
                    spans.append((max(at, offset), end, name))
                at = full.find(value, end)
        if not spans:
            return text
        spans.sort()
        parts, pos = [], offset
        for start, end, name in spans:
            parts += [full[pos:start], redaction_mark(name)]
            pos = end
        parts.append(full[pos:])
        return "".join(parts)

    def settled(self, text: str, *, before: str = "") -> int:
        cut = len(text)
        for value, _ in self._values:  # hold from where a value may have begun
            for k in range(min(len(value) - 1, len(text)), 0, -1):
                if text.endswith(value[:k]):
                    cut = min(cut, len(text) - k)
                    break
        return cut
