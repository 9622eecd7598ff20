"""A long scripted session, shared by tests/integration/test_long_session.py and run by it as a
child process that is killed mid-run.

The scripted agent reads ~4,000-token slices of big data files on every turn, rewrites its todo
list every 10th turn and writes a note file every 7th turn, so the context outgrows a small
window again and again while the carry-over set (the user's request, the todo list, the files
touched) keeps changing. `LongSessionScript` plays the model and checks every request it is sent.

As a child process:

    python -m tests.support.long_session_child DB_PATH HANG_AT

runs that session against the SQLite file DB_PATH, prints ``session <id>`` and then ``turn <n>``
for every model call (flushed), and on turn HANG_AT calls a tool that never returns, after
printing ``hanging <n>`` once the earlier turns are on disk. The parent kills it there.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from soong_agent.adapters.tokens.o200k import O200kTokenCounter
from soong_agent.application.runs.assembler import RunAssembler, RunPolicies, RunPorts, RunSpec
from soong_agent.application.runs.loop import LoopSettings
from soong_agent.application.runs.service import RunService
from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput, ToolRegistry
from soong_agent.application.tools.files import file_tools
from soong_agent.application.tools.todo import (
    TodoBoard,
    TodoWriteArgs,
    render_todos,
    todo_write_tool,
)
from soong_agent.domain.config.schema import CompactConfig, ContextConfig
from soong_agent.domain.stuck import StuckSettings
from soong_agent.ports.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.storage import SessionStore
from soong_agent.ports.system import Clock, IdGenerator
from soong_agent.testing import (
    InMemoryFileSystem,
    RecordingApprover,
    ScriptedModel,
    ScriptedResponse,
    StaticContextSource,
)
from tests.support.harness import assert_every_call_answered

REQUEST = (
    "Work through every slice of the data files under data/, keep a todo list of the batches, "
    "and write a note file under out/ as you go (long-session test)."
)

WINDOW = 32_000
CONTEXT = ContextConfig(reserve_output_tokens=2_000, dynamic_system_budget=4_000)
COMPACT = CompactConfig(reserve_tokens=2_000, keep_recent_tokens=6_000, max_summary_tokens=1_000)
INPUT_LIMIT = WINDOW - CONTEXT.reserve_output_tokens
"""What a request may fill: the window less the output reserve."""

DATA_FILES = 4
DATA_LINES = 3_000
SLICE_LINES = 200
TODO_EVERY = 10
WRITE_EVERY = 7

_WORDS = (
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "theta",
    "kappa",
    "lambda",
    "sigma",
    "omega",
    "vector",
    "matrix",
    "tensor",
    "buffer",
    "socket",
    "thread",
    "mutex",
    "queue",
    "stack",
    "heap",
    "cache",
    "index",
    "table",
    "column",
    "row",
    "schema",
    "query",
    "commit",
    "branch",
    "merge",
    "rebase",
    "patch",
    "diff",
    "parser",
    "lexer",
    "token",
    "grammar",
    "module",
    "package",
    "import",
    "export",
    "config",
    "option",
    "flag",
    "value",
    "default",
    "timeout",
    "retry",
    "backoff",
    "jitter",
    "latency",
    "throughput",
    "sqlite",
    "journal",
    "checkpoint",
    "vacuum",
    "pragma",
    "cursor",
    "offset",
    "limit",
    "window",
    "budget",
    "summary",
    "context",
    "river",
    "mountain",
    "harbour",
    "lantern",
    "orchard",
    "meadow",
    "granite",
    "copper",
    "silver",
    "amber",
    "cedar",
    "willow",
)

_PATH_RE = re.compile(r"(?:data/part_\d+\.txt|out/note_\d{5}\.txt)")


def data_files() -> dict[str, str | bytes]:
    """The big files the agent reads: deterministic, varied text (~18 tokens a line)."""
    rng = random.Random(20_260_101)
    files: dict[str, str | bytes] = {}
    for k in range(DATA_FILES):
        lines = [
            f"part {k} record {i}: "
            + " ".join(rng.choices(_WORDS, k=12))
            + f" #{rng.randrange(10**6)}"
            for i in range(DATA_LINES)
        ]
        files[f"data/part_{k}.txt"] = "\n".join(lines) + "\n"
    return files


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """The tool calls of one turn, as (name, arguments) pairs."""

    number: int
    calls: tuple[tuple[str, dict[str, object]], ...]


def todo_arguments(n: int) -> dict[str, object]:
    """The whole todo list written on turn `n`: five batches around the current one."""
    batch = n // TODO_EVERY
    items = []
    for i in range(5):
        status = "completed" if i < 2 else "in_progress" if i == 2 else "pending"
        items.append(
            {
                "content": f"Process slice batch {batch + i - 2} of the data files",
                "status": status,
                "activeForm": f"Processing slice batch {batch + i - 2} of the data files",
            }
        )
    return {"todos": items}


def plan(n: int, *, todos: bool = True, writes: bool = True) -> TurnPlan:
    """What the agent does on tool turn `n` (1-based)."""
    calls: list[tuple[str, dict[str, object]]] = [
        (
            "read_file",
            {
                "path": f"data/part_{n % DATA_FILES}.txt",
                "offset": (n * 37) % (DATA_LINES - SLICE_LINES) + 1,
                "limit": SLICE_LINES,
            },
        )
    ]
    if todos and n % TODO_EVERY == 0:
        calls.append(("todo_write", todo_arguments(n)))
    if writes and n % WRITE_EVERY == 0:
        calls.append(
            ("write_file", {"path": f"out/note_{n:05d}.txt", "content": f"note of turn {n}\n"})
        )
    return TurnPlan(n, tuple(calls))


@dataclass
class CarryState:
    """What must be in every request: the latest request, the current todo list, the files."""

    request: str = REQUEST
    todos: str = ""
    files: dict[str, None] = field(default_factory=dict)

    def apply(self, turn: TurnPlan) -> None:
        for name, args in turn.calls:
            if name == "todo_write":
                self.todos = render_todos(TodoWriteArgs.model_validate(args).todos)
            elif name in ("read_file", "write_file"):
                self.files.setdefault(str(args["path"]))


def state_after(turns: int, **plan_options: bool) -> CarryState:
    """The carry-over once tool turns 1 … `turns` have run."""
    state = CarryState()
    for n in range(1, turns + 1):
        state.apply(plan(n, **plan_options))
    return state


# --------------------------------------------------------------------------- measuring


def _message_text(message: Message) -> str:
    parts: list[str] = [message.role]
    for block in message.content:
        if isinstance(block, TextBlock | ThinkingBlock):
            parts.append(block.text)
        elif isinstance(block, ToolCallBlock):
            parts += [block.name, block.arguments]
        elif isinstance(block, ToolResultBlock):
            parts.append(block.content)
    return "\n".join(parts)


class RequestSizer:
    """The o200k size of a whole request: system parts, tool specs (as JSON) and messages.

    Each message costs its text plus 4 tokens; a message's count is kept while it is still
    being sent, so a long session is measured in time proportional to the request.
    """

    MESSAGE_OVERHEAD = 4

    def __init__(self, counter: O200kTokenCounter, *, factor: float = 1.0) -> None:
        self._counter = counter
        self._factor = factor
        self._fixed: dict[tuple[str, ...], int] = {}
        self._cache: dict[str, int] = {}

    def __call__(self, request: ModelRequest) -> int:
        key = tuple(p.text for p in request.system) + tuple(t.name for t in request.tools)
        fixed = self._fixed.get(key)
        if fixed is None:
            specs = [
                {"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in request.tools
            ]
            fixed = sum(self._counter.count(p.text) for p in request.system)
            fixed += self._counter.count(json.dumps(specs))
            self._fixed[key] = fixed
        cache: dict[str, int] = {}
        total = fixed
        for message in request.messages:
            text = _message_text(message)
            tokens = self._cache.get(text)
            if tokens is None:
                tokens = self._counter.count(text) + self.MESSAGE_OVERHEAD
            cache[text] = tokens
            total += tokens
        self._cache = cache
        return int(total * self._factor + 0.999_999)


def carry_text(messages: Sequence[Message]) -> str:
    """Everything sent except the slices of data files (which never hold the carry-over)."""
    parts: list[str] = []
    for message in messages:
        for block in message.content:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ToolCallBlock):
                parts.append(block.arguments)
            elif isinstance(block, ToolResultBlock) and block.name != "read_file":
                parts.append(block.content)
    return "\n".join(parts)


def is_compact_request(request: ModelRequest) -> bool:
    return bool(request.system) and request.system[0].label == "compact"


# --------------------------------------------------------------------------- the model


class LongSessionScript:
    """Plays the model of a long session and checks every (non-summary) request it gets.

    Checked on each request: (a) its size is within `limit`; (b) the carry-over of the turns
    run so far is in it; (c) every tool call has exactly one result and the first message is
    a user message. Problems are collected in `failures`, never raised (the loop would turn an
    exception into a failed run and hide the first problem).
    """

    def __init__(
        self,
        *,
        turns: int,
        sizer: RequestSizer | None,
        limit: int = INPUT_LIMIT,
        first_turn: int = 1,
        state: CarryState | None = None,
        id_prefix: str = "c",
        todos: bool = True,
        writes: bool = True,
        on_turn: Callable[[int], ToolCallBlock | None] | None = None,
    ) -> None:
        self.last_turn = first_turn + turns - 1
        self.next_turn = first_turn
        self.sizer = sizer
        self.limit = limit
        self.state = state or CarryState()
        self.id_prefix = id_prefix
        self.plan_options = {"todos": todos, "writes": writes}
        self.on_turn = on_turn
        self.failures: list[str] = []
        self.checked = 0
        self.sizes: list[int] = []
        self.summaries = 0
        self.first_request: ModelRequest | None = None

    def __call__(self, request: ModelRequest) -> ScriptedResponse:
        if is_compact_request(request):
            self.summaries += 1
            return ScriptedResponse.text(
                f"Summary {self.summaries}: the agent has been reading slices of data/part_*.txt, "
                "updating its todo list and writing notes under out/; it continues with the "
                "next slice."
            )
        if self.first_request is None:
            self.first_request = request
        self.check(request)
        n = self.next_turn
        if n > self.last_turn:
            return ScriptedResponse.text("done: every slice is processed")
        self.next_turn += 1
        if self.on_turn is not None:
            special = self.on_turn(n)
            if special is not None:
                return ScriptedResponse.tool_calls(special)
        turn = plan(n, **self.plan_options)
        blocks = [
            ToolCallBlock(id=f"{self.id_prefix}{n}_{i}", name=name, arguments=json.dumps(args))
            for i, (name, args) in enumerate(turn.calls)
        ]
        self.state.apply(turn)  # the next request carries these calls (and then their results)
        return ScriptedResponse.tool_calls(*blocks, text=f"turn {n}")

    def check(self, request: ModelRequest) -> None:
        self.checked += 1
        where = f"request before turn {self.next_turn}"
        if self.sizer is not None:
            size = self.sizer(request)
            self.sizes.append(size)
            if size > self.limit:
                self.failures.append(f"{where}: {size} tokens, over the limit of {self.limit}")
        self.failures += [f"{where}: {p}" for p in carry_problems(request.messages, self.state)]
        try:
            assert_every_call_answered([request])
        except AssertionError as exc:
            self.failures.append(f"{where}: {exc}")
        if not request.messages or request.messages[0].role != "user":
            self.failures.append(f"{where}: the first message is not a user message")


def carry_problems(messages: Sequence[Message], state: CarryState) -> list[str]:
    """The parts of the carry-over `state` that `messages` do not hold verbatim."""
    text = carry_text(messages)
    problems = []
    if state.request not in text:
        problems.append("the latest user request is missing")
    if state.todos and state.todos not in text:
        problems.append(f"the todo list is missing: {state.todos.splitlines()[0]!r}")
    present = set(_PATH_RE.findall(text))
    missing = [p for p in state.files if p not in present]
    if missing:
        problems.append(f"{len(missing)} touched files are missing, e.g. {missing[:3]}")
    return problems


# --------------------------------------------------------------------------- wiring


def build_service(
    *,
    model: ScriptedModel,
    store: SessionStore,
    ids: IdGenerator,
    clock: Clock,
    max_turns: int,
    board: TodoBoard | None = None,
    fs: InMemoryFileSystem | None = None,
    extra_tools: list[Tool] | None = None,
    window: int = WINDOW,
    context: ContextConfig = CONTEXT,
    compact: CompactConfig = COMPACT,
    counter: O200kTokenCounter | None = None,
) -> RunService:
    """A RunService over real SQLite and the real o200k counter, scripted model, files in memory.

    Stuck detection is off: these long sessions repeat tool calls on purpose."""
    board = board if board is not None else TodoBoard()
    fs = fs if fs is not None else InMemoryFileSystem(data_files())
    todo_board = board
    assembler = RunAssembler(
        RunPorts(
            provider=model,
            store=store,
            fs=fs,
            context=StaticContextSource(),
            clock=clock,
            ids=ids,
            approver=RecordingApprover(default="allow_once"),
            token_counter=counter if counter is not None else O200kTokenCounter(),
        ),
        RunPolicies(
            context=context,
            compact=compact,
            context_window=window,
            provider_name="openai",
            cancel_timeout_s=5.0,
        ),
        todos=lambda session_id: (
            render_todos(todo_board.current_todos(session_id))
            if todo_board.current_todos(session_id)
            else ""
        ),
    )
    tools = ToolRegistry([*file_tools(), todo_write_tool(board), *(extra_tools or [])])
    settings = LoopSettings(model_label="scripted", max_turns=max_turns, stuck=StuckSettings.off())
    return RunService(assembler, RunSpec(tools=tools, settings=settings))


# --------------------------------------------------------------------------- the child process


class _NoArgs(ToolArgs):
    pass


async def _child(db_path: Path, hang_at: int) -> None:
    from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
    from soong_agent.adapters.system.clock import RandomIds, SystemClock

    async def hang(args: _NoArgs, ctx: ToolContext) -> ToolOutput:
        await asyncio.sleep(0.5)  # the group-commit writer drains the earlier turns meanwhile
        print(f"hanging {hang_at}", flush=True)
        await asyncio.sleep(3_600)
        return ToolOutput("never")

    def on_turn(n: int) -> ToolCallBlock | None:
        print(f"turn {n}", flush=True)
        if n == hang_at:
            return ToolCallBlock(id=f"k{n}_hang", name="hang", arguments="{}")
        return None

    script = LongSessionScript(turns=hang_at + 1_000, sizer=None, id_prefix="k", on_turn=on_turn)
    store = SqliteSessionStore(db_path)
    service = build_service(
        model=ScriptedModel(default=script, unique_call_ids=False),
        store=store,
        ids=RandomIds(),
        clock=SystemClock(),
        max_turns=hang_at + 2_000,
        extra_tools=[Tool("hang", "waits for a long time", _NoArgs, hang)],
    )
    run = await service.start(REQUEST)
    print(f"session {run.session_id}", flush=True)
    result = await run.wait()
    print(f"finished {result.status} {result.reason}", flush=True)


def main(argv: list[str]) -> None:
    db_path, hang_at = Path(argv[0]), int(argv[1])
    asyncio.run(_child(db_path, hang_at))


if __name__ == "__main__":
    main(sys.argv[1:])
