"""Skills (SKILL-1) as the prompt and `load_skill` show them; the rules a skill file obeys.

A skill is `${SOONG_AGENT_HOME}/skills/<name>.md`, or `${SOONG_AGENT_HOME}/skills/<name>/SKILL.md`
with the other files of that folder as its resources. It starts with YAML frontmatter::

    ---
    name: pdf-forms
    description: Fill in PDF forms; use when the user asks to complete a PDF.
    ---
    # How to fill a PDF form
    ...

The rules (`check_metadata`): `name` and `description` are required strings; `name` is
lowercase letters, digits, `-` and `_` (at most 64, starting and ending with a letter or digit)
and must equal the file's name without `.md` (or the folder's name), so a skill is always
found under the name it is called by and two files cannot claim one name; `description` is at
most 1024 characters; other keys (`license`, `allowed-tools` …) are ignored. A file that breaks
a rule is skipped with a warning naming it and the reason; the others still load.

Only the catalogue (`render_catalogue`: one line per skill, within a token budget) is in the
system prompt; the body is handed out by `load_skill` (`render_loaded`).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Sequence

from soong_agent.ports.skills import Skill

__all__ = [
    "CATALOGUE_DESCRIPTION_CHARS",
    "DEFAULT_CATALOGUE_TOKENS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_NAME_CHARS",
    "Skill",
    "SkillFileError",
    "check_metadata",
    "estimate_tokens",
    "one_line",
    "render_catalogue",
    "render_loaded",
    "split_frontmatter",
    "unknown_skill_message",
]

MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
CATALOGUE_DESCRIPTION_CHARS = 250
"""A description longer than this is cut (with …) in the catalogue; `load_skill` shows all."""
DEFAULT_CATALOGUE_TOKENS = 2000
"""A catalogue budget for callers without a better one (about 200 short skills)."""

_NAME = re.compile(r"[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?")
_DELIMITER = re.compile(r"---[ \t]*")

CATALOGUE_HEADER = (
    "Skills (instructions for particular kinds of task, not loaded yet): before doing such a "
    "task, call load_skill with the skill's name to read its instructions."
)


class SkillFileError(ValueError):
    """Why a skill file cannot be used (the message is the reason shown to the user)."""


def split_frontmatter(text: str) -> tuple[str, str]:
    """The YAML text between the opening and closing `---` lines, and the body after them.

    A byte-order mark and CRLF line ends are accepted. Raises SkillFileError when the text
    does not start with a `---` line or no `---` line closes the frontmatter.
    """
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    lines = text.split("\n")
    if not lines or not _DELIMITER.fullmatch(lines[0]):
        raise SkillFileError("no frontmatter: the file must start with a '---' line")
    for index in range(1, len(lines)):
        if _DELIMITER.fullmatch(lines[index]):
            return "\n".join(lines[1:index]), "\n".join(lines[index + 1 :]).strip("\n")
    raise SkillFileError("frontmatter is not closed by a '---' line")


def check_metadata(metadata: object, *, expected_name: str) -> tuple[str, str]:
    """The (name, description) of parsed frontmatter, checked against the rules above.

    `expected_name` is the file's name without `.md`, or the skill folder's name. Raises
    SkillFileError with the reason.
    """
    if not isinstance(metadata, dict):
        found = "nothing" if metadata is None else type(metadata).__name__
        raise SkillFileError(f"frontmatter: expected keys 'name' and 'description', found {found}")
    name = metadata.get("name")
    description = metadata.get("description")
    if name is None:
        raise SkillFileError("frontmatter: 'name' is missing")
    if not isinstance(name, str):
        raise SkillFileError(f"frontmatter: 'name' must be a string, found {name!r}")
    if not _NAME.fullmatch(name):
        raise SkillFileError(
            f"frontmatter: name {name!r} is not a skill name (lowercase letters, digits, '-' "
            f"and '_', at most {MAX_NAME_CHARS}, starting and ending with a letter or digit)"
        )
    if name != expected_name:
        raise SkillFileError(
            f"frontmatter: name {name!r} differs from the file's name {expected_name!r} "
            "(they must be the same)"
        )
    if description is None:
        raise SkillFileError("frontmatter: 'description' is missing")
    if not isinstance(description, str):
        raise SkillFileError(f"frontmatter: 'description' must be a string, found {description!r}")
    description = one_line(description)
    if not description:
        raise SkillFileError("frontmatter: 'description' is empty")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise SkillFileError(
            f"frontmatter: 'description' has {len(description)} characters "
            f"(at most {MAX_DESCRIPTION_CHARS})"
        )
    return name, description


def one_line(text: str, limit: int | None = None) -> str:
    """`text` with every run of whitespace made one space; cut to `limit` characters with …"""
    flat = " ".join(text.split())
    if limit is not None and len(flat) > limit:
        return flat[: max(limit - 1, 0)].rstrip() + "…"
    return flat


def estimate_tokens(text: str) -> int:
    """About how many tokens `text` is: one per four characters, rounded up."""
    return math.ceil(len(text) / 4)


def _more(count: int) -> str:
    noun = "skill" if count == 1 else "skills"
    return (
        f"… and {count} more {noun}: call load_skill with a name to see it "
        "(an unknown name lists them all)."
    )


def render_catalogue(
    skills: Sequence[Skill],
    budget_tokens: int,
    *,
    count: Callable[[str], int] = estimate_tokens,
) -> str:
    """The skills catalogue of the system prompt: a header, then `- name: description` per
    skill in name order, within `budget_tokens` as `count` measures it.

    Skills that do not fit are left out from the end of that order and counted in a last line
    ("… and 12 more skills: call load_skill …"). Empty when there are no skills or not even the
    header and that line fit.
    """
    if not skills or budget_tokens <= 0:
        return ""
    ordered = sorted(skills, key=lambda s: s.name)
    lines = [f"- {s.name}: {one_line(s.description, CATALOGUE_DESCRIPTION_CHARS)}" for s in ordered]
    whole = "\n".join([CATALOGUE_HEADER, *lines])
    if count(whole) <= budget_tokens:
        return whole

    def listing(kept: int) -> str:
        return "\n".join([CATALOGUE_HEADER, *lines[:kept], _more(len(lines) - kept)])

    # The most lines that fit, by bisection (a longer listing never counts fewer tokens).
    if count(listing(0)) > budget_tokens:
        return ""
    low, high = 0, len(lines) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if count(listing(middle)) <= budget_tokens:
            low = middle
        else:
            high = middle - 1
    return listing(low)


def render_loaded(skill: Skill) -> str:
    """What `load_skill` returns: a header naming the skill, its source and its resource
    files (absolute paths), then the body."""
    head = [f"Skill {skill.name!r} (from {skill.source}): {skill.description}"]
    if skill.resources:
        head.append(
            f"Its resource files ({len(skill.resources)}; read one with load_skill, giving "
            f'name="{skill.name}" and resource="<path>", the path absolute or relative to '
            f"{skill.folder}):"
        )
        head += [f"- {path}" for path in skill.resources]
    return "\n".join(head) + "\n\n" + skill.body


def unknown_skill_message(name: str, known: Sequence[str]) -> str:
    """The error for a name no skill has: the closest names, then every known name."""
    if not known:
        return f"unknown skill {name!r}: no skills are installed"
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown skill {name!r}.{hint} Known skills ({len(names)}): {', '.join(names)}"
