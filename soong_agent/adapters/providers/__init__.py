"""Model provider adapters (OpenAI Chat Completions, Anthropic Messages, Ollama) over httpx.

Names are re-exported lazily so that importing a small module of this package (such as
`retry`) does not pay for importing httpx.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from soong_agent.adapters.providers.anthropic_messages import AnthropicMessagesProvider
    from soong_agent.adapters.providers.ollama_chat import OllamaChatProvider
    from soong_agent.adapters.providers.openai_chat import OpenAIChatProvider
    from soong_agent.adapters.providers.retry import RetryPolicy

__all__ = ["AnthropicMessagesProvider", "OllamaChatProvider", "OpenAIChatProvider", "RetryPolicy"]

_LAZY = {
    "AnthropicMessagesProvider": "soong_agent.adapters.providers.anthropic_messages",
    "OllamaChatProvider": "soong_agent.adapters.providers.ollama_chat",
    "OpenAIChatProvider": "soong_agent.adapters.providers.openai_chat",
    "RetryPolicy": "soong_agent.adapters.providers.retry",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module), name)
