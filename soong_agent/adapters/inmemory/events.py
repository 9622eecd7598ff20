"""An event sink that keeps every event, for assertions on what a run reported."""

from __future__ import annotations

from typing import TypeVar, get_args

from soong_agent.ports.events import RunEvent

_EVENT_TYPES: tuple[type, ...] = get_args(get_args(RunEvent)[0])
_E = TypeVar("_E")


class RecordingEventSink:
    """An `EventSink` that appends each event to `events`, in the order they were emitted.

    Like `Run.emit` it never blocks and needs no event loop; unlike it, it refuses an object that
    is not one of the `RunEvent` types (TypeError), which no producer should ever emit.
    """

    def __init__(self) -> None:
        self.events: list[RunEvent] = []

    def emit(self, event: RunEvent) -> None:
        """Keep `event`."""
        if not isinstance(event, _EVENT_TYPES):
            raise TypeError(f"not a run event: {type(event).__name__}")
        self.events.append(event)

    def of_type(self, cls: type[_E]) -> list[_E]:
        """The recorded events of one type, in order."""
        return [e for e in self.events if isinstance(e, cls)]

    @property
    def types(self) -> list[str]:
        """The `type` tag of every recorded event, in order."""
        return [e.type for e in self.events]
