"""Child agents of a run (AGT-2, AGT-4): sub-agents, forks and orchestrator workers."""
