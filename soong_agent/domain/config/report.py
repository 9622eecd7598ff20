"""The text `soong-agent config check` prints (CFG-8): every value, where it came from, and the
model profile each purpose resolves to. Secrets appear only as environment variable names."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from soong_agent.domain.config.resolve import ResolvedProfile
from soong_agent.domain.config.schema import SoongConfig
from soong_agent.domain.config.sources import ConfigValue, value_sources

_COMMENT_COLUMN_MAX = 56
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")


def _hide_userinfo(text: str) -> str:
    """`https://user:pass@host/` → `https://***@host/`: URLs may carry credentials."""
    return _URL_USERINFO.sub(lambda m: m.group("scheme") + "***@", text)


def render_value(value: object) -> str:
    """A TOML-looking rendering of a config value; unset (None) values read `(not set)`."""
    if value is None:
        return "(not set)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(_hide_userinfo(value), ensure_ascii=False)
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_none=True)
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{k} = {render_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(render_value(v) for v in value) + "]"
    return str(value)


def _split(path: str) -> tuple[str, str]:
    """`"agents.worker_pools[0].pool_id"` → `("agents.worker_pools[0]", "pool_id")`.

    Splits at the last dot outside double quotes.
    """
    in_quotes = False
    cut = -1
    for index, char in enumerate(path):
        if char == '"' and (index == 0 or path[index - 1] != "\\"):
            in_quotes = not in_quotes
        elif char == "." and not in_quotes:
            cut = index
    if cut < 0:
        return "", path
    return path[:cut], path[cut + 1 :]


def _source_note(item: ConfigValue) -> str:
    if item.source != "placeholder":
        return item.source
    origin = "file" if item.in_file else "default"
    return f"placeholder, {origin}: {render_value(item.unexpanded)}"


def _section_lines(items: list[ConfigValue]) -> list[str]:
    sections: dict[str, list[tuple[str, str]]] = {}
    for item in items:
        section, key = _split(item.path)
        if not section:
            # A whole top-level table that is empty, e.g. `model_overrides = {}`.
            section, left = key, "(no entries)"
        else:
            left = f"{key} = {render_value(item.value)}"
        sections.setdefault(section, []).append((left, _source_note(item)))
    lines: list[str] = []
    for section, rows in sections.items():
        lines.append("")
        lines.append(f"[{section}]")
        width = min(max(len(left) for left, _ in rows), _COMMENT_COLUMN_MAX)
        for left, note in rows:
            lines.append(f"{left.ljust(width)}    # {note}")
    return lines


def _profile_lines(profile: ResolvedProfile) -> list[str]:
    model = profile.model
    base_url = render_value(model.resolved_base_url)
    if model.base_url is None:
        base_url += f"    # {model.provider} default"
    key_env = model.resolved_key_env
    if key_env:
        key_text = render_value(key_env)
        if model.api_key_env is None:
            key_text += f"    # {model.provider} default"
    else:
        key_text = '""    # no API key is sent'
    name = render_value(model.name) if model.name else '""    # not set: model calls will fail'
    temperature = (
        render_value(model.temperature)
        if model.temperature is not None
        else "(not set)    # provider default"
    )
    return [
        "",
        f"[profile {profile.purpose}]    # {profile.name!r} from {profile.source}",
        f"provider = {render_value(model.provider)}",
        f"name = {name}",
        f"base_url = {base_url}",
        f"api_key_env = {key_text}",
        f"context_window = {model.context_window}",
        f"max_output_tokens = {model.max_output_tokens}",
        f"temperature = {temperature}",
        f"timeout_ms = {model.timeout_ms}",
        f"retry = {render_value(model.retry)}",
    ]


def render_config_report(
    *,
    config_path: str,
    home: str,
    project: str,
    config: SoongConfig,
    raw: Mapping[str, Any],
    profiles: list[ResolvedProfile],
) -> str:
    """Plain text: header, each section's `key = value    # source`, then the model profiles."""
    lines = [
        f"config file: {config_path}",
        f"home:        {home}",
        f"project:     {project}",
        "sources:     default = schema default, file = written in the config file,",
        "             placeholder = ${SOONG_AGENT_HOME} or <project> expanded",
    ]
    lines += _section_lines(value_sources(raw, config))
    lines += ["", "# Model profiles, one per purpose ([model] with the purpose's profile over it)"]
    for profile in profiles:
        lines += _profile_lines(profile)
    lines.append("")
    lines.append(
        "Secrets are shown only as the names of the environment variables that hold them; "
        "they are read at first use."
    )
    return "\n".join(lines) + "\n"
