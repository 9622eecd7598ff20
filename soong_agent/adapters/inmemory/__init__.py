"""inmemory package."""
