"""Every key of `config.toml` either changes what the runtime does, or is refused (issue 31).

One row per key of the schema (`soong_agent.domain.config.schema`, walked recursively, so a
new key without a row fails `test_every_key_of_the_schema_has_exactly_one_row`), plus the
keys that are refused on purpose (`RETIRED_KEYS`). A row is either

- an `Effect`: the runtime is built (or a run made, with a scripted model, real files, real
  hook and command processes, a loopback web server) twice, with the key at its default and
  at another value, and one probe of what the runtime does or the object that does it must
  give the row's two answers; or
- a `Refused`: the config with that value does not start, with a `ConfigError` naming the key.

`test_the_docs_list_exactly_the_keys_of_the_schema` checks docs/configuration.md the same way:
its key tables list every key, and no key that does not exist.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import chdir
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from soong_agent.domain.config.retired import RETIRED_KEYS
from soong_agent.domain.config.schema import SoongConfig
from soong_agent.entrypoints.containers import SdkContainer
from soong_agent.entrypoints.sdk import read_images
from soong_agent.ports.errors import ConfigError, ProviderError, UsageError
from soong_agent.ports.events import ChildStarted, WorkTreeSnapshot
from soong_agent.ports.model import ModelRequest
from soong_agent.testing import (
    ScriptedMcpHub,
    ScriptedMcpServer,
    ScriptedResponse,
)
from tests.support.config_world import (
    REPO,
    WEB,
    Config,
    Effect,
    Outcome,
    Probe,
    Refused,
    Row,
    World,
    at,
    built,
    calls,
    documented_keys,
    fetch,
    merged,
    ran,
    schema_entries,
    schema_keys,
    text,
)
from tests.support.images import PNG


# What the built objects hold: read in one place (private names of the adapters).
def provider_of(container: SdkContainer) -> Any:
    return container.adapters.model_provider()


def root_settings(container: SdkContainer) -> Any:
    return container.services.root_spec().settings


def root_tool(name: str) -> Callable[[SdkContainer], Any]:
    return lambda c: next(t for t in c.services.root_spec().tools.tools() if t.name == name)


def price_of(settings: Any, *, name: str) -> object:
    return None if settings.price is None else getattr(settings.price, name)


def stuck_of(container: SdkContainer, *, name: str) -> object:
    return getattr(root_settings(container).stuck, name)


def budget(container: SdkContainer) -> Any:
    return container.services.assembler().budget()


PROFILE_AGENT = {
    "home/agents/prof.md": (
        "---\nid: prof\ndescription: Runs on profile p.\ntools: ['*']\nmodel_profile: p\n---\n"
    )
}
"""An agent definition whose runs use the `[model_overrides.p]` profile."""


def profile_setup(container: SdkContainer) -> tuple[Any, Any]:
    """The assembler and spec of a run of `prof`: its provider, policies and settings."""
    return container.services.agent_setups().root("prof")  # type: ignore[no-any-return]


def profile_provider(container: SdkContainer) -> Any:
    return profile_setup(container)[0].ports.provider


def model_rows(prefix: str) -> list[Row]:
    """The rows of the model keys: `model.*` through the main model, or `model_overrides.<name>.*`
    through an agent definition that uses the profile (the same keys, layered over [model])."""
    main = prefix == "model"
    files = {} if main else PROFILE_AGENT
    base: Config = {} if main else {"model_overrides": {"p": {}}}

    def key(name: str) -> str:
        return f"model.{name}" if main else f"model_overrides.<name>.{name}"

    def value(name: str, v: object) -> Config:
        return at(f"model.{name}", v) if main else {"model_overrides": {"p": at(name, v)}}

    def provider(look: Callable[[Any], object]) -> Probe:
        return built(lambda c: look(provider_of(c) if main else profile_provider(c)), files)

    def settings(look: Callable[[Any], object]) -> Probe:
        return built(
            lambda c: look(root_settings(c) if main else profile_setup(c)[1].settings), files
        )

    def window(c: SdkContainer) -> int:
        assembler = c.services.assembler() if main else profile_setup(c)[0]
        return assembler.budget().window  # type: ignore[no-any-return]

    rows: list[Row] = [
        Effect(
            key("provider"),
            value("provider", "anthropic"),
            provider(lambda p: type(p).__name__),
            "OpenAIChatProvider",
            "AnthropicMessagesProvider",
            base,
        ),
        Effect(
            key("base_url"),
            value("base_url", "http://127.0.0.1:9/v1"),
            provider(lambda p: p.label),
            "openai m at https://api.openai.com/v1",
            "openai m at http://127.0.0.1:9/v1",
            base,
        ),
        Effect(
            key("api_key_env"),
            value("api_key_env", "TABLE_KEY"),
            provider(lambda p: p._api_key()),
            None,
            "key-from-env",
            base,
        ),
        Effect(
            key("name"),
            value("name", "other"),
            provider(lambda p: p.label),
            "openai m at https://api.openai.com/v1",
            "openai other at https://api.openai.com/v1",
            base,
        ),
        Effect(
            key("context_window"),
            value("context_window", 64_000),
            built(window, files),
            128_000,
            64_000,
            base,
        ),
        Effect(
            key("max_output_tokens"),
            value("max_output_tokens", 1_000),
            settings(lambda s: s.max_output_tokens),
            8_192,
            1_000,
            base,
        ),
        Effect(
            key("temperature"),
            value("temperature", 0.5),
            settings(lambda s: s.temperature),
            None,
            0.5,
            base,
        ),
        Effect(
            key("timeout_ms"),
            value("timeout_ms", 30_000),
            provider(lambda p: p._timeout_s),
            600.0,
            30.0,
            base,
        ),
        Effect(
            key("idle_timeout_ms"),
            value("idle_timeout_ms", 5_000),
            provider(lambda p: p._idle_s),
            IDLE_DEFAULT_S,
            5.0,
            base,
        ),
        Effect(
            key("retry.max_attempts"),
            value("retry", {"max_attempts": 2}),
            provider(lambda p: p._retry.max_attempts),
            4,
            2,
            base,
        ),
        Effect(
            key("retry.initial_backoff_ms"),
            value("retry", {"initial_backoff_ms": 100}),
            provider(lambda p: p._retry.initial_backoff_s),
            0.5,
            0.1,
            base,
        ),
        Effect(
            key("retry.max_backoff_ms"),
            value("retry", {"max_backoff_ms": 1_000}),
            provider(lambda p: p._retry.max_backoff_s),
            30.0,
            1.0,
            base,
        ),
        Effect(
            key("retry.max_retry_after_ms"),
            value("retry", {"max_retry_after_ms": 2_000}),
            provider(lambda p: p._retry.max_retry_after_s),
            60.0,
            2.0,
            base,
        ),
        Effect(
            key("retry.stream_max_retries"),
            value("retry", {"stream_max_retries": 0}),
            provider(lambda p: p._retry.stream_max_retries),
            3,
            0,
            base,
        ),
        Effect(
            key("thinking_budget_tokens"),
            value("thinking_budget_tokens", 2_048),
            provider(lambda p: p._thinking_budget),
            None,
            2_048,
            merged(base, value("provider", "anthropic")),
        ),
        Effect(
            key("reasoning_effort"),
            value("reasoning_effort", "high"),
            provider(lambda p: p._effort),
            None,
            "high",
            base,
        ),
        Effect(
            key("vision"),
            value("vision", True),
            provider(lambda p: p._vision),
            False,  # "m" is no model known to take images
            True,
            base,
        ),
    ]
    for name, amount in (
        ("input_per_mtok", 1.0),
        ("output_per_mtok", 2.0),
        ("cache_read_per_mtok", 0.5),
        ("cache_write_per_mtok", 1.5),
    ):
        rows.append(
            Effect(
                key(f"price.{name}"),
                value("price", {name: amount}),
                settings(partial(price_of, name=name)),
                None,
                amount,
                base,
            )
        )
    return rows


async def attaches_png(world: World, config: Config) -> object:
    """Probe: whether `run(images=[a 70-byte PNG])` attaches it (PROV-7)."""
    loaded = world.loaded(config)
    (loaded.project / "shot.png").write_bytes(PNG)
    try:
        with chdir(loaded.project):
            read_images(["shot.png"], loaded)
    except UsageError as exc:
        return f"refused: {exc}"
    return "attached"


IDLE_DEFAULT_S = 300.0
"""`[model] idle_timeout_ms`'s default, in seconds."""


