"""Human-readable live output of a run: answer text on stdout, tool activity on stderr."""

from __future__ import annotations

import json
import sys
from typing import TextIO

from soong_agent.application.runs.handle import RunResult
from soong_agent.ports.events import (
    BudgetExhausted,
    ChildFinished,
    ChildStarted,
    ErrorEvent,
    HookFailed,
    InstructionsLoaded,
    McpElicitationEvent,
    McpSamplingEvent,
    McpServerEvent,
    MemoryRejected,
    ModelRetry,
    NetworkDenied,
    PermissionDecided,
    PermissionSuggestion,
    RunEvent,
    SandboxDenied,
    StuckDetected,
    TeamChanged,
    TextDeltaEvent,
    ToolCallRequested,
    ToolResultEvent,
)
from soong_agent.ports.secrets import SecretRedactor

_ARG_PREVIEW = 80


def _first_line(text: str, limit: int = 100) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def child_label(event: ChildStarted | ChildFinished) -> str:
    """``sub-agent reviewer``, ``fork``, ``worker build/w1``: which child an event is about."""
    if event.kind == "worker":
        return f"worker {event.pool}/{event.worker}"
    if event.kind == "teammate":
        return f"teammate {event.worker}"
    return "fork" if event.kind == "fork" else f"sub-agent {event.agent}"


def call_preview(name: str, arguments: str) -> str:
    """``write_file(path=hello.txt, content=…)``: the call as one short line."""
    try:
        args = json.loads(arguments or "{}")
    except (ValueError, RecursionError):  # not JSON, or nested deeper than it can be read
        return f"{name}({_first_line(arguments, _ARG_PREVIEW)})"
    if not isinstance(args, dict):
        return f"{name}({_first_line(str(args), _ARG_PREVIEW)})"
    parts = []
    for key, value in args.items():
        shown = value if isinstance(value, str) else json.dumps(value)
        if len(shown) > 40 or "\n" in shown:
            shown = _first_line(shown, 40) + "…" if "\n" in shown else shown[:39] + "…"
        parts.append(f"{key}={shown}")
    return f"{name}({', '.join(parts)})"


def mcp_line(event: McpServerEvent) -> str | None:
    """One short line for a server's state change; None for the quiet ones (starting,
    stopped) and for a cached tool list (the live one follows)."""
    name = f"  mcp {event.server}"
    match event.state:
        case "ready" if not event.from_cache:
            took = f", {event.startup_ms:.0f} ms" if event.startup_ms is not None else ""
            return f"{name}: ready ({event.tool_count or 0} tools{took})"
        case "failed":
            return f"{name}: FAILED: {_first_line(event.detail, 160)}"
        case "crashed":
            last = f"; {_first_line(event.stderr_tail[-1])}" if event.stderr_tail else ""
            how = f" (exit {event.exit_code})" if event.exit_code is not None else ""
            return f"{name}: crashed{how}{last}"
        case "restarting":
            return f"{name}: restarting in {event.backoff_s or 0:.1f} s (attempt {event.attempt})"
        case _:
            return None


class Renderer:
    """Streams one run to the terminal.

    The events it shows were scrubbed of secrets by the run's recorder (CFG-6); with a
    `redactor`, every status line and approval question is scrubbed again on its way out
    (they may quote a tool call or an error that never went through an event).
    """

    def __init__(
        self,
        *,
        out: TextIO | None = None,
        err: TextIO | None = None,
        redactor: SecretRedactor | None = None,
    ) -> None:
        self._out = out or sys.stdout
        self._err = err or sys.stderr
        self._mid_line = False
        self._redactor = redactor

    def use_redactor(self, redactor: SecretRedactor | None) -> None:
        """Scrub what is written from now on (the redactor exists once the runtime is built,
        after the renderer that its approval prompts write through)."""
        self._redactor = redactor

    def clean(self, text: str) -> str:
        """`text` scrubbed of secrets (unchanged without a redactor)."""
        return self._redactor.redact(text) if self._redactor is not None else text

    def _end_text_line(self) -> None:
        if self._mid_line:
            self._out.write("\n")
            self._out.flush()
            self._mid_line = False

    def status(self, line: str) -> None:
        """A line about what is happening (stderr)."""
        self._end_text_line()
        self._err.write(self.clean(line) + "\n")
        self._err.flush()

    def prompt(self, text: str) -> None:
        """Text of an approval question (stderr, no newline added)."""
        self._end_text_line()
        self._err.write(self.clean(text))
        self._err.flush()

    def handle(self, event: RunEvent) -> None:
        if isinstance(event, TextDeltaEvent):
            self._out.write(event.text)
            self._out.flush()
            self._mid_line = not event.text.endswith("\n")
            return
        line = status_line(event)
        if line:
            self.status(line)

    def finished(self, result: RunResult) -> None:
        self._end_text_line()
        usage = result.usage
        about = "~" if usage.estimated else ""
        tokens = (
            f", {about}{usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens}"
            f" in / {about}{usage.output_tokens} out tokens"
            if usage.input_tokens or usage.output_tokens
            else ""
        )
        if usage.estimated:
            tokens += " (estimated where the server reported none)"
        if usage.cache_read_tokens:
            tokens += f" ({usage.cache_read_tokens} from cache)"
        if result.cost_usd is not None:
            tokens += f", ${result.cost_usd:.4f}"
        self._err.write(f"[{result.status}: {result.turns} model call(s){tokens}]\n")
        self._err.flush()
        self._out.write(f"session: {result.session_id}\n")
        self._out.flush()


