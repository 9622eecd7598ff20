"""dependency-injector, imported once without its `wiring` module (the `@inject` machinery)."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

_WIRING = "dependency_injector.wiring"
_CLI = "soong_agent.entrypoints.cli.main"  # imported: this process is the command line


def _wiring_call(name: str) -> Any:
    """`wiring.<name>`, the real module's, imported at the first call."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(_WIRING), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def _import_dependency_injector() -> None:
    """`containers` imports `wiring` only for `Container.wire()`/`unwire()`, which we never
    call; `wiring` itself looks for fastapi, starlette, werkzeug and fast_depends and loads a
    compiled helper: ~20–40 ms of start-up. While `containers` loads, `wiring` is a stand-in
    whose `wire` and `unwire` import the real module at their first call and pass the call
    on; it is then taken out of `sys.modules`, so `import dependency_injector.wiring` (by an
    application that uses `@inject`) gets the real one."""
    if "dependency_injector.containers" in sys.modules or _WIRING in sys.modules:
        return  # imported already (by the application): nothing to save
    stand_in = types.ModuleType(_WIRING, "Loads the real wiring module at the first call.")
    stand_in.wire = _wiring_call("wire")  # type: ignore[attr-defined]
    stand_in.unwire = _wiring_call("unwire")  # type: ignore[attr-defined]
    sys.modules[_WIRING] = stand_in
    # `providers` imports PyYAML, when installed, for `Configuration.from_yaml` (~10 ms, 15
    # modules). The command line never uses it: there it is kept out while `providers` loads,
    # which then takes PyYAML for absent for good (the real one is imported as usual by whoever
    # needs it later). An application using the SDK may use `from_yaml` itself: it is left be.
    hide_yaml = (
        _CLI in sys.modules
        and "yaml" not in sys.modules
        and "dependency_injector.providers" not in sys.modules
    )
    if hide_yaml:
        sys.modules["yaml"] = None  # type: ignore[assignment]
    try:
        import dependency_injector.containers  # noqa: F401
    finally:
        if sys.modules.get(_WIRING) is stand_in:
            del sys.modules[_WIRING]
        if hide_yaml and sys.modules.get("yaml", 0) is None:
            del sys.modules["yaml"]


_import_dependency_injector()

from dependency_injector import containers, providers  # noqa: E402

__all__ = ["containers", "providers"]
