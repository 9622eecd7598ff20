"""The spawning tools (AGT-2, AGT-4): `create_sub_agent`, `fork_agent` and `dispatch_worker`.

Each hands its call to the run's `ChildLauncher` (`ToolContext.children`), which runs the child
as a run of its own session, linked to the parent's, and returns only its final answer. A run
that may not start agents (a sub-agent, a fork, a worker) has no launcher: the call is an
error the model is told about.

The arguments ignore keys they do not know (a `model` the model made up, say): which model a
child uses is its definition's `model_profile`, never the calling model's choice.

Starting a child changes nothing by itself (the child's own tool calls are checked and asked
about like any other), so these are ``read_only`` for the permission engine, and several in
one turn run side by side.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput

SPAWNING_TOOLS: frozenset[str] = frozenset({"create_sub_agent", "fork_agent", "dispatch_worker"})
"""Never offered to a child: sub-agents, forks and workers cannot start agents."""

_TASK = Field(
    min_length=1,
    description=(
        "The whole task, self-contained: the child sees nothing else of this conversation "
        "(a fork sees it, up to this call). Say what to return."
    ),
)
_NO_CHILDREN = (
    "this agent cannot start other agents: sub-agents, forks and workers do their task themselves"
)


class _SpawnArgs(ToolArgs):
    model_config = ConfigDict(extra="ignore")


class SubAgentArgs(_SpawnArgs):
    task: str = _TASK
    agent_id: str | None = Field(
        default=None,
        description="The agent definition to run (see `soong-agent agents list`); omit it for "
        "the default sub-agent.",
    )


class ForkArgs(_SpawnArgs):
    task: str = _TASK


class DispatchArgs(_SpawnArgs):
    pool: str = Field(min_length=1, description="The worker pool's id.")
    task: str = _TASK
    worker: str | None = Field(
        default=None, description="A worker id of the pool; omit it to use an idle worker."
    )


def _summary(kind: str, task: str) -> tuple[str, str]:
    line = task.strip().splitlines()[0] if task.strip() else ""
    return "*", f"start {kind}: {line[:80]}"


async def _sub_agent(args: SubAgentArgs, ctx: ToolContext) -> ToolOutput:
    if ctx.children is None:
        return ToolOutput(_NO_CHILDREN, is_error=True)
    return await ctx.children.sub_agent(args.agent_id, args.task, ctx.call_id)


async def _fork(args: ForkArgs, ctx: ToolContext) -> ToolOutput:
    if ctx.children is None:
        return ToolOutput(_NO_CHILDREN, is_error=True)
    return await ctx.children.fork(args.task, ctx.call_id)


async def _dispatch(args: DispatchArgs, ctx: ToolContext) -> ToolOutput:
    if ctx.children is None:
        return ToolOutput(_NO_CHILDREN, is_error=True)
    return await ctx.children.worker(args.pool, args.task, args.worker, ctx.call_id)


def agent_tools() -> list[Tool]:
    """`create_sub_agent` and `fork_agent`, for root runs."""
    return [
        Tool(
            name="create_sub_agent",
            description=(
                "Hand a self-contained task to a sub-agent with a fresh context; only its final "
                "answer comes back. Use it for a search or review whose details you do not need."
            ),
            args_model=SubAgentArgs,
            handler=_sub_agent,
            describe=lambda a, c: _summary("a sub-agent", a.task),
        ),
        Tool(
            name="fork_agent",
            description=(
                "Start a fork of yourself on one sub-task: it sees this conversation so far and "
                "returns its final answer."
            ),
            args_model=ForkArgs,
            handler=_fork,
            describe=lambda a, c: _summary("a fork", a.task),
        ),
    ]


def dispatch_worker_tool(pools: str) -> Tool:
    """`dispatch_worker` for an orchestrator run; `pools` lists the pools and their workers."""
    return Tool(
        name="dispatch_worker",
        description=(
            "Run a task on a worker of a pool (orchestrator mode); the worker's final report "
            f"comes back. Workers claim steps of the task graph themselves. Pools: {pools}"
        ),
        args_model=DispatchArgs,
        handler=_dispatch,
        describe=lambda a, c: _summary(f"worker in pool {a.pool}", a.task),
    )
