"""Shell command analysis with tree-sitter-bash."""

from soong_agent.adapters.shell.treesitter import TreeSitterShellAnalyzer

__all__ = ["TreeSitterShellAnalyzer"]
