"""The TOML config loader and the project folder resolution."""

from soong_agent.adapters.config.project import resolve_project
from soong_agent.adapters.config.toml_loader import LoadedConfig, load_config, resolve_home

__all__ = ["LoadedConfig", "load_config", "resolve_home", "resolve_project"]
