"""Teams (TEAM-1..4): long-lived teammates with mailboxes, status labels and worktrees."""