# --- MCP rows: a scripted hub in place of the servers of mcp.json -----------------------------


def mcp_probe(
    look: Callable[[Outcome, ScriptedMcpHub], object], *, call: str | None = None
) -> Probe:
    """A run over a scripted server `git` (tools `status`, `push`); the model calls `call`."""

    async def probe(world: World, config: Config) -> object:
        hub = ScriptedMcpHub([ScriptedMcpServer("git", tools=["status", "push"])])
        script: list[object] = [ScriptedResponse.tool_calls((call, {}))] if call else []
        outcome = await world.run(
            merged({"tools": {"defer_threshold": 1000}}, config),
            [*script, ScriptedResponse.text("done")],
            hub=hub,
        )
        return look(outcome, hub)

    return probe


def described(name: str) -> Callable[[Outcome], object]:
    return lambda o: next(t.description for t in o.calls[0].tools if t.name == name)


MCP_JSON = {"home/mcp.json": json.dumps({"mcp_servers": {"s": {"command": "true"}}})}
HOOK_LOG = {"home/hooks.json": json.dumps({"hooks": {"session_start": [{"command": "true"}]}})}
WORKER: Config = {"agent_definition_id": "default_worker_agent"}
POOL: Config = {"pool_id": "a", "workers": [WORKER]}


def pool(**changes: Any) -> Config:
    return {"agents": {"worker_pools": [{**POOL, **changes}]}}


def worker(**changes: Any) -> Config:
    return pool(workers=[{**WORKER, **changes}])


def pools(look: Callable[[Any], object]) -> Probe:
    return built(lambda c: look(c.services.child_runs().pools))


SAVE_MEMORY = (
    "save_memory",
    {
        "name": "prefer_tabs",
        "description": "Indentation the user prefers",
        "category": "user",
        "body": "The user prefers tabs over spaces.",
    },
)
TASK_STEPS = (
    ("task_create", {"name": "t", "title": "Ship the table"}),
    ("task_add_step", {"task": "t", "step_id": "s", "title": "Write rows"}),
    ("task_claim", {"task": "t", "step_id": "s"}),
)


def board(o: Outcome) -> str:
    """The task board as the system prompt of the last model call shows it."""
    return o.system(len(o.calls) - 1)


def recent_changes(o: Outcome) -> int:
    """The lines under "Recent changes" of the board."""
    return len(re.findall(r"^- \d{4}-\d\d-\d\d \S+ run_", board(o), flags=re.MULTILINE))


