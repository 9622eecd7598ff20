"""The secret redactor port (CFG-6): no secret value leaves the process in what is stored or shown.

The runtime hands every text it is about to store (messages, events, artifacts, session titles)
or print through one `SecretRedactor`, which replaces each secret by ``[redacted:NAME]``: NAME is
the environment variable a value came from (``[redacted:OPENAI_API_KEY]``), or the kind of
secret a pattern recognised (``[redacted:aws_access_key]``). The conversation held in memory is
not changed: the model still reads what a tool returned.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

REDACTED = "[redacted:{name}]"
"""How a secret is written instead of its value."""


def redaction_mark(name: str) -> str:
    """``[redacted:NAME]``."""
    return REDACTED.format(name=name)


@runtime_checkable
class SecretRedactor(Protocol):
    """Replaces secret values in text by ``[redacted:NAME]``; cheap for text holding none."""

    def redact(self, text: str, *, before: str = "") -> str:
        """`text` with every secret in it replaced.

        `before` is the text that came right before `text` in the same stream (a line being
        streamed in pieces): it is not returned, but a secret recognised only by what precedes
        it (``aws_secret_access_key = "…"``) is found when that context is in `before`.
        """
        ...

    def settled(self, text: str, *, before: str = "") -> int:
        """For a text that is still growing (streamed deltas): how many of its leading
        characters can be redacted and handed on now, because no text still to come can make
        them part of a secret. The caller holds the rest back until more text arrives or the
        stream ends (then it redacts all of it). `before` is the text already handed on, as
        for `redact`. Ordinary text should be settled whole, so that a stream is not cut into
        more pieces than it came in."""
        ...
