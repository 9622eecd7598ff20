"""The tool contract and the dispatch map (TOOL-1: adding a tool never changes the loop)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from soong_agent.ports.approval import PermissionClass
from soong_agent.ports.filesystem import FileSystem
from soong_agent.ports.messages import ImageBlock
from soong_agent.ports.model import ToolSpec
from soong_agent.ports.ossandbox import SandboxDenial
from soong_agent.ports.streaming import Usage


class ToolArgs(BaseModel):
    """Base of tool argument models: unknown arguments are errors the model is told about."""

    model_config = ConfigDict(extra="forbid")


def no_nul(value: str | None) -> str | None:
    """A field validator for texts that reach a path, a pattern or a command line, none of
    which can hold a NUL character: the model is told which argument holds one."""
    if value is not None and "\x00" in value:
        raise ValueError("holds a NUL character (\\x00), which it cannot")
    return value


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool hands back to the model, and what the OS sandbox refused the command it
    ran (`denials`: each becomes a ``sandbox_denied`` event; the content already notes them)."""

    content: str
    is_error: bool = False
    denials: tuple[SandboxDenial, ...] = ()
    events: tuple[tuple[type[Any], Mapping[str, Any]], ...] = ()
    """Run events the call gives rise to (an event class and its fields, e.g. a memory the
    policy refused); the pipeline records them before the call's result."""
    images: tuple[ImageBlock, ...] = ()
    """Images shown to the model with the text (read_file on an image, PROV-7): the result
    block carries them."""


class ChildLauncher(Protocol):
    """What a run that may start other agents (AGT-2, AGT-4) hands its spawning tools."""

    async def sub_agent(self, agent_id: str | None, task: str, call_id: str) -> ToolOutput:
        """Run a sub-agent of definition `agent_id` (None: the configured default) on `task`
        in a fresh context; its final answer is the output."""
        ...

    async def fork(self, task: str, call_id: str) -> ToolOutput:
        """Run a fork: a copy of the parent's context plus `task`."""
        ...

    async def worker(self, pool: str, task: str, worker: str | None, call_id: str) -> ToolOutput:
        """Run `task` on a worker of the orchestrator pool `pool` (`worker`: that one)."""
        ...

    def spent(self) -> tuple[Usage, float | None]:
        """The usage and cost of the run's finished children (its budgets count them)."""
        ...

    def watch_parent(self, spent: Callable[[], tuple[Usage, float | None]]) -> None:
        """Where the parent's own usage and cost are read (a child gets what is left of the
        parent's budgets)."""
        ...


