"""dependency-injector containers: shared Adapters and Services, composed per entrypoint.

Containers are built inside an entrypoint call, never at import. Tests override providers
(`container.adapters.model_provider.override(...)`) instead of patching modules.
"""

from __future__ import annotations

from typing import Any

from soong_agent.application.runs.assembler import RunAssembler, RunPorts
from soong_agent.application.runs.service import RunService
from soong_agent.entrypoints import factories
from soong_agent.entrypoints.di import containers, providers


def _context_source(loaded: object) -> object:
    from soong_agent.adapters.system.context_source import FileContextSource

    return FileContextSource(
        home=loaded.home,  # type: ignore[attr-defined]
        project=loaded.project,  # type: ignore[attr-defined]
        sensitive=list(loaded.config.tools.sensitive_paths),  # type: ignore[attr-defined]
    )


def _todo_board() -> Any:
    from soong_agent.application.tools.todo import TodoBoard

    return TodoBoard()


def _todo_reader(board: Any, loaded: Any, tasks_log: Any, clock: Any) -> Any:
    """What compaction carries over as the plan of the work: the run's todo list, the
    session's active plan (PLAN-1) and its task board (TASK-2)."""
    from soong_agent.application.tools.todo import render_todos

    tasks = factories.task_board_reader(loaded, tasks_log, clock)
    plan = factories.active_plan_reader(loaded)

    def read(session_id: str) -> str:
        todos = board.current_todos(session_id)
        parts = [render_todos(todos) if todos else "", plan(session_id), tasks(session_id)]
        return "\n\n".join(p for p in parts if p)

    return read


def _clock() -> object:
    from soong_agent.adapters.system.clock import SystemClock

    return SystemClock()


def _ids() -> object:
    from soong_agent.adapters.system.clock import RandomIds

    return RandomIds()


def _secrets() -> object:
    from soong_agent.adapters.system.secrets import EnvSecretSource

    return EnvSecretSource()


def _snapshots() -> object:
    from soong_agent.adapters.worktrees.snapshots import GitSnapshots

    return GitSnapshots()


def _plan_modes() -> Any:
    from soong_agent.application.permissions.plan_mode import PlanModes

    return PlanModes()


def _run_starter(clock: Any, ids: Any) -> Any:
    from soong_agent.application.runs.starter import RunStarter

    return RunStarter(clock=clock, ids=ids)


def _skills_of(knowledge: factories.Knowledge) -> Any:
    return knowledge.skills


