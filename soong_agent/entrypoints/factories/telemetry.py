"""Telemetry (OBS-1): built only when `[telemetry] enabled` or an application handed the SDK
OpenTelemetry providers of its own; otherwise there is none, and nothing of OpenTelemetry is
imported."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from soong_agent.ports.errors import ConfigError

if TYPE_CHECKING:
    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.ports.telemetry import Telemetry

GivenProviders = tuple[Any, Any]
"""An application's (tracer provider, meter provider); either may be None."""


def telemetry(
    loaded: LoadedConfig,
    closables: list[Callable[[], Awaitable[None]]],
    given: GivenProviders | None = None,
) -> Telemetry | None:
    """The runtime's telemetry, or None when it is off. ConfigError when it is on but the
    `otel` extra is not installed, or an ``OTEL_*`` variable it reads is invalid."""
    config = loaded.config.telemetry
    tracer_provider, meter_provider = given or (None, None)
    if not config.enabled and tracer_provider is None and meter_provider is None:
        return None
    try:
        from soong_agent.adapters.telemetry.exporters import (
            configured_telemetry,
            given_telemetry,
        )
    except ImportError as exc:
        raise ConfigError(
            "telemetry.enabled: OpenTelemetry is not installed (pip install "
            f"'soong-agent[otel]'): {exc}"
        ) from exc
    if config.enabled:
        try:
            made = configured_telemetry(
                config, os.environ, tracer_provider=tracer_provider, meter_provider=meter_provider
            )
        except ValueError as exc:
            raise ConfigError(f"telemetry: {exc}") from exc
    else:
        made = given_telemetry(
            tracer_provider, meter_provider, record_content=config.record_content
        )
    closables.append(made.close)
    return made
