"""The rewind service of a runtime's adapters (RWD-1), for the SDK and the CLI alike."""

from __future__ import annotations

from typing import Any

from soong_agent.application.checkpoints.rewind import RewindService


def rewind_service(adapters: Any) -> RewindService:
    """A `RewindService` over a container's adapters (`Adapters` of `containers`)."""
    return RewindService(
        store=adapters.session_store(),
        fs=adapters.filesystem(),
        artifacts=adapters.artifact_store(),
        snapshots=adapters.snapshots(),
        clock=adapters.clock(),
        ids=adapters.ids(),
        redactor=adapters.redactor(),
    )