class Adapters(containers.DeclarativeContainer):
    """Every adapter, built lazily from the loaded config."""

    loaded: providers.Dependency[Any] = providers.Dependency()
    clock = providers.Singleton(_clock)
    ids = providers.Singleton(_ids)
    secrets = providers.Singleton(_secrets)
    closables: providers.Singleton[list[Any]] = providers.Singleton(list)
    http_client = providers.Singleton(factories.http_client, loaded, closables)
    main_profile = providers.Singleton(factories.main_profile, loaded)
    model_provider = providers.Singleton(
        factories.model_provider, loaded, main_profile, http_client, secrets
    )
    compact_profile = providers.Singleton(factories.compact_profile, loaded)
    compact_provider = providers.Singleton(
        factories.model_provider, loaded, compact_profile, http_client, secrets
    )
    databases = providers.Singleton(factories.StateDatabases, loaded)
    session_store = providers.Singleton(factories.session_store, loaded, closables, databases)
    artifact_store = providers.Singleton(factories.artifact_store, loaded, closables, databases)
    filesystem = providers.Singleton(factories.filesystem, loaded)
    context_source = providers.Singleton(_context_source, loaded)
    process_runner = providers.Singleton(factories.process_runner)
    command_sandboxing = providers.Singleton(factories.command_sandboxing, loaded, closables)
    command_runner = providers.Singleton(factories.command_runner, command_sandboxing)
    background = providers.Singleton(factories.tools.background_commands, loaded, closables)
    web_fetcher = providers.Singleton(factories.web_fetcher, loaded)
    token_counter = providers.Singleton(factories.token_counter, loaded)
    shell_analyzer = providers.Singleton(factories.LazyShellAnalyzer)
    redactor = providers.Singleton(factories.secret_redactor, loaded, secrets)
    hooks = providers.Singleton(
        factories.hook_pipeline, loaded, process_runner, closables, command_runner
    )
    mcp_authorize: providers.Provider[Any] = providers.Object(None)
    """Takes a person through an MCP server's OAuth login (`AgentRuntime(mcp_authorize=…)`)."""
    mcp_elicitor: providers.Provider[Any] = providers.Object(None)
    """Puts MCP servers' questions to the user (the CLI's terminal, an SDK callback)."""
    mcp_sampler: providers.Provider[Any] = providers.Object(None)
    """Answers approved sampling requests instead of a model (an SDK program's own)."""
    sampling_profile = providers.Singleton(factories.purpose_profile, loaded, "mcp_sampling")
    sampling_provider = providers.Singleton(
        factories.sampling_provider, loaded, sampling_profile, http_client.provider, secrets
    )
    mcp_asks = providers.Singleton(
        factories.mcp_asks,
        loaded,
        sampling_profile,
        sampling_provider.provider,
        mcp_elicitor,
        mcp_sampler,
    )
    mcp_hub = providers.Singleton(
        factories.mcp_hub, loaded, closables, authorize=mcp_authorize, asks=mcp_asks
    )
    given_telemetry: providers.Provider[Any] = providers.Object(None)
    """An application's own OpenTelemetry providers (`AgentRuntime(tracer_provider=…)`)."""
    telemetry = providers.Singleton(factories.telemetry, loaded, closables, given_telemetry)
    knowledge = providers.Singleton(factories.knowledge, loaded, redactor)
    agent_source = providers.Singleton(factories.agent_source, loaded)
    storage_target = providers.Singleton(factories.storage_target, loaded)
    worker_settings = providers.Singleton(factories.worker_settings, loaded)
    run_queue = providers.Singleton(factories.run_queue, loaded, closables, databases)
    approval_store = providers.Singleton(factories.approval_store, loaded, closables, databases)
    durable_approver = providers.Singleton(
        factories.durable_approver, loaded, approval_store, clock, ids, redactor
    )
    task_log = providers.Singleton(factories.task_log, loaded, closables, databases)
    mailbox = providers.Singleton(factories.mailbox, loaded, closables, databases)
    worktrees = providers.Singleton(factories.worktrees, loaded)
    snapshots = providers.Singleton(_snapshots)
    recall_profile = providers.Singleton(factories.purpose_profile, loaded, "memory_recall")
    recall_provider = providers.Singleton(
        factories.purpose_provider,
        loaded,
        recall_profile,
        model_provider,
        http_client.provider,
        secrets,
    )
    extract_profile = providers.Singleton(factories.purpose_profile, loaded, "memory_extract")
    extract_provider = providers.Singleton(
        factories.purpose_provider,
        loaded,
        extract_profile,
        model_provider,
        http_client.provider,
        secrets,
    )


