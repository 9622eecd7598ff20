"""The public API is pinned: names and signatures of `soong_agent` and `soong_agent.testing`.

`public_api.txt` holds, for every name in the two `__all__` lists, its kind and signature, and
for a class its constructor and every public method and property it defines. A change to any of
them fails this test with a diff. When the change is meant, regenerate the file and commit it:

    SOONG_UPDATE_API_SNAPSHOT=1 pytest tests/architecture/test_public_api.py
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).with_name("public_api.txt")
MODULES = ("soong_agent", "soong_agent.testing")
UPDATE = "SOONG_UPDATE_API_SNAPSHOT"


def _clean(text: str) -> str:
    """Text without what changes from run to run (addresses of default objects)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", text)


def _signature(obj: Any) -> str | None:
    try:
        return _clean(str(inspect.signature(obj)))
    except (TypeError, ValueError):  # a class that keeps a builtin's constructor
        return None


def _def(obj: Any) -> str:
    is_async = inspect.iscoroutinefunction(obj) or inspect.isasyncgenfunction(obj)
    return "async def" if is_async else "def"


def _own_members(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties the class (or a soong_agent base) defines."""
    seen: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("soong_agent"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_"):
                continue
            if isinstance(value, property | staticmethod | classmethod) or inspect.isfunction(
                value
            ):
                seen[name] = value
    return sorted(seen.items())


def _describe_class(name: str, cls: type) -> list[str]:
    bases = ", ".join(b.__qualname__ for b in cls.__bases__ if b is not object)
    lines = [f"class {name}({bases})" if bases else f"class {name}"]
    constructor = None if getattr(cls, "_is_protocol", False) else _signature(cls)
    if constructor is not None:
        lines.append(f"    __init__{constructor}")
    for member, value in _own_members(cls):
        if isinstance(value, property):
            returns = inspect.signature(value.fget).return_annotation if value.fget else "?"
            lines.append(f"    property {member} -> {_clean(str(returns))}")
        elif isinstance(value, classmethod | staticmethod):
            kind = type(value).__name__
            lines.append(f"    {kind} {member}{_signature(value.__func__)}")
        else:
            lines.append(f"    {_def(value)} {member}{_signature(value)}")
    return lines


def describe(obj: Any, name: str) -> list[str]:
    """The snapshot lines of one public name."""
    if inspect.isclass(obj):
        return _describe_class(name, obj)
    if inspect.isfunction(obj):
        return [f"{_def(obj)} {name}{_signature(obj)}"]
    return [f"{name} = {_clean(repr(obj))}"]


def render() -> str:
    lines: list[str] = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        names: list[str] = list(module.__all__)
        lines.append(f"# {module_name}")
        for name in names:
            lines += describe(getattr(module, name), name)
        lines.append("")
    return "\n".join(lines)


def test_all_lists_are_sorted_unique_and_resolve() -> None:
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        names: list[str] = list(module.__all__)
        assert names == sorted(names, key=str.lower) or names == sorted(names), module_name
        assert len(set(names)) == len(names), module_name
        for name in names:
            assert getattr(module, name) is not None, f"{module_name}.{name}"


def test_public_api_snapshot() -> None:
    current = render()
    if os.environ.get(UPDATE) == "1":
        SNAPSHOT.write_text(current, encoding="utf-8")
        return
    assert SNAPSHOT.is_file(), f"no snapshot yet: run {UPDATE}=1 pytest {__file__}"
    pinned = SNAPSHOT.read_text(encoding="utf-8")
    if current != pinned:
        diff = "\n".join(
            difflib.unified_diff(
                pinned.splitlines(),
                current.splitlines(),
                fromfile="public_api.txt (pinned)",
                tofile="the code now",
                lineterm="",
            )
        )
        raise AssertionError(
            "the public API changed. If that is meant, regenerate the snapshot with\n"
            f"    {UPDATE}=1 pytest tests/architecture/test_public_api.py\n"
            f"and commit public_api.txt. The difference:\n{diff}"
        )