class TeamSeat(Protocol):
    """A run's place in a team (issue 20): the lead's, or a teammate's (`member`)."""

    member: str

    async def inbox(self) -> str:
        """The mail that arrived since the last look, rendered for the model (marked read);
        "" when there is none."""
        ...

    async def spawn(self, definition: str, name: str, prompt: str, labels: list[str]) -> ToolOutput:
        """Add a teammate of agent definition `definition` named `name`; `prompt` is its
        first mail."""
        ...

    async def send(self, to: str, kind: str, body: str, data: dict[str, Any]) -> ToolOutput:
        """Send a mail of `kind` to the member `to` (or ``lead``)."""
        ...

    async def status(self) -> ToolOutput:
        """The roster: each member's role, status and current step."""
        ...

    async def wait(self, timeout_s: float) -> ToolOutput:
        """Wait for mail to this seat, or for the team to go quiet."""
        ...

    async def worktree(self, action: str, member: str, message: str) -> ToolOutput:
        """`review`, `accept` (merge, `message` for the commit) or `reject` a member's
        worktree."""
        ...


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What every tool handler may use.

    `call_id` is the id of the tool call being handled; `children` starts child agents for the
    run (None in runs that may not: sub-agents, forks and workers); `task_session_id` is the
    session whose task graphs the task tools work on (None: the run's own; a worker's is its
    orchestrator's).
    """

    fs: FileSystem
    session_id: str
    run_id: str
    call_id: str = ""
    children: ChildLauncher | None = None
    task_session_id: str | None = None
    actor: str | None = None
    """Who the run acts as in task graphs (a teammate's name); None: the run itself."""
    team: TeamSeat | None = None
    """The run's seat in a team (the lead's or a teammate's); None: not in a team."""

    @property
    def task_session(self) -> str:
        """The session whose task graphs the task tools read and write."""
        return self.task_session_id or self.session_id

    @property
    def task_actor(self) -> str:
        """The actor of the task records the run writes, and the owner of its claims."""
        return self.actor or self.run_id


Handler = Callable[[Any, ToolContext], Awaitable[ToolOutput]]
Describer = Callable[[Any, ToolContext], tuple[str, str]]
Previewer = Callable[[Any, ToolContext], Awaitable[str]]


def _whole_tool(args: Any, ctx: ToolContext) -> tuple[str, str]:
    return "*", "call the tool"


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool: what the model sees, how arguments are checked, what it does, what it may touch.

    `describe` maps validated arguments to (session scope, one-line summary) for permission
    prompts and grants; `target_field` and `target_kind` say which argument rules match.
    `timeout_ms` is set only by tools that take a timeout (run_command, declarative tools): the
    effective one, `tools.overrides` included, which the handler uses.
    """

    name: str
    description: str
    args_model: type[BaseModel]
    handler: Handler
    permission_class: PermissionClass = "read_only"
    describe: Describer = _whole_tool
    timeout_ms: int | None = None
    target_field: str | None = None
    """The argument naming what a call acts on, for rules and grants; None: the usual field
    names (`path`, `command`, `url`) are looked for."""
    target_kind: Literal["path", "command", "url"] | None = None
    deferrable: bool = False
    """May be offered by name only, loaded through `tool_search`, when a run has more tools
    than `tools.defer_threshold` (MCP tools, plans, tasks, memory, skills; never the core
    file, command and web tools)."""
    parameters: dict[str, Any] | None = None
    """The JSON schema the model is shown, when it is not `args_model`'s (MCP tools carry
    their server's schema; their arguments are checked by the server)."""
    preview: Previewer | None = None
    """What a call would change, in plain text (a file tool's unified diff), for the approval
    prompt's `detail`; called only when a person is about to be asked."""

    @property
    def spec(self) -> ToolSpec:
        if self.parameters is not None:
            return _schema_spec(self.name, self.description, self.parameters)
        return _spec(self.name, self.description, self.args_model)


@functools.lru_cache(maxsize=1024)
def _spec(name: str, description: str, args_model: type[BaseModel]) -> ToolSpec:
    """A tool's spec, built once per (name, description, arguments model): building a JSON
    schema costs ~0.5 ms a tool, and every run of a runtime sends the same ones. The schema
    dict is shared, so nobody may change it."""
    schema = _lean(args_model.model_json_schema())
    schema.pop("description", None)  # the argument model's docstring: the tool says it better
    return ToolSpec(name=name, description=description, parameters=schema)


def _lean(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` without the `title` pydantic gives every schema object (the property's own name
    says it again): tokens every request pays for, on a small window too. A property *named*
    `title` is kept: only the keyword goes."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {k: _lean(v) if isinstance(v, dict) else v for k, v in value.items()}
        elif isinstance(value, dict):
            out[key] = _lean(value)
        elif isinstance(value, list):
            out[key] = [_lean(v) if isinstance(v, dict) else v for v in value]
        else:
            out[key] = value
    return out


_JOINED_MAX = 256
_JOINED: dict[tuple[int, ...], tuple[list[ToolSpec], list[ToolSpec], list[ToolSpec]]] = {}
"""Spec lists joined by `_joined`, by the ids of their parts (kept alive with the result, so
the ids stay theirs)."""


def _joined(head: list[ToolSpec], tail: list[ToolSpec]) -> list[ToolSpec]:
    """`head` then `tail`, as the same list object for the same spec objects: a runtime's runs
    join the same cached specs every time, and what is derived from a run's specs (the
    catalogue, the request's tool text) is remembered by that list's identity. Nobody may
    change the list."""
    if not tail:
        return head
    key = (id(head), *map(id, tail))
    hit = _JOINED.get(key)
    if hit is not None:
        return hit[2]
    joined = [*head, *tail]
    if len(_JOINED) >= _JOINED_MAX:
        _JOINED.clear()
    _JOINED[key] = (head, tail, joined)
    return joined


_SCHEMA_SPECS_MAX = 4096
_SCHEMA_SPECS: dict[tuple[str, str, int], tuple[dict[str, Any], ToolSpec]] = {}
"""`_schema_spec` by name, description and the id of the schema (kept alive with the spec,
so the id stays its own)."""


def _schema_spec(name: str, description: str, parameters: dict[str, Any]) -> ToolSpec:
    """The spec of a tool that carries its own schema (an MCP tool), the same object for the
    same schema object: what is built from a run's specs is remembered by their identity."""
    key = (name, description, id(parameters))
    hit = _SCHEMA_SPECS.get(key)
    if hit is not None:
        return hit[1]
    spec = ToolSpec(name=name, description=description, parameters=parameters)
    if len(_SCHEMA_SPECS) >= _SCHEMA_SPECS_MAX:
        _SCHEMA_SPECS.clear()
    _SCHEMA_SPECS[key] = (parameters, spec)
    return spec


class ToolRegistry:
    """Tools by name, in the order they were added.

    What depends only on the tools (their specs, the names of the deferrable ones) is built
    once, when first asked for, and again only after the tools changed."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        listed = list(tools)
        self._tools: dict[str, Tool] = {t.name: t for t in listed}
        if len(self._tools) != len(listed):
            _twice(listed)
        self._specs: list[ToolSpec] | None = None
        self._deferrable: frozenset[str] | None = None

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        self._tools[tool.name] = tool
        self._specs = None
        self._deferrable = None

    def extended(self, tools: Sequence[Tool] = ()) -> ToolRegistry:
        """A new registry: this one's tools, then `tools` (ValueError when a name is taken).
        What this registry built of its tools is not built again."""
        out = ToolRegistry.__new__(ToolRegistry)
        merged = out._tools = dict(self._tools)
        specs, deferrable = self.specs(), self.deferrable_names()
        if tools:
            for tool in tools:
                if tool.name in merged:
                    raise ValueError(f"tool {tool.name!r} is registered twice")
                merged[tool.name] = tool
            specs = _joined(specs, [t.spec for t in tools])
            added = [t.name for t in tools if t.deferrable]
            if added:
                deferrable = deferrable.union(added)
        out._specs, out._deferrable = specs, deferrable
        return out

    def replace_all(self, tools: Iterable[Tool] | ToolRegistry) -> None:
        """Hold exactly `tools` from now on (a run whose tool set changed between model calls:
        everyone holding this registry sees the new set). Given a registry, its tools, with
        what it has built of them."""
        if isinstance(tools, ToolRegistry):  # its dict stays its own
            self._tools = dict(tools._tools)
            self._specs, self._deferrable = tools._specs, tools._deferrable
        else:
            fresh = ToolRegistry(tools)
            self._tools, self._specs, self._deferrable = fresh._tools, None, None

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def tools(self) -> list[Tool]:
        """The tools in the order they were added."""
        return list(self._tools.values())

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        """What the model is told about each tool, in order (the list is shared: nobody may
        change it)."""
        if self._specs is None:
            self._specs = [t.spec for t in self._tools.values()]
        return self._specs

    def deferrable_names(self) -> frozenset[str]:
        """The names of the tools that may be offered by name only (`Tool.deferrable`)."""
        if self._deferrable is None:
            self._deferrable = frozenset(t.name for t in self._tools.values() if t.deferrable)
        return self._deferrable


def _twice(tools: list[Tool]) -> None:
    """Raise the ValueError naming the first tool of `tools` whose name is taken."""
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        seen.add(tool.name)
