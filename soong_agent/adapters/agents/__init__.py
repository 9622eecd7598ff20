"""Agent definitions (AGT-1) from `${SOONG_AGENT_HOME}/agents` (the home's only; PyYAML reads
their frontmatter), over the built-ins."""

from soong_agent.adapters.agents.loader import HomeAgentSource, load_agent_files

__all__ = ["HomeAgentSource", "load_agent_files"]
