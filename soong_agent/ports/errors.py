"""The two error families: the caller's mistakes, and what goes wrong while running."""

from __future__ import annotations

from typing import Literal


class SoongAgentError(Exception):
    """Base of every error soong-agent raises on purpose."""


# --- the caller's mistakes -------------------------------------------------------------------


class ConfigError(SoongAgentError):
    """The configuration (file, placeholders, secrets) is wrong; the message says where and how."""


class MissingSecretError(ConfigError):
    """An environment variable named by the config is not set."""

    def __init__(self, *, var: str, user: str, source: str) -> None:
        self.var = var
        self.user = user
        self.source = source
        super().__init__(
            f"environment variable {var} is not set; it is needed by {user} ({source})"
        )


class UsageError(SoongAgentError):
    """The caller asked for something that cannot be done (bad path, unknown session id, ...)."""


class SessionNotFound(UsageError):
    """No session has the given id."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"no session with id {session_id!r}")


# --- run-time errors -------------------------------------------------------------------------


class RunError(SoongAgentError):
    """Something failed while a run was going on."""


ProviderErrorKind = Literal[
    "auth",
    "rate_limit",
    "overloaded",
    "server",
    "context_too_long",
    "bad_request",
    "not_found",
    "timeout",
    "transport",
    "protocol",
]

RETRYABLE_KINDS: frozenset[str] = frozenset(
    {"rate_limit", "overloaded", "server", "timeout", "transport"}
)


class ProviderError(RunError):
    """A model provider failed; `kind` classifies it, `retry_after` is in seconds when known.

    `should_retry` is the server's own verdict when it sent one (the `x-should-retry` header
    of an error response): it overrides what the kind alone would say.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ProviderErrorKind,
        provider: str,
        base_url: str,
        status: int | None = None,
        retry_after: float | None = None,
        unreachable: bool = False,
        should_retry: bool | None = None,
    ) -> None:
        self.kind: ProviderErrorKind = kind
        self.should_retry = should_retry
        self.unreachable = unreachable
        """Nothing listens at the address (connection refused): retried at most once, quickly."""
        self.provider = provider
        self.base_url = base_url
        self.status = status
        self.retry_after = retry_after
        self.detail = message
        status_part = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"{provider} at {base_url}: {kind}{status_part}: {message}")

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed when sent again: the server's `should_retry`
        when it said, else whether the kind is transient."""
        if self.should_retry is not None:
            return self.should_retry
        return self.kind in RETRYABLE_KINDS


class PermissionDenied(RunError):
    """A tool call was denied."""


class SandboxViolation(RunError):
    """A tool tried to reach a path outside what the sandbox allows."""


class BudgetExceeded(RunError):
    """A limit (turns, tokens, time) was reached."""


class ToolInputError(RunError):
    """A tool was called with arguments it cannot use; the message goes back to the model."""