class Services(containers.DeclarativeContainer):
    """Use cases over the adapters; `approver` and `user_tools` are what entrypoints supply."""

    loaded: providers.Dependency[Any] = providers.Dependency()
    adapters = providers.DependenciesContainer()
    approver: providers.Dependency[Any] = providers.Dependency()
    user_tools: providers.Dependency[Any] = providers.Dependency()
    todo_board = providers.Singleton(_todo_board)
    plan_modes = providers.Singleton(_plan_modes)
    catalog = providers.Singleton(
        factories.tool_catalog,
        loaded,
        adapters.command_runner,
        adapters.web_fetcher,
        adapters.artifact_store,
        todo_board,
        user_tools,
        adapters.command_sandboxing,
        adapters.knowledge,
        plan_modes,
        approver,
        adapters.task_log,
        adapters.clock,
        background=adapters.background,
    )
    ports = providers.Singleton(
        RunPorts,
        provider=adapters.model_provider,
        store=adapters.session_store,
        fs=adapters.filesystem,
        context=adapters.context_source,
        clock=adapters.clock,
        ids=adapters.ids,
        approver=approver,
        artifacts=adapters.artifact_store,
        compact_provider=adapters.compact_provider,
        token_counter=adapters.token_counter,
        shell_analyzer=adapters.shell_analyzer,
        redactor=adapters.redactor,
        hooks=adapters.hooks,
        mcp=adapters.mcp_hub,
        mcp_asks=adapters.mcp_asks,
        skills=providers.Callable(_skills_of, adapters.knowledge),
        plan_modes=plan_modes,
        snapshots=adapters.snapshots,
        background=adapters.background,
        telemetry=adapters.telemetry,
    )
    policies = providers.Singleton(factories.run_policies, loaded, adapters.main_profile)
    assembler = providers.Singleton(
        RunAssembler,
        ports,
        policies,
        todos=providers.Callable(
            _todo_reader, todo_board, loaded, adapters.task_log, adapters.clock
        ),
        task_board=providers.Callable(
            factories.task_board_reader, loaded, adapters.task_log, adapters.clock
        ),
    )
    root_spec = providers.Singleton(
        factories.root_spec, loaded, catalog, adapters.main_profile, adapters.model_provider
    )
    memory_recall = providers.Singleton(
        factories.memory_recall,
        loaded,
        adapters.knowledge,
        adapters.recall_provider,
        adapters.recall_profile,
        adapters.redactor,
    )
    memory_consolidation = providers.Singleton(
        factories.memory_consolidation,
        loaded,
        adapters.knowledge,
        adapters.session_store,
        adapters.extract_provider,
        adapters.clock,
        adapters.redactor,
    )
    memory_extraction = providers.Singleton(
        factories.memory_extraction,
        loaded,
        adapters.knowledge,
        adapters.session_store,
        adapters.extract_provider,
        adapters.extract_profile,
        adapters.clock,
        adapters.redactor,
        adapters.closables,
    )
    run_starter = providers.Singleton(_run_starter, adapters.clock, adapters.ids)
    agent_setups = providers.Singleton(
        factories.agent_setups,
        loaded,
        assembler,
        root_spec,
        adapters.http_client.provider,
        adapters.secrets,
        adapters.knowledge,
        adapters.agent_source,
        adapters.command_sandboxing.provider,
    )
    child_queue: providers.Provider[Any] = providers.Object(None)
    """Where pool workers are queued (None: they run in-process; a worker's: the run queue)."""
    child_runs = providers.Singleton(
        factories.child_runs, loaded, agent_setups, run_starter, child_queue
    )
    teams = providers.Singleton(
        factories.team_service,
        loaded,
        assembler,
        agent_setups,
        adapters.artifact_store,
        adapters.closables,
        run_starter,
        adapters.mailbox,
        adapters.task_log,
        adapters.worktrees,
        child_queue,
    )
    run_service = providers.Singleton(
        RunService,
        assembler,
        root_spec,
        recall=memory_recall,
        extraction=memory_extraction.provider,  # made at the end of the first run
        consolidation=memory_consolidation.provider,  # made once the first run is under way
        presets=providers.Callable(factories.agent_presets, agent_setups),
        children=child_runs,
        orchestrator=providers.Callable(factories.orchestrator_spec, loaded, child_runs),
        teams=teams.provider,
        starter=run_starter,
    )


class CliContainer(containers.DeclarativeContainer):
    """The CLI: the terminal asks for approval (`sessions` and `config` commands ask nobody)."""

    loaded: providers.Dependency[Any] = providers.Dependency()
    approver: providers.Object[Any] = providers.Object(None)
    adapters = providers.Container(Adapters, loaded=loaded)
    services = providers.Container(
        Services,
        loaded=loaded,
        adapters=adapters,
        approver=approver,
        user_tools=providers.Object([]),
    )


class SdkContainer(containers.DeclarativeContainer):
    """The SDK: the caller's callback approves, or nobody does (`write_without_callback`);
    the caller's Python functions join the tools."""

    loaded: providers.Dependency[Any] = providers.Dependency()
    approver: providers.Object[Any] = providers.Object(None)
    user_tools: providers.Object[Any] = providers.Object([])
    adapters = providers.Container(Adapters, loaded=loaded)
    services = providers.Container(
        Services, loaded=loaded, adapters=adapters, approver=approver, user_tools=user_tools
    )


class WorkerContainer(containers.DeclarativeContainer):
    """`soong-agent worker`: no terminal; a question is stored for anyone to answer (WORK-3)."""

    loaded: providers.Dependency[Any] = providers.Dependency()
    adapters = providers.Container(Adapters, loaded=loaded)
    services = providers.Container(
        Services,
        loaded=loaded,
        adapters=adapters,
        approver=adapters.durable_approver,
        user_tools=providers.Object([]),
        child_queue=providers.Singleton(
            factories.queue_handoff,
            adapters.run_queue,
            adapters.session_store,
            adapters.clock,
            adapters.ids,
            adapters.telemetry,
        ),
    )
