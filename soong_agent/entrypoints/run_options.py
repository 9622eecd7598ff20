"""What a caller may change of the loaded config for one runtime or run: the permission mode,
the store (`storage_url`) and per-run budgets, validated as the file's values are."""

from __future__ import annotations

from typing import TYPE_CHECKING

from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:
    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.domain.run_limits import RunLimits

__all__ = ["parse_limits", "with_permission_mode", "with_storage_url"]


def with_permission_mode(loaded: LoadedConfig, mode: str) -> LoadedConfig:
    """The loaded config with `permissions.mode` replaced (validated like the file's value)."""
    import dataclasses

    from pydantic import ValidationError

    from soong_agent.domain.config.schema import PermissionsConfig

    current = loaded.config.permissions
    try:
        permissions = PermissionsConfig.model_validate({**current.model_dump(), "mode": mode})
    except ValidationError as exc:
        raise UsageError(
            f"permission_mode: expected 'default', 'accept_edits', 'plan' or 'bypass', "
            f"found {mode!r}"
        ) from exc
    config = loaded.config.model_copy(update={"permissions": permissions})
    return dataclasses.replace(loaded, config=config)


def with_storage_url(loaded: LoadedConfig, url: str) -> LoadedConfig:
    """The loaded config with `[storage] url` replaced (validated like the file's value; a
    `password_env` of the file is kept for a postgresql:// URL)."""
    import dataclasses

    from pydantic import ValidationError

    from soong_agent.domain.config.storage_section import StorageConfig, storage_target

    current = loaded.config.storage
    fields = {**current.model_dump(), "url": url}
    if not url.startswith(("postgresql://", "postgres://")):
        fields["password_env"] = None
    try:
        storage = StorageConfig.model_validate(fields)
    except ValidationError as exc:
        problem = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise UsageError(f"storage_url: {problem}") from exc
    context = loaded.config.context
    path = storage_target(storage, context.session_db_path).sqlite_path
    config = loaded.config.model_copy(
        update={"storage": storage, "context": context.model_copy(update={"session_db_path": path})}
    )
    return dataclasses.replace(loaded, config=config)


def parse_limits(
    max_cost_usd: float | None, max_tokens: int | None, max_wall_ms: int | None
) -> RunLimits | None:
    """Per-run budgets as the domain type (None when none is set); UsageError when one is not
    positive."""
    if max_cost_usd is None and max_tokens is None and max_wall_ms is None:
        return None
    from soong_agent.domain.run_limits import RunLimits

    try:
        return RunLimits(max_cost_usd=max_cost_usd, max_tokens=max_tokens, max_wall_ms=max_wall_ms)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
