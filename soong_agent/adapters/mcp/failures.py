"""What went wrong, read from what the SDK raised: one line for people, no SDK type further.

The SDK's task groups wrap errors in (nested) exception groups, sometimes together with the
cancellation that followed them; these helpers look at the leaves.
"""

from __future__ import annotations

from typing import Literal

import anyio
import httpx2
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from soong_agent.adapters.mcp.state import RunEnd
from soong_agent.adapters.mcp.text import one_line, safe_url
from soong_agent.ports.mcp import McpServerSpec

RequestFailure = Literal["timeout", "closed", "other"]


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, in order; `exc` itself otherwise."""
    if isinstance(exc, BaseExceptionGroup):
        found: list[BaseException] = []
        for inner in exc.exceptions:
            found.extend(leaves(inner))
        return found or [exc]
    return [exc]


def without_cancellation(exc: BaseException) -> BaseException:
    """`exc` less anyio's cancellation; re-raises a pure cancellation (or KeyboardInterrupt …)."""
    cancelled = anyio.get_cancelled_exc_class()
    if isinstance(exc, BaseExceptionGroup):
        _, rest = exc.split(cancelled)
        if rest is None:
            raise exc
        return rest
    if isinstance(exc, Exception):
        return exc
    raise exc


def is_closed(exc: BaseException) -> bool:
    """Whether `exc` says the connection to the server is gone."""
    return isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED


def describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def garbage(exc: Exception) -> str:
    """What a server wrote that is not JSON-RPC, as far as the SDK's parse error tells."""
    if isinstance(exc, ValidationError):
        errors = exc.errors(include_url=False)
        if errors and isinstance(errors[0].get("input"), str):
            return repr(one_line(errors[0]["input"], 120))
    return one_line(describe(exc), 160)


def start_failure(
    spec: McpServerSpec, phase: str, *, ready: bool, error: BaseException | None
) -> RunEnd:
    """Why a run ended that nobody ended on purpose, from the exception it ended with (None:
    the session ended without one)."""
    during = "" if ready else " during start-up"
    if error is None:
        return RunEnd("exited", f"closed the connection{during}")
    found = leaves(error)
    if any(is_closed(leaf) for leaf in found):
        return RunEnd("exited", f"closed the connection{during}")
    for leaf in found:
        if isinstance(leaf, MCPError):
            return RunEnd("error", f"{phase} failed: {leaf.message} (error {leaf.code})")
        if isinstance(leaf, ValidationError):
            return RunEnd("error", f"answered {phase} with something that is not MCP")
        if isinstance(leaf, httpx2.HTTPError) or (
            isinstance(leaf, OSError) and spec.transport != "stdio"
        ):
            return RunEnd("error", f"cannot reach {safe_url(spec.url)}: {describe(leaf)}")
        if isinstance(leaf, OSError):
            return RunEnd("error", f"cannot start {spec.command}: {describe(leaf)}")
    return RunEnd("error", f"{phase} failed: {describe(found[0])}")


def request_failure(
    server: str, what: str, exc: BaseException, timeout_s: float
) -> tuple[RequestFailure, str]:
    """What kind of failure a request met, and the message for it (before scrubbing)."""
    for leaf in leaves(exc):
        if isinstance(leaf, TimeoutError) or (
            isinstance(leaf, MCPError) and leaf.code == types.REQUEST_TIMEOUT
        ):
            return "timeout", f"mcp server {server!r}: {what} did not finish within {timeout_s:g} s"
        if is_closed(leaf):
            return "closed", f"mcp server {server!r} stopped during {what} (the connection closed)"
        if isinstance(leaf, MCPError):
            return (
                "other",
                f"mcp server {server!r}: {what} failed: {leaf.message} (error {leaf.code})",
            )
        if isinstance(leaf, ValidationError):
            return "other", f"mcp server {server!r} answered {what} with something that is not MCP"
    return "other", f"mcp server {server!r}: {what} failed: {describe(leaves(exc)[0])}"
