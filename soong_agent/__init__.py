"""soong-agent: an agent core for LLM coding and automation agents."""
