"""Where each value of a resolved config came from: the default, the file, or a placeholder."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from soong_agent.domain.config.resolve import has_placeholder
from soong_agent.domain.config.schema import ModelOverride, SoongConfig
from soong_agent.domain.config.schema_walk import KeyPart
from soong_agent.domain.config.validation_messages import format_key_path

Source = Literal["default", "file", "placeholder"]

_MISSING = object()


@dataclass(frozen=True)
class ConfigValue:
    """One leaf key of the resolved config.

    `source` is "file" when the key is written in config.toml, "placeholder" when the value (from
    the file or the default) contained `${SOONG_AGENT_HOME}` or `<project>` that got expanded, else
    "default". For "placeholder", `unexpanded` holds the value as written and `in_file` says
    whether it was written in the file or is the default.
    """

    path: str
    value: object
    source: Source
    unexpanded: object = None
    in_file: bool = False


def _leaves(
    value: object, parts: tuple[KeyPart, ...]
) -> Iterator[tuple[tuple[KeyPart, ...], object]]:
    if isinstance(value, BaseModel):
        names = list(type(value).model_fields)
        if isinstance(value, ModelOverride):
            # A partial profile: only the keys that were set mean anything.
            names = [n for n in names if n in value.model_fields_set]
        if not names:
            yield parts, {}
            return
        for name in names:
            yield from _leaves(getattr(value, name), (*parts, name))
    elif isinstance(value, Mapping) and value:
        for key, item in value.items():
            yield from _leaves(item, (*parts, str(key)))
    elif isinstance(value, list) and value and any(isinstance(v, BaseModel) for v in value):
        for index, item in enumerate(value):
            yield from _leaves(item, (*parts, index))
    else:
        yield parts, value


def _lookup(tree: object, parts: tuple[KeyPart, ...]) -> object:
    """The value at `parts` in a raw TOML tree or a config model, or `_MISSING`."""
    node = tree
    for part in parts:
        if isinstance(node, BaseModel) and isinstance(part, str):
            if part not in type(node).model_fields:
                return _MISSING
            node = getattr(node, part)
        elif isinstance(node, Mapping) and isinstance(part, str):
            if part not in node:
                return _MISSING
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int):
            if part >= len(node):
                return _MISSING
            node = node[part]
        else:
            return _MISSING
    return node


def _contains_placeholder(value: object) -> bool:
    if isinstance(value, str):
        return has_placeholder(value)
    if isinstance(value, list):
        return any(_contains_placeholder(v) for v in value)
    return False


def value_sources(raw: Mapping[str, Any], config: SoongConfig) -> list[ConfigValue]:
    """Every leaf key of `config` (already resolved), in schema order, with its source.

    `raw` is the TOML document as parsed. Lists are leaves (arrays replace as a whole), except
    lists of tables such as `agents.worker_pools`, whose entries are walked.
    """
    defaults = SoongConfig()
    out: list[ConfigValue] = []
    for parts, value in _leaves(config, ()):
        written = _lookup(raw, parts)
        in_file = written is not _MISSING
        before = written if in_file else _lookup(defaults, parts)
        path = format_key_path(parts)
        if before is not _MISSING and _contains_placeholder(before) and before != value:
            out.append(ConfigValue(path, value, "placeholder", unexpanded=before, in_file=in_file))
        else:
            out.append(ConfigValue(path, value, "file" if in_file else "default"))
    return out