async def background_summaries(world: World, config: Config) -> int:
    """Summary requests made while the context is between 80 % of the compaction trigger and
    the trigger: reading a large file five times fills a 32k window that far after the
    fourth read (the fifth passes the trigger and old results are elided instead)."""
    summaries: list[ModelRequest] = []
    # (each answer pauses for a moment, so that a summary started in the background gets
    # its turn of the event loop; the count does not depend on how long)
    read = ScriptedResponse.tool_calls(("read_file", {"path": "big.txt"}), delay_s=0.001)
    plan = [read] * 5
    plan.append(ScriptedResponse.text("done"))

    def answer(request: ModelRequest) -> ScriptedResponse:
        if request.system and request.system[0].label == "compact":
            summaries.append(request)
            return ScriptedResponse.text("Summary: the file was read.")
        return plan.pop(0)

    big = {"project/big.txt": ("word " * 10 + "\n") * 250}
    await world.run(config, [], default=answer, files=big)
    return len(summaries)


def lease(o: Outcome) -> str:
    found = re.search(r"lease ends in ([^:]+):", o.result(2))
    return found.group(1) if found else o.result(2)


def stop_hook(exit_code: int) -> dict[str, str]:
    return {"home/hooks.json": json.dumps({"hooks": {"stop": [{"command": f"exit {exit_code}"}]}})}


FIRED = {"home/hooks.json": json.dumps({"hooks": {"session_start": [{"command": "touch fired"}]}})}
DECLARATIVE = {
    "home/tools/hello.json": json.dumps(
        {
            "name": "hello",
            "description": "Say hello.",
            "parameters": {"type": "object", "properties": {}},
            "command": ["true"],
            "permission_class": "read_only",
        }
    )
}
HELPER = {
    "home/agents/helper.md": "---\nid: helper\ndescription: Helps.\ntools: [read_file]\n---\n"
}


def command(line: str, **extra: Any) -> Callable[[], list[object]]:
    return calls(("run_command", {"command": line, **extra}))


def context_too_long() -> list[object]:
    error = ProviderError(
        "prompt is too long",
        kind="context_too_long",
        provider="scripted",
        base_url="memory://scripted",
        status=400,
    )
    return [error, ScriptedResponse.text("summary"), ScriptedResponse.text("done")]


