"""Use cases that orchestrate the domain and the ports: the run loop and the tool pipeline."""
