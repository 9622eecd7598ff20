"""`soong-agent skills list`: the skills of `${SOONG_AGENT_HOME}/skills` and the files skipped.

Only the home's skills exist (a project's `skills` folder is never read). For each skill: its
name and one-line description, then the file it comes from and how many resource files it
has. Every file that was skipped, and why, goes to stderr; the exit status is 1 when any was
(so a script can check a skills folder), else 0.
"""

from __future__ import annotations

import sys

from soong_agent.entrypoints.cli.common import EXIT_FAILED, EXIT_OK, guarded
from soong_agent.ports.skills import SkillSource


def render_skills(source: SkillSource, folder: str) -> list[str]:
    """The lines `skills list` prints on stdout."""
    skills = source.skills()
    if not skills:
        return [f"no skills in {folder}"]
    noun = "skill" if len(skills) == 1 else "skills"
    lines = [f"{len(skills)} {noun} in {folder}:"]
    for skill in skills:
        lines.append(f"{skill.name}  {skill.description}")
        files = len(skill.resources)
        extra = f"  (+{files} resource file{'' if files == 1 else 's'})" if files else ""
        lines.append(f"    {skill.source}{extra}")
    return lines


def report_skills(source: SkillSource, folder: str) -> int:
    """Print the skills (stdout) and the warnings (stderr); 1 when any file was skipped."""
    sys.stdout.write("".join(line + "\n" for line in render_skills(source, folder)))
    warnings = source.warnings()
    for warning in warnings:
        sys.stderr.write(f"soong-agent: warning: {warning}\n")
    return EXIT_FAILED if warnings else EXIT_OK


def skills_list(path: str | None = None) -> int:
    """`soong-agent skills list [--path P]`: the config is loaded as for a run (for the home;
    a configuration mistake exits 2), then the home's skills are listed."""
    from soong_agent.adapters.skills import HomeSkillSource
    from soong_agent.entrypoints.sdk import load

    def body() -> int:
        source = HomeSkillSource(load(path, None).home)
        return report_skills(source, str(source.folder))

    return guarded(body)