ROWS: list[Row] = [
    # [runtime]
    Effect(
        "runtime.cancel_timeout_ms",
        at("runtime.cancel_timeout_ms", 2_500),
        built(lambda c: c.services.policies().cancel_timeout_s),
        10.0,
        2.5,
    ),
    Effect(
        "runtime.max_turns",
        at("runtime.max_turns", 7),
        built(lambda c: root_settings(c).max_turns),
        100,
        7,
    ),
    Effect(
        "runtime.max_continuations",
        at("runtime.max_continuations", 1),
        built(lambda c: root_settings(c).max_continuations),
        3,
        1,
    ),
    Effect(
        "runtime.max_cost_usd",
        at("runtime.max_cost_usd", 1.5),
        built(lambda c: root_settings(c).limits.max_cost_usd),
        None,
        1.5,
    ),
    Effect(
        "runtime.max_tokens",
        at("runtime.max_tokens", 1_000),
        built(lambda c: root_settings(c).limits.max_tokens),
        None,
        1_000,
    ),
    Effect(
        "runtime.max_wall_ms",
        at("runtime.max_wall_ms", 5_000),
        built(lambda c: root_settings(c).limits.max_wall_ms),
        None,
        5_000,
    ),
    *(
        Effect(
            f"runtime.stuck.{name}",
            at(f"runtime.stuck.{name}", 9),
            built(partial(stuck_of, name=name)),
            default,
            9,
        )
        for name, default in (
            ("same_call", 4),
            ("same_error", 4),
            ("cycle", 3),
            ("monologue", 4),
            ("compaction", 3),
            ("max_interventions", 3),
        )
    ),
    # [model], [model_overrides.<name>]
    *model_rows("model"),
    *model_rows("model_overrides"),
    # [context]
    Effect(
        "context.session_db_path",
        at("context.session_db_path", "${SOONG_AGENT_HOME}/db2.sqlite"),
        ran(text("hi"), lambda o: (o.home / "db2.sqlite").exists()),
        False,
        True,
    ),
    Refused(
        "context.active_path_only",
        at("context.active_path_only", False),
        "only the active branch of a session",
    ),
    Refused(
        "context.allow_branch_from",
        at("context.allow_branch_from", "assistant_message"),
        "a session branches only from one of its user messages",
    ),
    Refused(
        "context.branch_summary",
        at("context.branch_summary", True),
        "summaries of abandoned branches are not supported",
    ),
    Effect(
        "context.reserve_output_tokens",
        at("context.reserve_output_tokens", 4_096),
        built(lambda c: budget(c).reserve_output),
        8_192,
        4_096,
    ),
    Effect(
        "context.dynamic_system_budget",
        at("context.dynamic_system_budget", 8_000),
        built(lambda c: budget(c).system),
        12_000,
        8_000,
    ),
    Effect(
        "context.non_system_budget",
        at("context.non_system_budget", 50_000),
        built(lambda c: budget(c).non_system),
        107_808,
        50_000,
    ),
    # [compact]
    Effect(
        "compact.enabled",
        at("compact.enabled", False),
        ran(context_too_long, lambda o: o.status),
        "completed",
        "failed",
    ),
    Effect(
        "compact.reserve_tokens",
        at("compact.reserve_tokens", 10_000),
        built(lambda c: budget(c).compact_reserve),
        16_384,
        10_000,
    ),
    Effect(
        "compact.keep_recent_tokens",
        at("compact.keep_recent_tokens", 10_000),
        built(lambda c: budget(c).keep_recent),
        20_000,
        10_000,
    ),
    Effect(
        "compact.auto_background",
        at("compact.auto_background", False),
        background_summaries,
        1,
        0,
        at("model.context_window", 32_000),
    ),
    Effect(
        "compact.recovery_sync",
        at("compact.recovery_sync", False),
        ran(context_too_long, lambda o: o.status),
        "completed",
        "failed",
    ),
    Effect(
        "compact.model_profile",
        at("compact.model_profile", {"name": "small"}),
        built(lambda c: c.adapters.compact_provider().label),
        "openai m at https://api.openai.com/v1",
        "openai small at https://api.openai.com/v1",
    ),
    Effect(
        "compact.max_summary_tokens",
        at("compact.max_summary_tokens", 2_000),
        built(lambda c: budget(c).max_summary),
        4_000,
        2_000,
    ),
    # [memory]
    Effect(
        "memory.enabled",
        at("memory.enabled", False),
        built(lambda c: "save_memory" in c.services.root_spec().tools.names()),
        True,
        False,
    ),
    Effect(
        "memory.memory_dir",
        at("memory.memory_dir", "${SOONG_AGENT_HOME}/mem2"),
        ran(calls(SAVE_MEMORY), lambda o: (o.home / "mem2" / "user" / "prefer_tabs.md").exists()),
        False,
        True,
    ),
    Effect(
        "memory.categories",
        at("memory.categories", ["feedback"]),
        ran(calls(SAVE_MEMORY), lambda o: o.failed()),
        False,
        True,
    ),
    Effect(
        "memory.extract_every_messages",
        at("memory.extract_every_messages", 3),
        built(lambda c: c.services.memory_extraction().settings.every_messages),
        20,
        3,
    ),
    Effect(
        "memory.extract_every_tokens",
        at("memory.extract_every_tokens", 500),
        built(lambda c: c.services.memory_extraction().settings.every_tokens),
        12_000,
        500,
    ),
    Effect(
        "memory.idle_seconds",
        at("memory.idle_seconds", 60),
        built(lambda c: c.services.memory_extraction().settings.idle_seconds),
        300,
        60,
    ),
    Effect(
        "memory.catalog_max_tokens",
        at("memory.catalog_max_tokens", 700),
        built(lambda c: c.services.memory_recall().settings.catalog_max_tokens),
        2_000,
        700,
    ),
    Effect(
        "memory.recall_top_k",
        at("memory.recall_top_k", 2),
        built(lambda c: c.services.memory_recall().settings.top_k),
        5,
        2,
    ),
    Effect(
        "memory.memory_context_token_budget",
        at("memory.memory_context_token_budget", 900),
        built(lambda c: c.services.memory_recall().settings.context_tokens),
        2_000,
        900,
    ),
    Effect(
        "memory.extract_model_profile",
        at("memory.extract_model_profile", {"name": "x"}),
        built(lambda c: c.adapters.extract_provider().label),
        "openai m at https://api.openai.com/v1",
        "openai x at https://api.openai.com/v1",
    ),
    Effect(
        "memory.recall_model_profile",
        at("memory.recall_model_profile", {"name": "r"}),
        built(lambda c: c.adapters.recall_provider().label),
        "openai m at https://api.openai.com/v1",
        "openai r at https://api.openai.com/v1",
    ),
    Effect(
        "memory.consolidate_min_hours",
        at("memory.consolidate_min_hours", 1.5),
        built(lambda c: c.services.memory_consolidation().settings.min_hours),
        24.0,
        1.5,
    ),
    Effect(
        "memory.consolidate_min_sessions",
        at("memory.consolidate_min_sessions", 2),
        built(lambda c: c.services.memory_consolidation().settings.min_sessions),
        5,
        2,
    ),
    # [agents]
    Effect(
        "agents.max_children_per_run",
        at("agents.max_children_per_run", 0),
        built(lambda c: "create_sub_agent" in c.services.root_spec().tools.names()),
        True,
        False,
    ),
    Effect(
        "agents.default_sub_agent_definition",
        at("agents.default_sub_agent_definition", "helper"),
        ran(
            lambda: [
                ScriptedResponse.tool_calls(("create_sub_agent", {"task": "look"})),
                ScriptedResponse.text("child answer"),
                ScriptedResponse.text("done"),
            ],
            lambda o: next(e.agent for e in o.events if isinstance(e, ChildStarted)),
            files=HELPER,
        ),
        "default_sub_agent",
        "helper",
    ),
    Effect("agents.worker_pools[].pool_id", pool(pool_id="b"), pools(sorted), ["a"], ["b"], pool()),
    Effect(
        "agents.worker_pools[].workers[].worker_id",
        worker(worker_id="w1"),
        pools(lambda p: p["a"].workers[0].worker_id),
        "a-1-default_worker_agent",
        "w1",
        pool(),
    ),
    Effect(
        "agents.worker_pools[].workers[].agent_definition_id",
        worker(agent_definition_id="default_sub_agent"),
        pools(lambda p: p["a"].workers[0].agent),
        "default_worker_agent",
        "default_sub_agent",
        pool(),
    ),
    Effect(
        "agents.worker_pools[].workers[].allowed_tools",
        worker(allowed_tools=["read_file"]),
        pools(lambda p: p["a"].workers[0].allowed_tools),
        None,
        ("read_file",),
        pool(),
    ),
    Effect(
        "agents.worker_pools[].workers[].max_tokens",
        worker(max_tokens=1_000),
        pools(lambda p: p["a"].workers[0].limits.max_tokens),
        None,
        1_000,
        pool(),
    ),
    Effect(
        "agents.worker_pools[].workers[].max_cost_usd",
        worker(max_cost_usd=0.5),
        pools(lambda p: p["a"].workers[0].limits.max_cost_usd),
        None,
        0.5,
        pool(),
    ),
    Effect(
        "agents.worker_pools[].max_tokens",
        pool(max_tokens=5_000),
        pools(lambda p: p["a"].limits.max_tokens),
        None,
        5_000,
        pool(),
    ),
    Effect(
        "agents.worker_pools[].max_cost_usd",
        pool(max_cost_usd=2.0),
        pools(lambda p: p["a"].limits.max_cost_usd),
        None,
        2.0,
        pool(),
    ),
    Effect(
        "agents.max_concurrent_children_per_session",
        at("agents.max_concurrent_children_per_session", 2),
        built(lambda c: c.services.child_runs().limits.max_concurrent_per_session),
        4,
        2,
    ),
    Effect(
        "agents.default_child_timeout_ms",
        at("agents.default_child_timeout_ms", 60_000),
        built(lambda c: c.services.child_runs().limits.timeout_s),
        600.0,
        60.0,
    ),
    Effect(
        "agents.child_cancel_timeout_ms",
        at("agents.child_cancel_timeout_ms", 3_000),
        built(lambda c: c.services.child_runs().limits.cancel_timeout_s),
        30.0,
        3.0,
    ),
    Effect(
        "agents.max_teammates",
        at("agents.max_teammates", 0),
        ran(text("done"), lambda o: "spawn_teammate" in o.offered(), orchestrator=True),
        True,
        False,
        pool(),
    ),
    Effect(
        "agents.worktrees",
        at("agents.worktrees", False),
        built(lambda c: c.services.teams()._worktrees is None),
        False,
        True,
    ),
    Refused(
        "agents.default_fork_agent_definition",
        at("agents.default_fork_agent_definition", "default_fork_agent"),
        "a fork (`fork_agent`) always keeps its parent's system prompt and tools",
    ),
    # [plan]
    Effect(
        "plan.default_dir",
        at("plan.default_dir", "<project>/plans2"),
        ran(
            calls(("plan_write", {"name": "p1", "content": "# Plan"})),
            lambda o: (o.project / "plans2" / "p1.md").exists(),
        ),
        False,
        True,
    ),
    Refused(
        "plan.template_name",
        at("plan.template_name", "fancy"),
        "unknown template 'fancy'; the built-in templates are: default",
    ),
    # [task]
    Effect(
        "task.wal_dir",
        at("task.wal_dir", "<project>/tasks2"),
        ran(calls(TASK_STEPS[0]), lambda o: (o.project / "tasks2").is_dir()),
        False,
        True,
    ),
    Effect(
        "task.task_board_token_budget",
        at("task.task_board_token_budget", 0),
        ran(calls(*TASK_STEPS), lambda o: "Ship the table" in board(o)),
        True,
        False,
    ),
    Effect(
        "task.task_recent_changes_limit",
        at("task.task_recent_changes_limit", 1),
        ran(calls(*TASK_STEPS), recent_changes),
        3,
        1,
    ),
    Effect(
        "task.task_recent_changes_window_minutes",
        at("task.task_recent_changes_window_minutes", 0),
        ran(calls(*TASK_STEPS), recent_changes),
        3,
        0,
    ),
    Effect(
        "task.step_lease_timeout_ms",
        at("task.step_lease_timeout_ms", 60_000),
        ran(calls(*TASK_STEPS), lease),
        "5m00s",
        "1m00s",
    ),
    # [permissions]
    Effect(
        "permissions.readonly_default",
        at("permissions.readonly_default", "deny"),
        ran(
            calls(("read_file", {"path": "a.txt"})),
            lambda o: o.failed(),
            files={"project/a.txt": "a\n"},
        ),
        False,
        True,
    ),
    Effect(
        "permissions.write_without_callback",
        at("permissions.write_without_callback", "allow"),
        ran(
            calls(("write_file", {"path": "a.txt", "content": "a"})),
            lambda o: o.failed(),
            approve=None,
        ),
        True,
        False,
    ),
    Refused(
        "permissions.remember_scope",
        at("permissions.remember_scope", "forever"),
        '"allow for session" answers last for the session, in memory',
    ),
    Effect(
        "permissions.allow_for_session_enabled",
        at("permissions.allow_for_session_enabled", False),
        ran(
            calls(("write_file", {"path": "a.txt", "content": "a"})),
            lambda o: o.asked[0].session_scope.startswith("nothing"),
        ),
        False,
        True,
    ),
    Effect(
        "permissions.network_policy",
        at("permissions.network_policy", "deny"),
        ran(fetch(), lambda o: "network_policy = 'deny'" in o.result()),
        False,
        True,
        at("tools.network.allowed_hosts", ["127.0.0.1"]),
    ),
    Effect(
        "permissions.mode",
        at("permissions.mode", "plan"),
        ran(calls(("write_file", {"path": "a.txt", "content": "a"})), lambda o: o.failed()),
        False,
        True,
    ),
    Effect(
        "permissions.allow",
        at("permissions.allow", ["write_file"]),
        ran(
            calls(("write_file", {"path": "a.txt", "content": "a"})),
            lambda o: o.failed(),
            approve=None,
        ),
        True,
        False,
    ),
    Effect(
        "permissions.deny",
        at("permissions.deny", ["read_file"]),
        ran(
            calls(("read_file", {"path": "a.txt"})),
            lambda o: o.failed(),
            files={"project/a.txt": "a\n"},
        ),
        False,
        True,
    ),
    Effect(
        "permissions.protected_paths",
        at("permissions.protected_paths", ["notes"]),
        ran(calls(("write_file", {"path": "notes/a.txt", "content": "a"})), lambda o: len(o.asked)),
        0,
        1,
        at("permissions.mode", "accept_edits"),
    ),
    # [hooks]
    Effect(
        "hooks.enabled",
        at("hooks.enabled", False),
        ran(text("hi"), lambda o: (o.project / "fired").exists(), files=FIRED),
        True,
        False,
    ),
    Effect(
        "hooks.default_timeout_ms",
        at("hooks.default_timeout_ms", 5_000),
        built(lambda c: c.adapters.hooks()._default_timeout_s, HOOK_LOG),
        30.0,
        5.0,
    ),
    Effect(
        "hooks.max_stop_continuations",
        at("hooks.max_stop_continuations", 1),
        ran(
            lambda: [],
            lambda o: len(o.calls),
            files=stop_hook(1),
            default=ScriptedResponse.text("done"),
        ),
        4,
        2,
    ),
    Effect(
        "hooks.sandboxed",
        at("hooks.sandboxed", False),
        built(lambda c: c.adapters.hooks()._runner is c.adapters.command_runner(), HOOK_LOG),
        True,
        False,
    ),
    # [tools]
    Effect(
        "tools.declarative_enabled",
        at("tools.declarative_enabled", False),
        built(lambda c: "hello" in c.services.root_spec().tools.names(), DECLARATIVE),
        True,
        False,
    ),
    Effect(
        "tools.disabled",
        at("tools.disabled", ["compact"]),
        ran(text("hi"), lambda o: "compact" in o.offered()),
        True,
        False,
    ),
    Effect(
        "tools.overrides.<name>.description",
        at("tools.overrides.read_file.description", "Read one file (custom)."),
        ran(text("hi"), lambda o: described("read_file")(o) == "Read one file (custom)."),
        False,
        True,
    ),
    Effect(
        "tools.overrides.<name>.timeout_ms",
        at("tools.overrides.run_command.timeout_ms", 5_000),
        built(lambda c: root_tool("run_command")(c).timeout_ms),
        120_000,
        5_000,
    ),
    Effect(
        "tools.overrides.<name>.permission_class",
        at("tools.overrides.read_file.permission_class", "write"),
        ran(
            calls(("read_file", {"path": "a.txt"})),
            lambda o: o.failed(),
            approve=None,
            files={"project/a.txt": "a\n"},
        ),
        False,
        True,
    ),
    Effect(
        "tools.allowed_write_roots",
        at("tools.allowed_write_roots", ["<project>", "<project>/../outside"]),
        ran(
            calls(("write_file", {"path": "../outside/a.txt", "content": "a"})),
            lambda o: o.failed(),
            files={"outside/.keep": ""},
        ),
        True,
        False,
    ),
    Effect(
        "tools.allow_tmp_write",
        at("tools.allow_tmp_write", True),
        ran(calls(("write_file", {"path": "../in-tmp.txt", "content": "a"})), lambda o: o.failed()),
        True,
        False,
    ),
    Effect(
        "tools.default_timeout_ms",
        at("tools.default_timeout_ms", 5_000),
        built(lambda c: root_tool("run_command")(c).timeout_ms),
        120_000,
        5_000,
    ),
    Effect(
        "tools.max_timeout_ms",
        at("tools.max_timeout_ms", 200_000),
        ran(command("true", timeout_ms=300_000), lambda o: "above the maximum" in o.result()),
        False,
        True,
    ),
    Effect(
        "tools.env_allowlist",
        at("tools.env_allowlist", ["PATH", "TABLE_VAR"]),
        ran(command("echo $TABLE_VAR"), lambda o: "visible-value" in o.result()),
        False,
        True,
    ),
    Effect(
        "tools.stdout_limit_bytes",
        at("tools.stdout_limit_bytes", 4),
        ran(command("printf 0123456789"), lambda o: "[stdout cut" in o.result()),
        False,
        True,
    ),
    Effect(
        "tools.stderr_limit_bytes",
        at("tools.stderr_limit_bytes", 4),
        ran(command("printf 0123456789 >&2"), lambda o: "[stderr cut" in o.result()),
        False,
        True,
    ),
    Effect(
        "tools.max_background_commands",
        at("tools.max_background_commands", 1),
        ran(
            calls(
                ("run_command", {"command": "sleep 30", "background": True}),
                ("run_command", {"command": "sleep 30", "background": True}),
            ),
            lambda o: "was not started" in o.result(1),
        ),
        False,
        True,
    ),
    Effect(
        "tools.max_result_chars",
        at("tools.max_result_chars", 100),
        ran(
            calls(("read_file", {"path": "a.txt"})),
            lambda o: "read_artifact" in o.result(),
            files={"project/a.txt": "x" * 1000},
        ),
        False,
        True,
    ),
    Effect(
        "tools.max_image_bytes",
        at("tools.max_image_bytes", 60),
        attaches_png,
        "attached",
        "refused: images: shot.png is 70 bytes, more than tools.max_image_bytes (60)",
        at("model.vision", True),
    ),
    Effect(
        "tools.checkpoints",
        at("tools.checkpoints", "files"),
        ran(
            calls(("run_command", {"command": "true"})),
            lambda o: [e.problem for e in o.events if isinstance(e, WorkTreeSnapshot)][:1],
        ),
        ["the project is not in a git work tree"],
        ['tools.checkpoints is "files": what commands change is not kept'],
    ),
    Effect(
        "tools.fetch_max_bytes",
        at("tools.fetch_max_bytes", 10),
        ran(fetch(), lambda o: "hello from the table\nhello" in o.result()),
        True,
        False,
        at("tools.network.allowed_hosts", ["127.0.0.1"]),
    ),
    Effect(
        "tools.network.allowed_hosts",
        at("tools.network.allowed_hosts", ["127.0.0.1"]),
        ran(fetch(), lambda o: "hello from the table" in o.result()),
        False,
        True,
    ),
    # a listed domain passes the host check; its loopback address still needs allowed_hosts
    Effect(
        "tools.network.allowed_domains",
        at("tools.network.allowed_domains", ["localhost"]),
        ran(fetch("localhost"), lambda o: "resolves to 127.0.0.1" in o.result()),
        False,
        True,
    ),
    Effect(
        "tools.sensitive_paths",
        at("tools.sensitive_paths", ["secret.txt"]),
        ran(
            calls(("read_file", {"path": "secret.txt"})),
            lambda o: o.failed(),
            files={"project/secret.txt": "s\n"},
        ),
        False,
        True,
    ),
    Effect(
        "tools.mcp.disabled_servers",
        at("tools.mcp.disabled_servers", ["s"]),
        built(lambda c: c.adapters.mcp_hub() is None, MCP_JSON),
        False,
        True,
    ),
    Effect(
        "tools.mcp.disabled_tools",
        at("tools.mcp.disabled_tools", ["mcp__git__push"]),
        mcp_probe(lambda o, h: "mcp__git__push" in o.offered()),
        True,
        False,
    ),
    Effect(
        "tools.mcp.tool_overrides.<name>.description",
        at("tools.mcp.tool_overrides", {"mcp__git__status": {"description": "Git status."}}),
        mcp_probe(lambda o, h: described("mcp__git__status")(o) == "Git status."),
        False,
        True,
    ),
    Effect(
        "tools.mcp.tool_overrides.<name>.timeout_ms",
        at("tools.mcp.tool_overrides", {"mcp__git__status": {"timeout_ms": 5_000}}),
        mcp_probe(lambda o, h: h.calls[0].timeout_s, call="mcp__git__status"),
        60.0,
        5.0,
    ),
    Effect(
        "tools.mcp.tool_overrides.<name>.permission_class",
        at("tools.mcp.tool_overrides", {"mcp__git__status": {"permission_class": "read_only"}}),
        mcp_probe(lambda o, h: len(o.asked), call="mcp__git__status"),
        1,
        0,
    ),
    Effect(
        "tools.mcp.tool_overrides.<name>.name",
        at("tools.mcp.tool_overrides", {"mcp__git__status": {"name": "git_status"}}),
        mcp_probe(lambda o, h: "git_status" in o.offered()),
        False,
        True,
    ),
    Effect(
        "tools.mcp.discovery_cache_ttl_ms",
        at("tools.mcp.discovery_cache_ttl_ms", 1_000),
        built(lambda c: c.adapters.mcp_hub()._board.cache._ttl_s, MCP_JSON),
        300.0,
        1.0,
    ),
    Effect(
        "tools.mcp.startup_timeout_ms",
        at("tools.mcp.startup_timeout_ms", 2_000),
        built(lambda c: c.adapters.mcp_hub()._startup_timeout_s, MCP_JSON),
        10.0,
        2.0,
    ),
    Effect(
        "tools.mcp.call_timeout_ms",
        at("tools.mcp.call_timeout_ms", 5_000),
        mcp_probe(lambda o, h: h.calls[0].timeout_s, call="mcp__git__status"),
        60.0,
        5.0,
    ),
    Effect(
        "tools.mcp.sampling_profile",
        merged(at("tools.mcp.sampling_profile", "small"), at("model_overrides.small.name", "s")),
        built(lambda c: getattr(c.adapters.sampling_provider(), "label", "the run's model")),
        "the run's model",
        "openai s at https://api.openai.com/v1",
    ),
    Effect(
        "tools.defer_threshold",
        at("tools.defer_threshold", 1_000),
        ran(text("hi"), lambda o: "tool_search" in o.offered()),
        True,
        False,
    ),
    # [sandbox]
    Effect(
        "sandbox.os",
        at("sandbox.os", "off"),
        built(lambda c: getattr(c.adapters.command_sandboxing().choice.sandbox, "reason", None)),
        None,
        'sandbox.os = "off"',
    ),
    Effect(
        "sandbox.network",
        at("sandbox.network", True),
        built(lambda c: c.adapters.command_sandboxing().policy.network),
        False,
        True,
    ),
    # [storage]
    Effect(
        "storage.url",
        at("storage.url", "sqlite:///${SOONG_AGENT_HOME}/elsewhere.sqlite"),
        ran(text("hi"), lambda o: (o.home / "elsewhere.sqlite").exists()),
        False,
        True,
    ),
    Effect(
        "storage.password_env",
        {"storage": {"url": "postgresql://agent@db.example/agents", "password_env": "DB_PW"}},
        built(lambda c: c.adapters.storage_target().password_env),
        None,
        "DB_PW",
        base=at("storage.url", "postgresql://agent@db.example/agents"),
    ),
    Effect(
        "storage.pool_size",
        {"storage": {"url": "postgresql://agent@db.example/agents", "pool_size": 12}},
        built(lambda c: c.adapters.storage_target().pool_size),
        5,
        12,
        base=at("storage.url", "postgresql://agent@db.example/agents"),
    ),
    Effect(
        "storage.statement_timeout_ms",
        {"storage": {"url": "postgresql://agent@db.example/agents", "statement_timeout_ms": 900}},
        built(lambda c: c.adapters.storage_target().statement_timeout_ms),
        30_000,
        900,
        base=at("storage.url", "postgresql://agent@db.example/agents"),
    ),
    # [workers]
    Effect(
        "workers.heartbeat_ms",
        at("workers.heartbeat_ms", 1_500),
        built(lambda c: c.adapters.worker_settings().heartbeat_s),
        5.0,
        1.5,
    ),
    Effect(
        "workers.lease_timeout_ms",
        at("workers.lease_timeout_ms", 60_000),
        built(lambda c: c.adapters.worker_settings().lease_s),
        30.0,
        60.0,
    ),
    Effect(
        "workers.max_attempts",
        at("workers.max_attempts", 7),
        built(lambda c: c.adapters.worker_settings().max_attempts),
        3,
        7,
    ),
    Effect(
        "workers.approval_timeout_ms",
        at("workers.approval_timeout_ms", 90_000),
        built(lambda c: c.adapters.durable_approver()._timeout_s),
        None,
        90.0,
    ),
    # [telemetry]
    Effect(
        "telemetry.enabled",
        at("telemetry.enabled", True),
        built(lambda c: type(c.adapters.telemetry()).__name__),
        "NoneType",
        "OtelTelemetry",
    ),
    Effect(
        "telemetry.endpoint",
        {"telemetry": {"enabled": True, "endpoint": "http://collector.example:4318"}},
        built(lambda c: c.adapters.telemetry().export.traces_endpoint),
        "http://localhost:4318/v1/traces",
        "http://collector.example:4318/v1/traces",
        base=at("telemetry.enabled", True),
    ),
    Effect(
        "telemetry.protocol",
        {"telemetry": {"enabled": True, "protocol": "grpc"}},
        built(lambda c: c.adapters.telemetry().export.protocol),
        "http/protobuf",
        "grpc",
        base=at("telemetry.enabled", True),
    ),
    Effect(
        "telemetry.service_name",
        {"telemetry": {"enabled": True, "service_name": "billing-agents"}},
        built(lambda c: c.adapters.telemetry().export.resource["service.name"]),
        "soong-agent",
        "billing-agents",
        base=at("telemetry.enabled", True),
    ),
    Effect(
        "telemetry.resource_attributes",
        {"telemetry": {"enabled": True, "resource_attributes": {"deployment.environment": "prod"}}},
        built(lambda c: c.adapters.telemetry().export.resource.get("deployment.environment")),
        None,
        "prod",
        base=at("telemetry.enabled", True),
    ),
    Effect(
        "telemetry.record_content",
        {"telemetry": {"enabled": True, "record_content": True}},
        built(lambda c: c.adapters.telemetry().record_content),
        False,
        True,
        base=at("telemetry.enabled", True),
    ),
    # keys that are not settings
    *(
        Refused(key, at(key, 1), "the task board's settings live in [task]")
        for key in RETIRED_KEYS
        if key.startswith("context.")
    ),
]


