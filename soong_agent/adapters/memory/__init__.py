"""The memory folder on disk: Markdown files with YAML frontmatter, written atomically."""

from soong_agent.adapters.memory.store import FileMemoryStore

__all__ = ["FileMemoryStore"]
