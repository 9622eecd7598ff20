"""Subprocesses in their own process groups, bounded in time and output."""
