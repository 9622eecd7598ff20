"""Subprocesses in their own process groups, bounded in time and output."""

from soong_agent.adapters.process.runner import SubprocessRunner

__all__ = ["SubprocessRunner"]
