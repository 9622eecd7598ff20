"""`MEMORY.md`: the index of the memory folder, one line per memory, made from the files.

The index never holds anything the files do not: it is rebuilt from them after every write and
whenever it does not match them (a crash between writing a file and the index), so the same
files always give the same index, byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable

from soong_agent.ports.memory import MEMORY_CATEGORIES, MemoryEntry

INDEX_TITLE = "# Memory Index"
INDEX_NOTE = (
    "<!-- Written by soong-agent from the files below user/, feedback/ and reference/; "
    "edits here are lost. -->"
)


def one_line(text: str) -> str:
    """`text` on one line: runs of whitespace (newlines included) become one space."""
    return " ".join(text.split())


def index_line(entry: MemoryEntry) -> str:
    """``- NAME: DESCRIPTION [CATEGORY](PATH)``."""
    return f"- {entry.name}: {one_line(entry.description)} [{entry.category}]({entry.path})"


def render_index(entries: Iterable[MemoryEntry]) -> str:
    """The whole `MEMORY.md` for these memories: by category (user, feedback, reference),
    then name."""
    order = {category: i for i, category in enumerate(MEMORY_CATEGORIES)}
    ranked = sorted(entries, key=lambda e: (order[e.category], e.name))
    lines = [INDEX_TITLE, "", INDEX_NOTE, ""]
    lines += [index_line(entry) for entry in ranked] or ["(no memories yet)"]
    return "\n".join(lines) + "\n"
