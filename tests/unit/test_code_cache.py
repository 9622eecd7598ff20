"""The command line's cache of compiled dataclass methods: the classes it makes are the same as
without it, a second process reuses what the first compiled, and a bad cache costs nothing."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from soong_agent.entrypoints.cli.code_cache import DataclassCodeCache, cache_path


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[DataclassCodeCache]:
    cached = DataclassCodeCache(tmp_path / "cache" / "dataclasses.marshal")
    real = dataclasses.__dict__.get("exec")
    cached.install()
    yield cached
    if real is None:
        del dataclasses.exec  # type: ignore[attr-defined]
    else:
        dataclasses.exec = real  # type: ignore[attr-defined]


def _point() -> type:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Point:
        x: int
        label: str = "origin"
        tags: tuple[str, ...] = dataclasses.field(default_factory=tuple)

    return Point


def test_a_class_made_through_the_cache_is_the_same_as_without(
    cache: DataclassCodeCache,
) -> None:
    first = _point()
    assert cache.new  # its methods were compiled once and noted
    second = _point()  # the same source texts: nothing compiled again
    for point in (first, second):
        p = point(1, "a")
        assert repr(p) == "_point.<locals>.Point(x=1, label='a', tags=())"
        assert p == point(1, "a") and hash(p) == hash(point(1, "a")) and p != point(2)
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.x = 5  # type: ignore[misc]
        # annotations stay as the class wrote them (no future flag of the cache's module,
        # which would leave the names of dataclasses' own variables instead)
        made = point.__init__.__annotations__  # type: ignore[misc]
        assert {k: made[k] for k in ("x", "label")} == {
            k: point.__annotations__[k] for k in ("x", "label")
        }


def test_what_one_process_compiled_the_next_one_reuses(tmp_path: Path) -> None:
    script = (
        "import dataclasses, sys\n"
        "from pathlib import Path\n"
        "from soong_agent.entrypoints.cli.code_cache import DataclassCodeCache\n"
        "cache = DataclassCodeCache(Path(sys.argv[1]))\n"
        "cache.load(); cache.install()\n"
        "@dataclasses.dataclass(order=True)\n"
        "class Version:\n"
        "    major: int\n"
        "    minor: int = 0\n"
        "assert Version(1, 2) < Version(2)\n"
        "print(len(cache.new)); cache.save()\n"
    )
    path = tmp_path / "cache" / "dataclasses.marshal"
    runs = [
        subprocess.run(
            [sys.executable, "-c", script, str(path)],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    compiled_first, compiled_second = (int(r.stdout) for r in runs)
    assert compiled_first > 0 and compiled_second == 0
    assert path.is_file()


def test_a_damaged_or_foreign_file_is_ignored_and_replaced(tmp_path: Path) -> None:
    path = tmp_path / "dataclasses.marshal"
    for junk in (b"", b"not a cache", b"soong-agent dataclass code\n" + b"\x00" * 40):
        path.write_bytes(junk)
        cache = DataclassCodeCache(path)
        cache.load()
        assert cache.known == {}
    cache.exec("def __create_fn__():\n def f(): return 7\n return f", {}, ns := {})
    cache.save()
    again = DataclassCodeCache(path)
    again.load()
    assert list(again.known) == list(cache.known) and len(again.known) == 1
    assert ns["__create_fn__"]()() == 7


def test_a_cache_folder_that_cannot_be_written_costs_only_the_compiling(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder should be")
    cache = DataclassCodeCache(blocker / "soong-agent" / "dataclasses.marshal")
    cache.load()
    cache.exec("x = 1", {}, ns := {})
    cache.save()  # nothing raised; the next start compiles again
    assert ns["x"] == 1 and cache.new


def test_the_file_is_per_interpreter_in_the_users_cache_folder() -> None:
    tag = sys.implementation.cache_tag
    assert cache_path({"XDG_CACHE_HOME": "/c"}, "/home/u") == Path(
        f"/c/soong-agent/dataclasses.{tag}.marshal"
    )
    home = Path(f"/home/u/.cache/soong-agent/dataclasses.{tag}.marshal")
    assert cache_path({}, "/home/u") == home


def test_a_cache_file_of_another_user_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "dataclasses.marshal"
    mine = DataclassCodeCache(path)
    mine.exec("x = 1", {}, {})
    mine.save()
    monkeypatch.setattr("os.getuid", lambda: os.stat(path).st_uid + 1)  # someone else's file
    other = DataclassCodeCache(path)
    other.load()
    assert other.known == {}


def test_a_relative_cache_home_is_ignored() -> None:
    tag = sys.implementation.cache_tag
    assert cache_path({"XDG_CACHE_HOME": "rel/dir"}, "/home/u") == Path(
        f"/home/u/.cache/soong-agent/dataclasses.{tag}.marshal"
    )
