"""Approvers: the terminal prompt of the CLI and the callback of the SDK."""
