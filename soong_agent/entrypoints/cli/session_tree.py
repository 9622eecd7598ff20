"""What `sessions show` tells about child agents (AGT-2, AGT-4): the tree of a session's child
sessions (sub-agents, forks, workers, and theirs), what each cost, the total, and for an
orchestrator what each worker and pool used.

A session's own spend is what its runs' `run_finished` events say (a run that never finished:
its `usage` events so far); a child's spend is never in its parent's, so the total is the
session's own plus every descendant's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from soong_agent.ports.events import ChildFinished, ChildStarted, RunEvent, RunFinished, UsageEvent
from soong_agent.ports.storage import RunInfo, SessionInfo, SessionStore
from soong_agent.ports.streaming import Usage

MAX_DEPTH = 16
"""How deep the tree is followed (children of children …); deeper links are not shown."""
TASK_CHARS = 50


@dataclass(slots=True)
class Spend:
    """Usage and cost added up; `unpriced` when some of the usage had no price."""

    usage: Usage = field(default_factory=Usage)
    cost: float | None = None
    unpriced: bool = False
    count: int = 0

    def add(self, usage: Usage, cost: float | None) -> None:
        self.usage = self.usage + usage
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost
        elif usage.input_tokens or usage.output_tokens:
            self.unpriced = True
        self.count += 1

    def merged(self, other: Spend) -> Spend:
        both = Spend(self.usage + other.usage, self.cost, self.unpriced or other.unpriced)
        if other.cost is not None:
            both.cost = (both.cost or 0.0) + other.cost
        both.count = self.count + other.count
        return both

    def tokens(self) -> str:
        """``1200 in / 80 out tokens`` (the whole prompt, cache reads and writes included)."""
        u = self.usage
        prompt = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
        return f"{prompt} in / {u.output_tokens} out tokens"

    def cost_text(self) -> str:
        """``$0.0031``, ``cost unknown`` (no prices), or ``$0.0031 + unpriced usage``."""
        if self.cost is None:
            return "cost unknown"
        return f"${self.cost:.4f}" + (" + unpriced usage" if self.unpriced else "")

    def as_json(self) -> dict[str, Any]:
        return {
            "usage": self.usage.model_dump(mode="json"),
            "cost_usd": None if self.cost is None else round(self.cost, 6),
            "unpriced": self.unpriced,
        }


def session_spend(events_of: Mapping[str, Sequence[RunEvent]]) -> Spend:
    """What a session's runs used themselves (their children not included)."""
    spend = Spend()
    for events in events_of.values():
        finished = [e for e in events if isinstance(e, RunFinished)]
        if finished:
            spend.add(finished[-1].usage, finished[-1].cost_usd)
            continue
        for event in events:  # still running, or it never got to finish
            if isinstance(event, UsageEvent):
                spend.add(event.usage, event.cost_usd)
    return spend


@dataclass(slots=True)
class SessionNode:
    """One session of the tree: how it was started, how its last run ended, what it used."""

    session: SessionInfo
    runs: list[RunInfo]
    link: ChildStarted | None
    """The `child_started` event its first run opens with (None for a root session)."""
    own: Spend
    children: list[SessionNode] = field(default_factory=list)

    def total(self) -> Spend:
        spend = self.own
        for child in self.children:
            spend = spend.merged(child.total())
        return spend

    def descendants(self) -> int:
        return sum(1 + c.descendants() for c in self.children)


def link_of(
    events_of: Mapping[str, Sequence[RunEvent]], runs: Sequence[RunInfo]
) -> ChildStarted | None:
    """How a child session was started: the `child_started` event of its first run."""
    for run in runs[:1]:
        for event in events_of.get(run.id, ()):
            if isinstance(event, ChildStarted) and event.child_session_id == run.session_id:
                return event
    return None


async def load_tree(
    store: SessionStore,
    session: SessionInfo,
    runs: list[RunInfo],
    events_of: Mapping[str, Sequence[RunEvent]],
) -> SessionNode:
    """`session` (its runs and their events already read) and its descendants, read from
    `store`, children oldest first."""
    seen = {session.id}

    async def children_of(node: SessionNode, depth: int) -> None:
        if depth >= MAX_DEPTH:
            return
        for child in await store.child_sessions(node.session.id):
            if child.id in seen:  # a loop in the links: show each session once
                continue
            seen.add(child.id)
            child_runs = await store.list_runs(child.id)
            child_events = {r.id: await store.run_events(r.id) for r in child_runs}
            sub = SessionNode(
                child, child_runs, link_of(child_events, child_runs), session_spend(child_events)
            )
            node.children.append(sub)
            await children_of(sub, depth + 1)

    root = SessionNode(session, runs, link_of(events_of, runs), session_spend(events_of))
    await children_of(root, 0)
    return root


async def ancestry(store: SessionStore, session: SessionInfo) -> list[SessionInfo]:
    """The session's parent, its parent's parent … up to the root (nearest first)."""
    out: list[SessionInfo] = []
    seen = {session.id}
    parent_id = session.parent_session_id
    while parent_id is not None and parent_id not in seen and len(out) < MAX_DEPTH:
        seen.add(parent_id)
        parent = await store.get_session(parent_id)
        if parent is None:
            break
        out.append(parent)
        parent_id = parent.parent_session_id
    return out


@dataclass(slots=True)
class WorkerUse:
    pool: str
    worker: str
    agent: str
    spend: Spend = field(default_factory=Spend)


