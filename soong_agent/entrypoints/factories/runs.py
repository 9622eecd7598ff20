"""What runs are made of: their policies, the root spec, the agent variants, the children,
the teams and the orchestrator."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import UsageError
from soong_agent.ports.model import ModelProvider
from soong_agent.ports.system import SecretSource

if TYPE_CHECKING:
    import httpx

    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.application.children.handoff import ChildQueue
    from soong_agent.application.children.launcher import ChildRuns, ChildSetup
    from soong_agent.application.runs.assembler import RunAssembler, RunPolicies, RunSpec
    from soong_agent.application.runs.starter import RunStarter
    from soong_agent.application.runs.variants import AgentVariants
    from soong_agent.application.teams.service import TeamService
    from soong_agent.application.tools.base import Tool
    from soong_agent.application.workers.dispatch import QueueHandoff
    from soong_agent.domain.config.resolve import ResolvedProfile
    from soong_agent.ports.agents import AgentSource
    from soong_agent.ports.mailbox import Mailbox
    from soong_agent.ports.run_queue import RunQueue
    from soong_agent.ports.storage import SessionStore
    from soong_agent.ports.system import Clock, IdGenerator
    from soong_agent.ports.tasks import TaskLog
    from soong_agent.ports.telemetry import Telemetry
    from soong_agent.ports.worktrees import Worktrees

from soong_agent.entrypoints.factories.knowledge import Knowledge
from soong_agent.entrypoints.factories.safety import CommandSandboxing
from soong_agent.entrypoints.factories.tools import ToolCatalog


def run_policies(loaded: LoadedConfig, profile: ResolvedProfile) -> RunPolicies:
    """The configuration every run of this runtime follows."""
    from soong_agent.application.runs.assembler import RunPolicies

    config = loaded.config
    return RunPolicies(
        permissions=config.permissions,
        context=config.context,
        compact=config.compact,
        context_window=profile.model.context_window,
        provider_name=profile.model.provider,
        max_result_chars=config.tools.max_result_chars,
        cancel_timeout_s=config.runtime.cancel_timeout_ms / 1000,
        max_stop_continuations=config.hooks.max_stop_continuations,
        mcp=config.tools.mcp,
        defer_threshold=config.tools.defer_threshold,
        tools=config.tools,
    )


def root_spec(
    loaded: LoadedConfig, catalog: ToolCatalog, profile: ResolvedProfile, provider: ModelProvider
) -> RunSpec:
    """What the root runs of this runtime are made of: the catalog's tools, the main model."""
    from soong_agent.application.runs.assembler import RunSpec
    from soong_agent.application.runs.loop import LoopSettings
    from soong_agent.domain.run_limits import RunLimits
    from soong_agent.domain.stuck import StuckSettings

    runtime, model = loaded.config.runtime, profile.model
    stuck = runtime.stuck
    return RunSpec(
        tools=catalog.registry,
        compact="compact" not in loaded.config.tools.disabled,
        settings=LoopSettings(
            model_label=provider.label,
            max_turns=runtime.max_turns,
            max_continuations=runtime.max_continuations,
            max_output_tokens=model.max_output_tokens,
            temperature=model.temperature,
            price=model.price,
            limits=RunLimits(
                max_cost_usd=runtime.max_cost_usd,
                max_tokens=runtime.max_tokens,
                max_wall_ms=runtime.max_wall_ms,
            ),
            stuck=StuckSettings(
                same_call=stuck.same_call,
                same_error=stuck.same_error,
                cycle=stuck.cycle,
                monologue=stuck.monologue,
                compaction=stuck.compaction,
                max_interventions=stuck.max_interventions,
            ),
        ),
    )


