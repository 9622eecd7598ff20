"""Member worktrees over git: ``<project>/.soong-agent/worktrees/<member>``."""

from soong_agent.adapters.worktrees.git import GitWorktrees

__all__ = ["GitWorktrees"]
