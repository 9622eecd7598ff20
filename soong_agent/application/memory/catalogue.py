"""The memory catalogue as a model reads it: one line per memory, within a token budget.

Recall and extraction both show it to their model. When the whole catalogue does not fit its
budget, it is listed most relevant first (BM25 against the message, then the most recently
updated), and a last line counts the memories left out. Tokens are estimated at four
characters each: no tokenizer is loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from soong_agent.application.memory.lexical import lexical_order
from soong_agent.domain.skills import estimate_tokens, one_line
from soong_agent.ports.memory import MemoryEntry

CATALOGUE_DESCRIPTION_CHARS = 160
"""A description longer than this is cut in the catalogue."""
CATALOGUE_HEADER = "Memory catalogue (name [category]: description):"


def catalogue_line(entry: MemoryEntry) -> str:
    return (
        f"- {entry.name} [{entry.category}]: "
        f"{one_line(entry.description, CATALOGUE_DESCRIPTION_CHARS)}"
    )


def render_catalogue(
    entries: Sequence[MemoryEntry],
    budget_tokens: int,
    *,
    query: str = "",
    relevance: Callable[[], list[int]] | None = None,
) -> tuple[str, int]:
    """The catalogue within `budget_tokens`, and how many memories it lists.

    All of them in the store's order when they fit; else the most relevant to `query` first
    (BM25, then the most recently updated) as many as fit, and a line counting the others.
    `relevance` gives that order when the caller has it (`lexical_order(entries, query)`).
    """
    if not entries or budget_tokens <= 0:
        return "", 0
    lines = [catalogue_line(e) for e in entries]
    whole = "\n".join([CATALOGUE_HEADER, *lines])
    if estimate_tokens(whole) <= budget_tokens:
        return whole, len(entries)
    relevant = relevance() if relevance is not None else lexical_order(entries, query)
    seen = set(relevant)
    rest = sorted(
        (i for i in range(len(entries)) if i not in seen),
        key=lambda i: -entries[i].updated.timestamp(),
    )
    budget_chars = budget_tokens * 4
    footer_room = len("\n(… and 00000 more memories, not listed)")
    used = len(CATALOGUE_HEADER)
    kept: list[str] = []
    for i in [*relevant, *rest]:
        cost = len(lines[i]) + 1
        if used + cost + footer_room > budget_chars:
            break
        kept.append(lines[i])
        used += cost
    left = len(entries) - len(kept)
    return "\n".join([CATALOGUE_HEADER, *kept, f"(… and {left} more memories, not listed)"]), len(
        kept
    )
