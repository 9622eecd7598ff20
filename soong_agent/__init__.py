"""soong-agent: an agent core for LLM coding and automation agents.

Importing this package reads no file, environment variable or socket; the names below load
their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "AgentRuntime": "soong_agent.entrypoints.sdk",
    "tool": "soong_agent.application.tools.function",
    "FunctionTool": "soong_agent.application.tools.function",
    "ToolContext": "soong_agent.application.tools.base",
    "ToolOutput": "soong_agent.application.tools.base",
    "ToolChoice": "soong_agent.ports.model",
    "Run": "soong_agent.application.runs.handle",
    "RunResult": "soong_agent.application.runs.handle",
    "ApprovalRequest": "soong_agent.ports.approval",
    "Decision": "soong_agent.ports.approval",
    "Message": "soong_agent.ports.messages",
    "ModelProvider": "soong_agent.ports.model",
    "ModelRequest": "soong_agent.ports.model",
    "SessionStore": "soong_agent.ports.storage",
    "Usage": "soong_agent.ports.streaming",
    "RunEvent": "soong_agent.ports.events",
    "SoongAgentError": "soong_agent.ports.errors",
    "ConfigError": "soong_agent.ports.errors",
    "UsageError": "soong_agent.ports.errors",
    "MissingSecretError": "soong_agent.ports.errors",
    "SessionNotFound": "soong_agent.ports.errors",
    "RunError": "soong_agent.ports.errors",
    "ProviderError": "soong_agent.ports.errors",
    "PermissionDenied": "soong_agent.ports.errors",
    "SandboxViolation": "soong_agent.ports.errors",
    "BudgetExceeded": "soong_agent.ports.errors",
    "ElicitationRequest": "soong_agent.ports.mcp",
    "ElicitationAnswer": "soong_agent.ports.mcp",
    "SamplingRequest": "soong_agent.ports.mcp",
    "SamplingAnswer": "soong_agent.ports.mcp",
}

__all__ = [
    "AgentRuntime",
    "ApprovalRequest",
    "BudgetExceeded",
    "ConfigError",
    "Decision",
    "ElicitationAnswer",
    "ElicitationRequest",
    "FunctionTool",
    "Message",
    "MissingSecretError",
    "ModelProvider",
    "ModelRequest",
    "PermissionDenied",
    "ProviderError",
    "Run",
    "RunError",
    "RunEvent",
    "RunResult",
    "SamplingAnswer",
    "SamplingRequest",
    "SandboxViolation",
    "SessionNotFound",
    "SessionStore",
    "SoongAgentError",
    "ToolChoice",
    "ToolContext",
    "ToolOutput",
    "Usage",
    "UsageError",
    "tool",
]

if TYPE_CHECKING:
    from soong_agent.application.runs.handle import Run, RunResult
    from soong_agent.application.tools.base import ToolContext, ToolOutput
    from soong_agent.application.tools.function import FunctionTool, tool
    from soong_agent.entrypoints.sdk import AgentRuntime
    from soong_agent.ports.approval import ApprovalRequest, Decision
    from soong_agent.ports.errors import (
        BudgetExceeded,
        ConfigError,
        MissingSecretError,
        PermissionDenied,
        ProviderError,
        RunError,
        SandboxViolation,
        SessionNotFound,
        SoongAgentError,
        UsageError,
    )
    from soong_agent.ports.events import RunEvent
    from soong_agent.ports.mcp import (
        ElicitationAnswer,
        ElicitationRequest,
        SamplingAnswer,
        SamplingRequest,
    )
    from soong_agent.ports.messages import Message
    from soong_agent.ports.model import ModelProvider, ModelRequest, ToolChoice
    from soong_agent.ports.storage import SessionStore
    from soong_agent.ports.streaming import Usage


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'soong_agent' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