def agent_setups(
    loaded: LoadedConfig,
    assembler: RunAssembler,
    root: RunSpec,
    client: Callable[[], httpx.AsyncClient],
    secrets: SecretSource,
    known: Knowledge,
    agents: AgentSource,
    sandboxing: Callable[[], CommandSandboxing],
) -> AgentVariants:
    """How a run of each agent definition is put together: root, child and teammate alike
    (AGT-1, TEAM-4), over the ports it needs (definitions, a model per profile, the skills,
    a teammate's worktree)."""
    from soong_agent.application.runs.variants import AgentVariants, late_tools
    from soong_agent.entrypoints.factories.workspaces import ConfigProfileModels, WorktreeWorkspaces

    config = loaded.config

    def member_tools() -> list[Tool]:  # (a teammate's: imported only when teams are used)
        from soong_agent.application.tools.team import send_message_tool

        return late_tools([send_message_tool()], config)

    return AgentVariants(
        config,
        assembler,
        root,
        agents=agents,
        models=ConfigProfileModels(loaded, client, secrets),
        skills=known.skills,
        workspaces=WorktreeWorkspaces(loaded, sandboxing),
        member_tools=member_tools,
    )


def agent_presets(setups: AgentVariants) -> Callable[[str], ChildSetup]:
    """The set-up of a root run of each agent definition (AGT-1, AGT-3): definitions come
    from the built-ins and `${SOONG_AGENT_HOME}/agents` only; an unknown id is a UsageError
    listing the known ones."""
    return setups.root


def child_runs(
    loaded: LoadedConfig,
    setups: AgentVariants,
    starter: RunStarter,
    queue: ChildQueue | None = None,
) -> ChildRuns:
    """The runtime's child agents (AGT-2, AGT-4): how a child of each definition is put
    together (`AgentSetups.child`), the limits of `[agents]`, and the declared worker pools;
    `queue`: where pool workers are queued for any worker process (a worker's runtime)."""
    from soong_agent.application.children.launcher import ChildLimits, ChildRuns, Worker, WorkerPool
    from soong_agent.domain.agents import worker_id
    from soong_agent.domain.run_limits import RunLimits

    config = loaded.config
    source = setups.source
    pools = [
        WorkerPool(
            pool_id=pool.pool_id,
            workers=tuple(
                Worker(
                    pool=pool.pool_id,
                    worker_id=worker_id(pool.pool_id, i, w.agent_definition_id, w.worker_id),
                    agent=w.agent_definition_id,
                    allowed_tools=tuple(w.allowed_tools) if w.allowed_tools is not None else None,
                    limits=RunLimits(max_tokens=w.max_tokens, max_cost_usd=w.max_cost_usd),
                )
                for i, w in enumerate(pool.workers, start=1)
                if source.get(w.agent_definition_id) is not None
            ),
            limits=RunLimits(max_tokens=pool.max_tokens, max_cost_usd=pool.max_cost_usd),
        )
        for pool in config.agents.worker_pools
    ]
    agents = config.agents
    limits = ChildLimits(
        max_children_per_run=agents.max_children_per_run,
        max_concurrent_per_session=agents.max_concurrent_children_per_session,
        timeout_s=agents.default_child_timeout_ms / 1000,
        cancel_timeout_s=agents.child_cancel_timeout_ms / 1000,
        default_sub_agent=agents.default_sub_agent_definition,
    )
    return ChildRuns(
        setups.child, limits, pools=[p for p in pools if p.workers], starter=starter, queue=queue
    )


def queue_handoff(
    queue: RunQueue,
    store: SessionStore,
    clock: Clock,
    ids: IdGenerator,
    telemetry: Telemetry | None = None,
) -> QueueHandoff:
    """How a worker process's orchestrator runs queue their pool workers (AGT-4, WORK-1);
    with `telemetry`, each carries the trace of the call that queued it (OBS-1)."""
    from soong_agent.application.workers.dispatch import QueueHandoff

    return QueueHandoff(queue, store, clock=clock, ids=ids, telemetry=telemetry)