def status_line(event: RunEvent) -> str | None:
    """The line the terminal shows for one run event, on stderr (None: nothing; the other
    events are for the store and SDK readers, not the terminal)."""
    return _call_line(event) or _run_line(event)


def _call_line(event: RunEvent) -> str | None:
    """A tool call's lines: the call, its permission, its result, what the sandbox refused."""
    match event:
        case ToolCallRequested():
            return f"● {call_preview(event.name, event.arguments)}"
        case McpServerEvent():
            return mcp_line(event)
        case McpSamplingEvent():
            said = f" ({_first_line(event.reason, 120)})" if event.reason else ""
            return f"  ⇄ mcp {event.server} sampling: {event.outcome}{said}"
        case McpElicitationEvent():
            said = f" ({_first_line(event.reason, 120)})" if event.reason else ""
            asked = _first_line(event.message, 80)
            return f"  ? mcp {event.server} asked: {asked} -> {event.action}{said}"
        case MemoryRejected():
            return f"  ✗ memory {event.name!r} not kept: {'; '.join(event.reasons)}"
        case InstructionsLoaded():
            return f"  ≡ {event.path} joined the instructions"
        case HookFailed():
            return (
                f"  ! {event.hook} hook failed, ignored ({_first_line(event.reason)}): "
                f"{_first_line(event.command, 60)}"
            )
        case PermissionSuggestion():
            return (
                f"  hint: you allowed {event.approvals} calls like this; to allow them "
                f'without asking, add "{event.rule}" to permissions.allow in config.toml'
            )
        case PermissionDecided(decision="deny"):
            return f"  ✗ denied: {event.reason}"
        case ToolResultEvent():
            return f"  {'✗' if event.is_error else '✓'} {_first_line(event.content)}"
        case NetworkDenied():
            return f"  ⊘ proxy refused {event.host}:{event.port}: {event.reason}"
        case SandboxDenied():
            refused = {"read": "reading", "write": "writing", "network": "a connection"}
            target = f" {event.path}" if event.path else ""
            return (
                f"  ⊘ sandbox ({event.mechanism}) refused {refused[event.kind]}{target} "
                f"({event.error}): {event.rule}"
            )
        case _:
            return None


def _run_line(event: RunEvent) -> str | None:
    """The run's own lines: warnings, retries, steering, budgets, children and teammates."""
    match event:
        case ErrorEvent(fatal=False):
            return f"  ! {event.message}"
        case ModelRetry(restarted=True):
            return (
                f"  ↻ the answer was cut off ({event.kind}: {event.reason}); the text above "
                f"is discarded, asking again in {event.delay_s:.1f} s "
                f"(attempt {event.attempt + 1} of {event.max_attempts})"
            )
        case ModelRetry():
            return (
                f"  ↻ {event.kind}: {event.reason}; retrying in {event.delay_s:.1f} s "
                f"(attempt {event.attempt + 1} of {event.max_attempts})"
            )
        case StuckDetected():
            return _stuck_line(event)
        case BudgetExhausted():
            return f"  ■ {event.reason}; stopping at this turn"
        case ChildStarted() if event.run_id == event.parent_run_id:
            return (
                f"  ↳ {child_label(event)} started (session {event.child_session_id}): "
                f"{_first_line(event.task, 60)}"
            )
        case TeamChanged():
            step = f" (step {event.step})" if event.step else ""
            why = f": {_first_line(event.reason, 60)}" if event.reason else ""
            return f"  ◆ teammate {event.member} {event.status}{step}{why}"
        case ChildFinished():
            cost = f", ${event.cost_usd:.4f}" if event.cost_usd is not None else ""
            why = f": {_first_line(event.reason, 80)}" if event.reason else ""
            return (
                f"  ↲ {child_label(event)} {event.status} after {event.turns} turn"
                f"{'s' if event.turns != 1 else ''}{cost}{why}"
            )
        case _:
            return None


def _stuck_line(event: StuckDetected) -> str:
    turns = (
        f"turn {event.first_turn}"
        if event.first_turn == event.last_turn
        else f"turns {event.first_turn}-{event.last_turn}"
    )
    what = {
        "reminder": "reminded the model",
        "prune": f"pruned {len(event.pruned)} message(s) from the context",
        "stop": "stopping the run",
    }[event.action]
    return f"  ⟳ looks stuck ({event.kind}, {turns}): {event.detail}; {what}"
