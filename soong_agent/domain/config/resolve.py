"""Pure resolution of a validated config: path placeholders (CFG-5) and model profiles (CFG-7)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from soong_agent.domain.config.schema import ModelConfig, ModelOverride, SoongConfig
from soong_agent.domain.config.storage_section import storage_target
from soong_agent.ports.errors import ConfigError

HOME_PLACEHOLDER = "${SOONG_AGENT_HOME}"
PROJECT_PLACEHOLDER = "<project>"
PLACEHOLDERS = (HOME_PLACEHOLDER, PROJECT_PLACEHOLDER)

_PLACEHOLDER_RE = re.compile(re.escape(HOME_PLACEHOLDER) + "|" + re.escape(PROJECT_PLACEHOLDER))

MAIN = "main"
COMPACT = "compact"
MEMORY_EXTRACT = "memory_extract"
MEMORY_RECALL = "memory_recall"
MCP_SAMPLING = "mcp_sampling"

#: Where each built-in purpose takes its profile from, as a config key path.
PURPOSE_KEYS: dict[str, str] = {
    COMPACT: "compact.model_profile",
    MEMORY_EXTRACT: "memory.extract_model_profile",
    MEMORY_RECALL: "memory.recall_model_profile",
    MCP_SAMPLING: "tools.mcp.sampling_profile",
}


def _trim(directory: str) -> str:
    trimmed = directory.rstrip("/")
    return trimmed or directory


def has_placeholder(value: str) -> bool:
    """Whether `value` contains `${SOONG_AGENT_HOME}` or `<project>`."""
    return _PLACEHOLDER_RE.search(value) is not None


def expand_placeholders(value: str, *, home: str, project: str) -> str:
    """Replace `${SOONG_AGENT_HOME}` by `home` and `<project>` by `project`, in one pass.

    Nothing else is expanded: `$HOME`, `${PATH}`, `~` and `%VAR%` stay exactly as written, so the
    result never depends on the environment of the running process.
    """
    replacements = {HOME_PLACEHOLDER: _trim(home), PROJECT_PLACEHOLDER: _trim(project)}
    return _PLACEHOLDER_RE.sub(lambda m: replacements[m.group(0)], value)


def resolve_paths(config: SoongConfig, *, home: str, project: str) -> SoongConfig:
    """A new config whose path fields have their placeholders expanded.

    The path fields are `context.session_db_path`, `memory.memory_dir`, `plan.default_dir`,
    `task.wal_dir`, each entry of `tools.allowed_write_roots`, `tools.sensitive_paths` and
    `permissions.protected_paths`, and `storage.url` (a `sqlite:///` URL's file then becomes
    `context.session_db_path`, which every reader of the SQLite file uses).
    """

    def expand(value: str) -> str:
        return expand_placeholders(value, home=home, project=project)

    tools = config.tools
    storage = config.storage
    if storage.url is not None:
        storage = storage.model_copy(update={"url": expand(storage.url)})
    session_db = storage_target(storage, expand(config.context.session_db_path)).sqlite_path
    return config.model_copy(
        update={
            "storage": storage,
            "context": config.context.model_copy(update={"session_db_path": session_db}),
            "memory": config.memory.model_copy(
                update={"memory_dir": expand(config.memory.memory_dir)}
            ),
            "plan": config.plan.model_copy(update={"default_dir": expand(config.plan.default_dir)}),
            "task": config.task.model_copy(update={"wal_dir": expand(config.task.wal_dir)}),
            "permissions": config.permissions.model_copy(
                update={"protected_paths": [expand(p) for p in config.permissions.protected_paths]}
            ),
            "tools": tools.model_copy(
                update={
                    "allowed_write_roots": [expand(p) for p in tools.allowed_write_roots],
                    "sensitive_paths": [expand(p) for p in tools.sensitive_paths],
                }
            ),
        }
    )


# --- model profiles ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedProfile:
    """The complete model settings one purpose uses, and where they came from.

    `name` is `"main"` for `[model]` alone, the `[model_overrides]` name for a named profile, or
    `"inline"` for an inline table. `source` is a human description such as
    `config.toml: [model_overrides.compact] (via compact.model_profile)`.
    """

    purpose: str
    name: str
    model: ModelConfig
    source: str


def layer_override(base: ModelConfig, override: ModelOverride) -> ModelConfig:
    """`base` with the keys that `override` sets replaced; `retry` is replaced as a whole table.

    When the override switches to another provider without naming `base_url` / `api_key_env`,
    those two fall back to the new provider's defaults instead of inheriting the main model's
    endpoint and key variable (which belong to the other provider).
    """
    updates: dict[str, object] = {}
    for name in override.model_fields_set:
        value = getattr(override, name)
        if value is None and name not in ("base_url", "api_key_env", "temperature"):
            continue  # not a value ModelConfig accepts: treat as "not set"
        updates[name] = value
    new_provider = updates.get("provider")
    if new_provider is not None and new_provider != base.provider:
        updates.setdefault("base_url", None)
        updates.setdefault("api_key_env", None)
    return base.model_copy(update=updates)


def _split_source(source: str) -> tuple[str, str]:
    """`"config.toml: compact.model_profile"` → `("config.toml", "compact.model_profile")`."""
    file, sep, where = source.rpartition(": ")
    if not sep:
        return "config.toml", source
    return file, where


def resolve_profile(
    config: SoongConfig,
    ref: str | ModelOverride | None,
    *,
    purpose: str,
    source: str,
) -> ResolvedProfile:
    """The model one purpose uses (CFG-7): `[model]`, then the named or inline profile over it.

    `ref` is a name in `[model_overrides]`, an inline partial table, or None. None means the main
    model, except for purpose `"compact"`, which uses `[model_overrides.compact]` when it exists.
    `source` says where `ref` was written (`"config.toml: compact.model_profile"`); it is used in
    the error for an unknown name and in the resolved profile's own `source`.
    """
    file, where = _split_source(source)
    if ref is None:
        if purpose == COMPACT and COMPACT in config.model_overrides:
            model = layer_override(config.model, config.model_overrides[COMPACT])
            return ResolvedProfile(
                purpose=purpose,
                name=COMPACT,
                model=model,
                source=f"{file}: [model_overrides.{COMPACT}] ({where} not set)",
            )
        note = "" if purpose == MAIN else f" ({where} not set)"
        return ResolvedProfile(
            purpose=purpose, name=MAIN, model=config.model, source=f"{file}: [model]{note}"
        )
    if isinstance(ref, ModelOverride):
        return ResolvedProfile(
            purpose=purpose,
            name="inline",
            model=layer_override(config.model, ref),
            source=f"{file}: {where} (inline table over [model])",
        )
    override = config.model_overrides.get(ref)
    if override is None:
        known = sorted(config.model_overrides)
        if known:
            hint = "known profiles in [model_overrides]: " + ", ".join(known)
        else:
            hint = "[model_overrides] defines no profiles"
        raise ConfigError(f"{source}: unknown model profile {ref!r} ({hint})")
    return ResolvedProfile(
        purpose=purpose,
        name=ref,
        model=layer_override(config.model, override),
        source=f"{file}: [model_overrides.{_table_key(ref)}] (via {where})",
    )


def _table_key(name: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_-]+", name):
        return name
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def resolve_all_profiles(
    config: SoongConfig, *, file: str = "config.toml"
) -> list[ResolvedProfile]:
    """The profiles of the built-in purposes: main, compact, memory_extract, memory_recall,
    mcp_sampling.

    Raises ConfigError for a profile name that `[model_overrides]` does not define; run it at
    start so that a bad reference fails then, not at first use.
    """
    profiles = [resolve_profile(config, None, purpose=MAIN, source=f"{file}: model")]
    refs: dict[str, str | ModelOverride | None] = {
        COMPACT: config.compact.model_profile,
        MEMORY_EXTRACT: config.memory.extract_model_profile,
        MEMORY_RECALL: config.memory.recall_model_profile,
        MCP_SAMPLING: config.tools.mcp.sampling_profile,
    }
    for purpose, ref in refs.items():
        source = f"{file}: {PURPOSE_KEYS[purpose]}"
        profiles.append(resolve_profile(config, ref, purpose=purpose, source=source))
    return profiles
