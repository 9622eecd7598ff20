"""Runs on many workers and hosts (WORK-1, WORK-2): submitting to the run queue, and the
worker that claims, runs, heartbeats and gives back queued runs."""
