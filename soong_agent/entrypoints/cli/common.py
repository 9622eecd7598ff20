"""What the CLI commands share: loading the config and turning expected errors into one line."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable
from typing import TypeVar

from soong_agent.ports.errors import ConfigError, SoongAgentError, UsageError

T = TypeVar("T")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CANCELLED = 130


def tolerant_streams() -> None:
    """Let stdout and stderr write any text: a character their encoding cannot take (an
    ASCII terminal, a lone surrogate that came past the run's boundaries) is written as a
    backslash escape instead of failing the command half way."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")


def fail(message: str, code: int) -> int:
    """Print one error line to stderr and return the exit code."""
    sys.stderr.write(f"soong-agent: error: {message}\n")
    sys.stderr.flush()
    return code


def exit_now(code: int) -> None:
    """Flush the terminal streams and end the process without the interpreter's teardown.

    Every command closes what it opened (the session store commits and closes) before it
    returns, so nothing is lost; tearing down the modules of a run would only add ~0.1–0.3 s
    between the answer and the prompt.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def exit_code_for(error: BaseException) -> int:
    """Config and usage mistakes exit 2; everything else that failed exits 1."""
    return EXIT_USAGE if isinstance(error, ConfigError | UsageError) else EXIT_FAILED


def guarded(action: Callable[[], int]) -> int:
    """Run a command body; expected errors become one line and an exit code, never a traceback.

    Anything else is a bug of ours: still one line (`internal error: …`) and exit 1; with
    `SOONG_AGENT_DEBUG=1` its traceback is printed too."""
    try:
        return action()
    except SoongAgentError as exc:
        return fail(str(exc), exit_code_for(exc))
    except Exception as exc:
        if os.environ.get("SOONG_AGENT_DEBUG") == "1":
            import traceback

            traceback.print_exc()
        from soong_agent.ports.text import safe_text

        return fail(safe_text(f"internal error: {type(exc).__name__}: {exc}"), EXIT_FAILED)
