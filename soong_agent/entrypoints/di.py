"""dependency-injector, imported once without the web frameworks its `wiring` module looks for."""

from __future__ import annotations

import sys


def _import_dependency_injector() -> None:
    """`wiring` (imported by `containers`) imports fastapi, starlette and werkzeug when they are
    installed, for the `@inject` wiring we never use: ~15 ms of start-up. Those not imported
    yet are hidden while it loads, then restored, so an application that uses them is not
    affected."""
    hidden = [
        name
        for name in ("fastapi.params", "starlette.requests", "werkzeug.local")
        if name not in sys.modules
    ]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import dependency_injector.containers  # noqa: F401
    finally:
        for name in hidden:
            if sys.modules.get(name) is None:
                del sys.modules[name]


_import_dependency_injector()

from dependency_injector import containers, providers  # noqa: E402

__all__ = ["containers", "providers"]