def worker_use(events_of: Mapping[str, Sequence[RunEvent]]) -> list[WorkerUse]:
    """What each worker did for this (orchestrator) session: its tasks (`child_finished`
    events of the session's runs), their usage and cost; by pool, then worker id."""
    found: dict[tuple[str, str], WorkerUse] = {}
    for events in events_of.values():
        for event in events:
            if not isinstance(event, ChildFinished) or event.kind != "worker":
                continue
            pool, worker = event.pool or "?", event.worker or "?"
            use = found.setdefault((pool, worker), WorkerUse(pool, worker, event.agent))
            use.spend.add(event.usage, event.cost_usd)
    return [found[key] for key in sorted(found)]


def pool_use(workers: Sequence[WorkerUse]) -> dict[str, Spend]:
    pools: dict[str, Spend] = {}
    for use in workers:
        pools[use.pool] = pools.get(use.pool, Spend()).merged(use.spend)
    return pools


# --- text ----------------------------------------------------------------------------------


def label(link: ChildStarted | None, session: SessionInfo) -> str:
    """``sub-agent reviewer``, ``fork``, ``worker p/w1 (agent default_worker_agent)``,
    ``teammate alice (agent reviewer)``."""
    if link is None:
        return f"child agent {session.agent}" if session.agent else "child session"
    if link.kind == "worker":
        return f"worker {link.pool}/{link.worker} (agent {link.agent})"
    if link.kind == "fork":
        return "fork"
    if link.kind == "teammate":
        return f"teammate {link.worker} (agent {link.agent})"
    return f"sub-agent {link.agent}"


def _task(link: ChildStarted | None) -> str:
    if link is None:
        return ""
    text = " ".join(link.task.split())
    return text if len(text) <= TASK_CHARS else text[: TASK_CHARS - 1] + "…"


def _status(runs: Sequence[RunInfo]) -> str:
    if not runs:
        return "no runs"
    last = runs[-1]
    reason = f" ({last.reason})" if last.reason and last.status != "completed" else ""
    return last.status + reason


def origin_lines(
    session: SessionInfo, link: ChildStarted | None, parents: Sequence[SessionInfo]
) -> list[str]:
    """For a child session: whose child it is, and how it was started."""
    if session.parent_session_id is None:
        return []
    how = label(link, session)
    via = f", started by run {link.parent_run_id}" if link is not None else ""
    lines = [f"child of session {session.parent_session_id} ({how}{via})\n"]
    if len(parents) > 1:
        lines.append(f"root session {parents[-1].id}\n")
    task = _task(link)
    if task:
        lines.append(f"task: {task}\n")
    return lines


def tree_lines(root: SessionNode) -> list[str]:
    """The child sessions as an indented tree, then the total; nothing without children."""
    if not root.children:
        return []
    lines = [f"child sessions ({root.descendants()}):\n"]

    def walk(node: SessionNode, depth: int) -> None:
        for child in node.children:
            total = child.total()
            spend = f"{child.own.tokens()}, {child.own.cost_text()}"
            if child.children:
                spend += f"; with its children {total.cost_text()}"
            task = _task(child.link)
            lines.append(
                f"{'  ' * depth}{child.session.id}  {label(child.link, child.session)}  "
                f"{_status(child.runs)}, {spend}" + (f"  {task!r}" if task else "") + "\n"
            )
            walk(child, depth + 1)

    walk(root, 1)
    own = root.own
    total = root.total()
    lines.append(
        f"total: {total.tokens()}, {total.cost_text()} (this session {own.cost_text()}, "
        f"{root.descendants()} child session(s) "
        f"{_children_spend(root).cost_text()})\n"
    )
    return lines


def _children_spend(root: SessionNode) -> Spend:
    spend = Spend()
    for child in root.children:
        spend = spend.merged(child.total())
    return spend


def worker_lines(workers: Sequence[WorkerUse]) -> list[str]:
    """Per pool, then per worker: tasks, tokens and cost (orchestrator sessions)."""
    if not workers:
        return []
    lines = ["workers:\n"]
    pools = pool_use(workers)
    for pool, spend in pools.items():
        lines.append(f"  pool {pool}: {_tasks(spend)}, {spend.tokens()}, {spend.cost_text()}\n")
        for use in (w for w in workers if w.pool == pool):
            s = use.spend
            lines.append(
                f"    worker {use.worker} ({use.agent}): {_tasks(s)}, {s.tokens()}, "
                f"{s.cost_text()}\n"
            )
    return lines


def _tasks(spend: Spend) -> str:
    return f"{spend.count} task{'s' if spend.count != 1 else ''}"


# --- JSON ----------------------------------------------------------------------------------


def node_json(node: SessionNode) -> dict[str, Any]:
    link = node.link
    last = node.runs[-1] if node.runs else None
    return {
        "session_id": node.session.id,
        "title": node.session.title,
        "kind": link.kind if link else None,
        "agent": link.agent if link else node.session.agent,
        "pool": link.pool if link else None,
        "worker": link.worker if link else None,
        "task": link.task if link else None,
        "status": last.status if last else None,
        "reason": last.reason if last else None,
        "runs": len(node.runs),
        **node.own.as_json(),
        "total": node.total().as_json(),
        "children": [node_json(c) for c in node.children],
    }


def tree_json(root: SessionNode, workers: Sequence[WorkerUse]) -> dict[str, Any]:
    """What `sessions show -o json` adds about children, costs and workers."""
    link = root.link
    return {
        "started_as": link.model_dump(mode="json") if link is not None else None,
        "own": root.own.as_json(),
        "total": {**root.total().as_json(), "child_sessions": root.descendants()},
        "children": [node_json(c) for c in root.children],
        "workers": [
            {"pool": w.pool, "worker": w.worker, "agent": w.agent, "tasks": w.spend.count}
            | w.spend.as_json()
            for w in workers
        ],
        "pools": [
            {"pool": pool, "tasks": spend.count} | spend.as_json()
            for pool, spend in pool_use(workers).items()
        ],
    }
