"""Reads `${SOONG_AGENT_HOME}/config.toml` with tomllib and validates it (CFG-1, CFG-2, CFG-5)."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from soong_agent.domain.config.resolve import (
    ResolvedProfile,
    resolve_all_profiles,
    resolve_paths,
)
from soong_agent.domain.config.schema import SoongConfig
from soong_agent.domain.config.validation_messages import format_validation_error
from soong_agent.ports.errors import ConfigError

HOME_ENV = "SOONG_AGENT_HOME"
HOME_DIR_NAME = ".soong-agent"
CONFIG_FILE_NAME = "config.toml"

_TOML_POSITION = re.compile(r"^(?P<what>.*?)\s*\(at line (?P<line>\d+), column (?P<col>\d+)\)$")
_TOML_AT_END = re.compile(r"^(?P<what>.*?)\s*\(at end of document\)$")


def resolve_home(env: Mapping[str, str], *, user_home: str) -> Path:
    """`SOONG_AGENT_HOME` when set and non-empty, else `<user_home>/.soong-agent` (CFG-1).

    The value is taken as written (no `~` or `$VAR` expansion) and made absolute.
    """
    configured = env.get(HOME_ENV, "")
    home = Path(configured) if configured else Path(user_home) / HOME_DIR_NAME
    return home.absolute()


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config with its path placeholders expanded, and the TOML it came from."""

    path: Path
    home: Path
    project: Path
    config: SoongConfig
    raw: dict[str, Any]
    profiles: tuple[ResolvedProfile, ...] = ()


def _syntax_message(path: Path, exc: tomllib.TOMLDecodeError) -> str:
    text = str(exc).replace("\n", " ")
    match = _TOML_POSITION.match(text)
    if match:
        what = match.group("what")
        return (
            f"{path}: TOML syntax error at line {match.group('line')}, "
            f"column {match.group('col')}: {what[:1].lower()}{what[1:]}"
        )
    match = _TOML_AT_END.match(text)
    if match:
        what = match.group("what")
        return f"{path}: TOML syntax error at the end of the file: {what[:1].lower()}{what[1:]}"
    return f"{path}: TOML syntax error: {text}"


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: config file not found; create it (see docs/configuration.md for a minimal "
            f"example; set {HOME_ENV} to use another home). soong-agent never creates one."
        ) from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: cannot read the config file: it is a directory") from None
    except PermissionError:
        raise ConfigError(f"{path}: cannot read the config file: permission denied") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"{path}: cannot read the config file: {reason}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: the config file is not valid UTF-8 (byte {exc.start})"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(_syntax_message(path, exc)) from None


def load_config(*, home: Path, project: Path) -> LoadedConfig:
    """Read, validate and resolve `<home>/config.toml`.

    Raises ConfigError with one line for a missing or unreadable file, a TOML syntax error, a
    schema error, or a model profile reference that `[model_overrides]` does not define.
    """
    path = home / CONFIG_FILE_NAME
    raw = _read(path)
    try:
        config = SoongConfig.model_validate(raw)
    except ValidationError as exc:
        # `from None`: pydantic's own text repeats the input values; keep them out of tracebacks.
        raise ConfigError(format_validation_error(exc, file=str(path))) from None
    config = resolve_paths(config, home=str(home), project=str(project))
    profiles = resolve_all_profiles(config, file=str(path))
    return LoadedConfig(
        path=path,
        home=home,
        project=project,
        config=config,
        raw=raw,
        profiles=tuple(profiles),
    )
