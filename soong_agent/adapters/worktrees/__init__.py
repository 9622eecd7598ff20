"""Member worktrees over git (TEAM-4): ``<project>/.soong-agent/worktrees/<member>``."""

from soong_agent.adapters.worktrees.git import GitWorktrees

__all__ = ["GitWorktrees"]