def team_service(
    loaded: LoadedConfig,
    assembler: RunAssembler,
    setups: AgentVariants,
    artifacts: ArtifactStore,
    closables: list[Callable[[], Awaitable[None]]],
    starter: RunStarter,
    inboxes: Mailbox,
    tasks: TaskLog,
    trees: Worktrees | None,
    queue: ChildQueue | None = None,
) -> TeamService:
    """The runtime's teams (issue 20): mailboxes under `<project>/.soong-agent/teams`, the
    task WALs, and a git worktree per teammate when `agents.worktrees` (default: when the
    project is a git repository); a teammate is put together by `AgentVariants.member`;
    `queue`: where members' runs are queued for any worker process (a worker's runtime)."""
    from soong_agent.application.teams.service import TeamLimits, TeamService

    agents = loaded.config.agents
    service = TeamService(
        store=assembler.ports.store,
        mailbox=inboxes,
        tasks=tasks,
        clock=assembler.ports.clock,
        ids=assembler.ports.ids,
        setup=setups.member,
        limits=TeamLimits(
            max_teammates=agents.max_teammates,
            run_timeout_s=agents.default_child_timeout_ms / 1000,
            cancel_timeout_s=agents.child_cancel_timeout_ms / 1000,
        ),
        worktrees=trees,
        artifacts=artifacts,
        starter=starter,
        queue=queue,
    )
    closables.append(service.close)
    return service


def pool_problems(loaded: LoadedConfig) -> list[str]:
    """Why each `agents.worker_pools` entry (or worker) cannot work: an unknown definition,
    a pool without workers (AGT-4)."""
    from soong_agent.adapters.agents import HomeAgentSource
    from soong_agent.domain.agents import unknown_agent_message

    source = HomeAgentSource(loaded.home)
    known = [d.id for d in source.definitions()]
    problems: list[str] = []
    for pool in loaded.config.agents.worker_pools:
        if not pool.workers:
            problems.append(f"agents.worker_pools: pool {pool.pool_id!r} lists no workers")
        for i, worker in enumerate(pool.workers, start=1):
            if source.get(worker.agent_definition_id) is None:
                problems.append(
                    f"agents.worker_pools: pool {pool.pool_id!r}, worker {i}: "
                    + unknown_agent_message(worker.agent_definition_id, known)
                )
    return problems


def orchestrator_spec(
    loaded: LoadedConfig, children: ChildRuns, teams: bool = True
) -> Callable[[RunSpec], RunSpec]:
    """The spec of an orchestrator's run (AGT-4): a spec's tools plus `dispatch_worker` over
    the declared pools. Without a usable pool it is a UsageError naming why."""
    made: dict[str | None, RunSpec] = {}
    persona = (
        "You are an orchestrator: split the work into a task graph (task_create, "
        "task_add_step), then hand work to workers with dispatch_worker, or to long-lived "
        "teammates (spawn_teammate, send_message, team_wait); workers and idle teammates claim "
        "ready steps themselves. Check the board, then report what was done."
    )

    def spec(base: RunSpec) -> RunSpec:
        if base.agent in made:
            return made[base.agent]
        import dataclasses  # (only for an orchestrator's run: the others never import these)

        from soong_agent.application.tools.agents import dispatch_worker_tool
        from soong_agent.application.tools.base import ToolRegistry
        from soong_agent.application.tools.team import lead_tools

        if not children.pools:
            problems = pool_problems(loaded)
            why = "; ".join(problems) if problems else "agents.worker_pools is empty"
            raise UsageError(
                "orchestrator mode needs at least one worker pool with a usable worker "
                f"({why}; in {loaded.path})"
            )
        from soong_agent.application.tools.catalog import apply_tool_config

        tool = dispatch_worker_tool(children.pools_text())
        team = lead_tools() if teams and loaded.config.agents.max_teammates > 0 else []
        # `tools.disabled` / `tools.overrides` reach the orchestrator's tools too (TOOL-3)
        added, _ = apply_tool_config([tool, *team], loaded.config.tools)
        made[base.agent] = dataclasses.replace(
            base,
            tools=ToolRegistry([*base.tools.tools(), *added]),
            persona="\n\n".join(p for p in (base.persona, persona) if p),
        )
        return made[base.agent]

    return spec
