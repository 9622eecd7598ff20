"""The `load_skill` tool and the skills catalogue of the system prompt.

The catalogue (`skills_catalogue_text`) lists each skill of the home by name and one line
within a token budget; `load_skill(name)` returns a skill's instructions with a header naming
it and its resource files, and `load_skill(name, resource)` one of those files.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import Field

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.domain.skills import (
    estimate_tokens,
    render_catalogue,
    render_loaded,
    unknown_skill_message,
)
from soong_agent.ports.skills import Skill, SkillSource

LOAD_SKILL = "load_skill"


class LoadSkillArgs(ToolArgs):
    name: str = Field(min_length=1, description="The skill's name, as the skills list gives it.")
    resource: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "To read one of the skill's resource files instead of its instructions: a path "
            "load_skill listed for it (absolute, or relative to the skill's folder)."
        ),
    )


def _describe(args: Any, ctx: ToolContext) -> tuple[str, str]:
    what = f"load the skill {args.name}"
    if args.resource:
        what += f" (its file {args.resource})"
    return f"skill:{args.name}", what


def skills_tool(source: SkillSource) -> Tool:
    """The read-only `load_skill` tool over `source`."""

    async def load_skill(args: LoadSkillArgs, ctx: ToolContext) -> ToolOutput:
        skills = {skill.name: skill for skill in source.skills()}
        skill = skills.get(args.name)
        if skill is None:
            return ToolOutput(unknown_skill_message(args.name, list(skills)), is_error=True)
        if args.resource is None:
            return ToolOutput(render_loaded(skill))
        path = skill.resource_path(args.resource)
        if path is None:
            listed = ", ".join(skill.resources) if skill.resources else "it has none"
            return ToolOutput(
                f"skill {skill.name!r} has no resource file {args.resource!r} "
                f"(its resource files: {listed})",
                is_error=True,
            )
        try:
            text = await asyncio.to_thread(source.read_resource, path)
        except (LookupError, OSError) as exc:
            return ToolOutput(f"cannot read {path}: {exc}", is_error=True)
        return ToolOutput(f"[{path}, a resource file of the skill {skill.name!r}]\n{text}")

    return Tool(
        LOAD_SKILL,
        "Load a skill named in the skills list of the system prompt: its instructions for a "
        "kind of task, and the list of its resource files. Give `resource` too to read one of "
        "those files.",
        LoadSkillArgs,
        load_skill,
        describe=_describe,
    )


def skills_catalogue_text(
    source: SkillSource,
    budget_tokens: int,
    *,
    count: Callable[[str], int] = estimate_tokens,
) -> str:
    """The skills section of the system prompt: one line per skill in name order, within
    `budget_tokens` (`count` measures; default one token per four characters), the skills
    left out counted in a last line. Empty when there are no skills."""
    return render_catalogue(source.skills(), budget_tokens, count=count)


class OnlySkills:
    """The skills of `source` that an agent definition's `skills:` lists (AGT-1): only those
    are in its catalogue and only those can `load_skill` load."""

    def __init__(self, source: SkillSource, names: Iterable[str]) -> None:
        self._source = source
        self._names = frozenset(names)

    def skills(self) -> list[Skill]:
        return [s for s in self._source.skills() if s.name in self._names]

    def warnings(self) -> list[str]:
        return self._source.warnings()

    def read_resource(self, path: str) -> str:
        if not any(path in s.resources for s in self.skills()):
            raise LookupError(f"no skill this agent may load lists the file {path}")
        return self._source.read_resource(path)
