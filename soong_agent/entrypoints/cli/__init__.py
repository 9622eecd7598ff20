"""The `soong-agent` command line (typer + rich)."""