# --- the tests -------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _web_server() -> Iterator[None]:
    yield
    WEB.close()


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    monkeypatch.setenv("TABLE_KEY", "key-from-env")
    monkeypatch.setenv("TABLE_VAR", "visible-value")
    monkeypatch.delenv("SOONG_AGENT_HOME", raising=False)
    return World(tmp_path)


def test_every_effect_row_expects_a_change() -> None:
    assert [r.key for r in ROWS if isinstance(r, Effect) and r.default == r.changed] == []


def test_every_key_of_the_schema_has_exactly_one_row() -> None:
    keys = [row.key for row in ROWS]
    assert sorted(keys) == sorted({*schema_keys(), *RETIRED_KEYS})


@pytest.mark.parametrize("row", [r for r in ROWS if isinstance(r, Effect)], ids=lambda r: r.key)
async def test_setting_the_key_changes_what_the_runtime_does(world: World, row: Effect) -> None:
    default = await row.probe(world, row.base)
    changed = await row.probe(world, merged(row.base, row.value))
    assert (default, changed) == (row.default, row.changed)


@pytest.mark.parametrize("row", [r for r in ROWS if isinstance(r, Refused)], ids=lambda r: r.key)
def test_setting_the_key_is_refused_naming_it(world: World, row: Refused) -> None:
    with pytest.raises(ConfigError) as refused:
        world.container(row.value).services.root_spec()
    message = str(refused.value)
    assert f"{row.where or row.key}: " in message and row.says in message, message


def test_the_docs_list_exactly_the_keys_of_the_schema() -> None:
    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    listed = documented_keys(text)
    sections = set(SoongConfig.model_fields)
    # `[model_overrides.<name>]` takes the keys of `[model]`, which its section says in words
    expected = {
        k for k in schema_entries() if k not in sections and not k.startswith("model_overrides.")
    }
    assert sorted(listed) == sorted(expected)
