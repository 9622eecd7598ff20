"""The live terminal (issue 18 item 2): used only when stdout is a terminal and `NO_COLOR` is
unset; piped output stays the plain `Renderer`'s, byte for byte.

While the model has not answered yet, a spinner shows the elapsed time and the context size
sent; the answer is rendered as Markdown as it streams (rich); tool calls, results, retries and
warnings are the plain renderer's compact lines; the last line gives status, model calls,
tokens, cost and the session id. Everything shown was scrubbed of secrets like the plain output.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, TextIO

from soong_agent.application.runs.handle import RunResult
from soong_agent.entrypoints.cli.render import Renderer
from soong_agent.ports.events import (
    ContextMeasured,
    ModelCallStarted,
    RunEvent,
    TextDeltaEvent,
    ThinkingDeltaEvent,
)

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live


def wants_live(out: TextIO | None = None) -> bool:
    """Whether the live terminal is used: stdout is a terminal, `NO_COLOR` is unset and the
    terminal is not `dumb`."""
    stream = out or sys.stdout
    return (
        stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM", "") != "dumb"
    )


class _Waiting:
    """The spinner line: what the run waits for, for how long, with how much context."""

    def __init__(self, started: float, tokens: int, what: str) -> None:
        from rich.spinner import Spinner

        self.started = started
        self.tokens = tokens
        self.what = what
        self._spinner = Spinner("dots", style="cyan")

    def __rich__(self) -> RenderableType:
        from rich.table import Table

        elapsed = time.monotonic() - self.started
        about = f" · ~{self.tokens:,} tokens in" if self.tokens else ""
        self._spinner.update(text=f"{self.what} {elapsed:4.1f} s{about}")
        grid = Table.grid()
        grid.add_row(self._spinner)
        return grid


class LiveRenderer(Renderer):
    """A `Renderer` for a terminal: spinner while waiting, Markdown as it streams."""

    def __init__(self, *, console: Console | None = None, err: TextIO | None = None) -> None:
        from rich.console import Console as RichConsole

        super().__init__(err=err)
        self._console = console or RichConsole(file=sys.stdout, highlight=False)
        self._live: Live | None = None
        self._text: list[str] = []
        self._tokens = 0
        self._waiting: _Waiting | None = None

    # --- the live region ----------------------------------------------------------------------
    def _show(self, renderable: RenderableType, *, transient: bool) -> None:
        from rich.live import Live

        self._stop()
        self._live = Live(
            renderable,
            console=self._console,
            refresh_per_second=10,
            transient=transient,
            vertical_overflow="visible",
        )
        self._live.start()

    def _stop(self) -> None:
        """End the live region: a spinner vanishes, the Markdown shown so far stays."""
        live, self._live = self._live, None
        self._waiting = None
        if live is not None:
            live.stop()
        self._text = []

    def _markdown(self) -> RenderableType:
        from rich.markdown import Markdown

        return Markdown(self.clean("".join(self._text)))

    # --- the renderer's interface -------------------------------------------------------------
    def status(self, line: str) -> None:
        self._stop()
        super().status(line)

    def prompt(self, text: str) -> None:
        self._stop()
        super().prompt(text)

    def handle(self, event: RunEvent) -> None:
        match event:
            case ContextMeasured():
                self._tokens = event.system_tokens + event.non_system_tokens
            case ModelCallStarted():
                self._waiting = _Waiting(time.monotonic(), self._tokens, "thinking…")
                self._show(self._waiting, transient=True)
            case ThinkingDeltaEvent() if self._waiting is not None:
                self._waiting.what = "reasoning…"
            case TextDeltaEvent():
                if not self._text:  # the first piece: the spinner gives way to the answer
                    self._show(self._markdown(), transient=False)
                self._text.append(event.text)
                if self._live is not None:
                    self._live.update(self._markdown())
            case _:  # a line of the plain renderer ends the live region (see `status`)
                super().handle(event)

    def finished(self, result: RunResult) -> None:
        self._stop()
        super().finished(result)
