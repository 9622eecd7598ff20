"""approvals package."""
