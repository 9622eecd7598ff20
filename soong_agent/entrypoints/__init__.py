"""Entrypoints: the CLI, the SDK facade and the containers that wire adapters to use cases."""
