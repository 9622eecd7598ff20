"""Skills (SKILL-1): instructions for kinds of task, read from the home's `skills` folder.

Only the catalogue (name and one-line description of each skill) goes into the system prompt;
the `load_skill` tool hands the model a skill's body, and its resource files, on demand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Skill:
    """One checked skill.

    Attributes:
        name: what `load_skill` is called with; the file's name without `.md`, or the folder's.
        description: one line telling the model when the skill applies.
        body: the Markdown after the frontmatter.
        source: the absolute path of the file it was read from (`<name>.md` or
            `<name>/SKILL.md`).
        resources: for a folder skill, the absolute paths of the other files in its folder,
            sorted; empty for a one-file skill.
    """

    name: str
    description: str
    body: str
    source: str
    resources: tuple[str, ...] = ()

    @property
    def folder(self) -> str | None:
        """The skill's folder when it has resources (its `SKILL.md` form), else None."""
        path = PurePath(self.source)
        return str(path.parent) if path.name == "SKILL.md" else None

    def resource_path(self, given: str) -> str | None:
        """The listed resource `given` names (its absolute path, or its path relative to the
        skill's folder), or None when it names none of them."""
        if given in self.resources:
            return given
        folder = self.folder
        if folder is None:
            return None
        relative = PurePath(given)
        if relative.is_absolute() or ".." in relative.parts:
            return None
        candidate = str(PurePath(folder) / relative)
        return candidate if candidate in self.resources else None


@runtime_checkable
class SkillSource(Protocol):
    """The skills of the home (a project's are never read), read once and kept."""

    def skills(self) -> list[Skill]:
        """Every usable skill, sorted by name; skipped files are in `warnings`."""
        ...

    def warnings(self) -> list[str]:
        """One line per skill file that was skipped or cut short, naming it and why."""
        ...

    def read_resource(self, path: str) -> str:
        """The text of the resource file at `path`, which must be one a skill lists.

        Raises LookupError when no skill lists `path`, OSError when it cannot be read.
        """
        ...
