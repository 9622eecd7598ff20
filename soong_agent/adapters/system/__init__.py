"""system package."""
