"""Pydantic's plugin search, skipped by the command line when no plugin is installed.

The first validator pydantic builds looks for plugins: it imports `importlib.metadata` (and
with it `email`, `zipfile`, `csv`…) and reads the entry points of every installed
distribution, ~15–25 ms of the command's start. Plugins are declared in a distribution's
`entry_points.txt` under `[pydantic]`; when no distribution on `sys.path` declares one, the
search can only find nothing, and pydantic is told so up front.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterable
from importlib.machinery import PathFinder

_LOADER = "pydantic.plugin._loader"


def skip_empty_plugin_search() -> None:
    """Stand in for pydantic's plugin loader (finding none) when `no_plugins_installed()`."""
    if _LOADER in sys.modules or not no_plugins_installed():
        return
    loader = types.ModuleType(_LOADER, "No pydantic plugin is installed (checked at start).")

    def get_plugins() -> Iterable[object]:
        return ()

    loader.get_plugins = get_plugins  # type: ignore[attr-defined]
    sys.modules[_LOADER] = loader


def no_plugins_installed() -> bool:
    """True when no distribution that `importlib.metadata` would find declares a `pydantic`
    entry point. Anything this quick look cannot read the way `importlib.metadata` does (a zip
    or egg on `sys.path`, a finder of distributions other than the path finder) answers
    False, and pydantic searches as usual."""
    for finder in sys.meta_path:
        if finder is not PathFinder and hasattr(finder, "find_distributions"):
            return False
    for entry in sys.path:
        folder = entry or "."
        if folder.endswith(".egg"):
            return False
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            continue
        except OSError:  # a zip archive, or a folder we may not list
            return False
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(folder, name, "entry_points.txt"), encoding="utf-8") as f:
                    declared = f.read()
            except FileNotFoundError:
                continue
            except OSError:  # an egg-info file (no entry points in it), or unreadable
                if os.path.isfile(os.path.join(folder, name)):
                    continue
                return False
            except UnicodeDecodeError:
                return False
            if "[pydantic]" in declared.replace(" ", ""):
                return False
    return True
