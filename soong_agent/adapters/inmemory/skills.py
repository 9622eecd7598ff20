"""A skill source holding given skills, as strict as the home's loader."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePath

from soong_agent.domain.skills import check_metadata
from soong_agent.ports.skills import Skill


class InMemorySkillSource:
    """A `SkillSource` of the given skills, with the text of their resource files.

    It refuses (ValueError) a skill the real loader would never produce: a name or description
    that breaks the rules of `soong_agent.domain.skills`, a name that is not its file's (or its
    folder's) name, a description on several lines, an empty body, a relative source, a
    resource of a one-file skill or outside the skill's folder, and two skills of one name.
    `resources` maps absolute resource paths to their text; a listed resource without text
    reads as a missing file (FileNotFoundError), as one deleted after the skills were read
    would. `warnings` are returned as given.
    """

    def __init__(
        self,
        skills: Iterable[Skill] = (),
        *,
        resources: Mapping[str, str] | None = None,
        warnings: Iterable[str] = (),
    ) -> None:
        by_name: dict[str, Skill] = {}
        for skill in skills:
            _check(skill)
            if skill.name in by_name:
                raise ValueError(f"two skills are named {skill.name!r}")
            by_name[skill.name] = skill
        self._skills = [by_name[name] for name in sorted(by_name)]
        self._resources = dict(resources or {})
        self._warnings = list(warnings)
        self.reads: list[str] = []
        """The paths `read_resource` was asked for, in order."""

    def skills(self) -> list[Skill]:
        return list(self._skills)

    def warnings(self) -> list[str]:
        return list(self._warnings)

    def read_resource(self, path: str) -> str:
        self.reads.append(path)
        if not any(path in s.resources for s in self._skills):
            raise LookupError(f"{path} is not a resource of any skill")
        if path not in self._resources:
            raise FileNotFoundError(2, "No such file or directory", path)
        return self._resources[path]


def _check(skill: Skill) -> None:
    source = PurePath(skill.source)
    if not source.is_absolute() or source.suffix != ".md":
        raise ValueError(f"skill {skill.name!r}: source must be an absolute .md path")
    expected = source.parent.name if source.name == "SKILL.md" else source.stem
    name, description = check_metadata(
        {"name": skill.name, "description": skill.description}, expected_name=expected
    )
    if description != skill.description:
        raise ValueError(f"skill {name!r}: the description must be one line")
    if not skill.body.strip():
        raise ValueError(f"skill {name!r}: the body is empty")
    folder = skill.folder
    for path in skill.resources:
        resource = PurePath(path)
        if (
            folder is None
            or not resource.is_absolute()
            or ".." in resource.parts
            or not resource.is_relative_to(folder)
            or path == skill.source
        ):
            raise ValueError(f"skill {name!r}: {path!r} cannot be one of its resources")
    if list(skill.resources) != sorted(skill.resources):
        raise ValueError(f"skill {name!r}: resources must be sorted")
