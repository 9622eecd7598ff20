"""A memory file's text: YAML frontmatter (python-frontmatter, PyYAML's safe loader) and body.

python-frontmatter and PyYAML are imported when a memory file is first written or read, not at
load: most runs touch no memory file, and importing them costs ~15–20 ms of start-up."""

from __future__ import annotations

import datetime as dt
from typing import Any

from soong_agent.ports.memory import Memory, MemoryCategory, MemoryFileInvalid

FIELDS = ("name", "description", "type", "created", "updated")


def iso(when: dt.datetime) -> str:
    """``2026-01-01T12:00:00+00:00``: seconds, with the offset."""
    return when.isoformat(timespec="seconds")


def utc(seconds: float) -> dt.datetime:
    """A time of the epoch clock as an aware UTC datetime, whole seconds."""
    return dt.datetime.fromtimestamp(int(seconds), tz=dt.UTC)


def dump(memory: Memory, *, created: dt.datetime, updated: dt.datetime) -> str:
    """The file's text: frontmatter in the order of `FIELDS`, a blank line, the body."""
    import frontmatter

    post = frontmatter.Post(
        memory.body,
        name=memory.name,
        description=memory.description,
        type=memory.category,
        created=iso(created),
        updated=iso(updated),
    )
    return frontmatter.dumps(post, sort_keys=False) + "\n"


def _time(value: Any, key: str, path: str, fallback: dt.datetime) -> dt.datetime:
    if value is None:
        return fallback
    if isinstance(value, dt.datetime):
        when = value
    elif isinstance(value, dt.date):
        when = dt.datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            when = dt.datetime.fromisoformat(value)
        except ValueError:
            raise MemoryFileInvalid(
                path, f"frontmatter {key!r} is not an ISO time: {value!r}"
            ) from None
    else:
        raise MemoryFileInvalid(path, f"frontmatter {key!r} is not an ISO time: {value!r}")
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def _text(meta: dict[str, Any], key: str, path: str) -> str:
    value = meta.get(key)
    if not isinstance(value, str) or not value.strip():
        found = "missing" if value is None else f"{type(value).__name__} {value!r}"
        raise MemoryFileInvalid(path, f"frontmatter {key!r} must be a non-empty string ({found})")
    return value.strip()


def load(
    text: str, *, path: str, category: MemoryCategory, name: str, fallback: dt.datetime
) -> Memory:
    """The memory in a file's `text`, checked against where the file is: its frontmatter
    `name` must be the file's name and its `type` the folder. `fallback` stands for a missing
    `created` or `updated` (a file written by hand). MemoryFileInvalid names what is wrong."""
    import frontmatter
    from yaml import YAMLError  # type: ignore[import-untyped]

    try:
        post = frontmatter.loads(text)
    except YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MemoryFileInvalid(path, f"its frontmatter is not valid YAML ({first})") from None
    meta: dict[str, Any] = dict(post.metadata)
    if not meta:
        raise MemoryFileInvalid(path, "it has no frontmatter (name, description, type)")
    given = _text(meta, "name", path)
    if given != name:
        raise MemoryFileInvalid(path, f"frontmatter name {given!r} is not the file's name")
    kind = _text(meta, "type", path)
    if kind != category:
        raise MemoryFileInvalid(path, f"frontmatter type {kind!r} is not its folder {category!r}")
    return Memory(
        name=name,
        description=" ".join(_text(meta, "description", path).split()),
        category=category,
        body=post.content.strip(),
        created=_time(meta.get("created"), "created", path, fallback),
        updated=_time(meta.get("updated"), "updated", path, fallback),
    )
