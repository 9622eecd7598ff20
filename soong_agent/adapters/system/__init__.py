"""Real clock, ids, environment secrets and the prompt context source."""
