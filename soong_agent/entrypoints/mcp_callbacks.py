"""An application's answers to what MCP servers ask (MCP-3, MCP-4), given to a runtime's
containers: `AgentRuntime(mcp_authorize=…, elicitation=…, sampling=…)`.

Each callable may be a plain function or a coroutine function; what it returns is checked, so
a wrong answer is a clear error naming the argument, never a value sent to a server.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from soong_agent.ports.errors import UsageError
from soong_agent.ports.mcp import (
    ElicitationAnswer,
    ElicitationRequest,
    SamplingAnswer,
    SamplingRequest,
)

AuthorizeCallback = Callable[[str, str], Awaitable[None] | None]
"""Takes a person (or a test) through an OAuth login: called with the server's name and the
authorization URL; it returns once the browser was sent there (the redirect comes to the
runtime's loopback listener)."""
ElicitationCallback = Callable[
    [ElicitationRequest], ElicitationAnswer | Awaitable[ElicitationAnswer]
]
"""Puts a server's question to the user: returns `ElicitationAnswer("accept", {...})`,
``ElicitationAnswer("decline")`` or ``ElicitationAnswer("cancel")``."""
SamplingCallback = Callable[
    [SamplingRequest], SamplingAnswer | Awaitable[SamplingAnswer | None] | None
]
"""Answers a sampling request the permission policy or the user allowed, instead of the
run's model; None declines it."""


async def _settled(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def authorizer(given: AuthorizeCallback) -> Callable[[str, str], Awaitable[None]]:
    """`given` as the hub's `authorize`."""

    async def authorize(server: str, url: str) -> None:
        await _settled(given(server, url))

    return authorize


def elicitor(given: ElicitationCallback) -> Callable[[ElicitationRequest], Awaitable[Any]]:
    """`given` as the runtime's `Elicitor`; an answer that is not an `ElicitationAnswer` is a
    UsageError (the server gets an error, nothing of it is sent)."""

    async def elicit(request: ElicitationRequest) -> ElicitationAnswer:
        answer = await _settled(given(request))
        if not isinstance(answer, ElicitationAnswer):
            raise UsageError(
                f"elicitation: the callback returned {type(answer).__name__}, not an "
                "ElicitationAnswer"
            )
        return answer

    return elicit


def sampler(given: SamplingCallback) -> Callable[[SamplingRequest], Awaitable[Any]]:
    """`given` as the runtime's `Sampler`; an answer that is neither a `SamplingAnswer` nor
    None is a UsageError."""

    async def sample(request: SamplingRequest) -> SamplingAnswer | None:
        answer = await _settled(given(request))
        if answer is not None and not isinstance(answer, SamplingAnswer):
            raise UsageError(
                f"sampling: the callback returned {type(answer).__name__}, not a SamplingAnswer "
                "or None"
            )
        return answer

    return sample


def give_mcp_callbacks(
    adapters: Any,
    authorize: AuthorizeCallback | None = None,
    elicitation: ElicitationCallback | None = None,
    sampling: SamplingCallback | None = None,
) -> None:
    """Override the `Adapters` container's MCP callbacks with the application's."""
    from soong_agent.entrypoints.di import providers

    if authorize is not None:
        adapters.mcp_authorize.override(providers.Object(authorizer(authorize)))
    if elicitation is not None:
        adapters.mcp_elicitor.override(providers.Object(elicitor(elicitation)))
    if sampling is not None:
        adapters.mcp_sampler.override(providers.Object(sampler(sampling)))
