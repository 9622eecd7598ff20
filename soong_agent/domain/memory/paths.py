"""The memory writer's path policy: the index and files directly in the three category folders.

A memory called NAME in category CAT lives at ``CAT/NAME.md`` below the memory folder; the index
is ``MEMORY.md``. Every other path is refused, with the reason: an absolute path, one that goes
up (``..``), one with more or fewer folders, an unknown folder, a file that is not ``.md``, a
name that is not 1-64 lowercase letters, digits, ``_`` or ``-`` starting with a letter or digit.
These are checks on the text of a path; that no symbolic link stands in the way is checked by
the adapter that opens the files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from soong_agent.ports.memory import MEMORY_CATEGORIES, MemoryCategory, MemoryPathRefused

INDEX_FILE = "MEMORY.md"
SUFFIX = ".md"
MAX_NAME_LENGTH = 64
NAME_RULE = (
    f"1-{MAX_NAME_LENGTH} lowercase letters, digits, '_' or '-', starting with a letter or digit"
)
_NAME = re.compile(rf"[a-z0-9][a-z0-9_-]{{0,{MAX_NAME_LENGTH - 1}}}")
TEMP_PREFIX = "."
TEMP_SUFFIX = ".tmp"
"""Temporary files of an atomic write are ``.NAME.md.<random>.tmp`` in the target folder."""


@dataclass(frozen=True, slots=True)
class MemoryPath:
    """A path the writer may touch, relative to the memory folder."""

    kind: Literal["index", "memory"]
    relative: str
    category: MemoryCategory | None = None
    name: str | None = None


INDEX_PATH = MemoryPath("index", INDEX_FILE)


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a memory's name (None: it can)."""
    if not name:
        return "the name is empty"
    if "/" in name or "\\" in name:
        return "the name holds a path separator"
    if name in (".", "..") or name.startswith("."):
        return "the name starts with '.'"
    if "\x00" in name:
        return "the name holds a NUL character"
    if name.endswith(SUFFIX):
        return f"give the name without {SUFFIX}"
    if _NAME.fullmatch(name) is None:
        return f"a name is {NAME_RULE}"
    return None


def check_name(name: str) -> str:
    """`name` when it can be a memory's name; MemoryPathRefused otherwise."""
    problem = name_problem(name)
    if problem is not None:
        raise MemoryPathRefused(name, problem)
    return name


def check_category(category: str) -> MemoryCategory:
    """`category` when it is one of the three folders; MemoryPathRefused otherwise."""
    for known in MEMORY_CATEGORIES:
        if category == known:
            return known
    raise MemoryPathRefused(category, f"the category is not one of {', '.join(MEMORY_CATEGORIES)}")


def file_name(name: str) -> str:
    """``NAME.md`` for a valid name."""
    return check_name(name) + SUFFIX


def memory_path(category: str, name: str) -> MemoryPath:
    """Where the memory `name` of `category` lives."""
    cat = check_category(category)
    return MemoryPath("memory", f"{cat}/{file_name(name)}", cat, name)


def name_of_file(filename: str) -> str | None:
    """The memory name a file in a category folder stands for (None: not a memory file)."""
    if not filename.endswith(SUFFIX):
        return None
    name = filename[: -len(SUFFIX)]
    return name if name_problem(name) is None else None


def is_temp_file(filename: str) -> bool:
    """Whether `filename` is a temporary file an interrupted atomic write left."""
    return filename.startswith(TEMP_PREFIX) and filename.endswith(TEMP_SUFFIX)


def check_path(relative: str) -> MemoryPath:
    """`relative` (to the memory folder) as a path the writer may touch; MemoryPathRefused,
    naming the reason, for every other path."""
    if not relative:
        raise MemoryPathRefused(relative, "the path is empty")
    if "\x00" in relative:
        raise MemoryPathRefused(relative, "the path holds a NUL character")
    if "\\" in relative:
        raise MemoryPathRefused(relative, "the path holds a backslash")
    if relative.startswith("/") or re.match(r"[A-Za-z]:", relative):
        raise MemoryPathRefused(relative, "the path is absolute")
    parts = relative.split("/")
    if any(part in ("..", ".") for part in parts):
        raise MemoryPathRefused(relative, "the path goes through '.' or '..'")
    if any(not part for part in parts):
        raise MemoryPathRefused(relative, "the path has an empty part")
    if parts == [INDEX_FILE]:
        return INDEX_PATH
    if len(parts) != 2:
        raise MemoryPathRefused(
            relative,
            f"only {INDEX_FILE} and files directly in "
            f"{', '.join(c + '/' for c in MEMORY_CATEGORIES)} are memory paths",
        )
    folder, filename = parts
    if folder not in MEMORY_CATEGORIES:
        raise MemoryPathRefused(
            relative, f"folder {folder!r} is not one of {', '.join(MEMORY_CATEGORIES)}"
        )
    if not filename.endswith(SUFFIX):
        raise MemoryPathRefused(relative, f"a memory file's name ends in {SUFFIX}")
    name = filename[: -len(SUFFIX)]
    problem = name_problem(name)
    if problem is not None:
        raise MemoryPathRefused(relative, problem)
    return memory_path(folder, name)
