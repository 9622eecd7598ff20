"""Skills from `${SOONG_AGENT_HOME}/skills` (the home's only; PyYAML reads their frontmatter)."""

from soong_agent.adapters.skills.loader import HomeSkillSource, load_skills

__all__ = ["HomeSkillSource", "load_skills"]
