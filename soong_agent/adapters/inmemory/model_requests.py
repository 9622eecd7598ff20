"""What the strictest model servers refuse in a request, checked on the neutral `ModelRequest`.

`ScriptedModel` refuses such a request as the servers do (`ProviderError` of kind
``bad_request``), so a test that passes with it does not hide a request a real server would
answer with HTTP 400. Stored tool calls are not checked: the adapters repair their names and
arguments before sending. The rules, with the servers they come from:

- a tool name not matching ``^[a-zA-Z0-9_-]{1,64}$``, the same tool twice, or parameters that
  are not an object schema (OpenAI, vLLM, llama.cpp);
- a tool result that answers no call of the assistant message before it, or one already
  answered; a call left unanswered before the next other message or the end (OpenAI; the
  OpenAI adapter sends the history as it is);
- `tool_choice` naming a tool that is not offered (OpenAI, vLLM);
- `max_output_tokens` below 1; `temperature` outside [0, 2] (OpenAI).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from soong_agent.ports.messages import Message
from soong_agent.ports.model import ModelRequest, ToolSpec

_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def request_problems(request: ModelRequest) -> list[str]:
    """Why a strict server would refuse `request` (empty when it would not)."""
    problems = _tool_problems(request.tools)
    problems += _conversation_problems(list(request.messages))
    choice = request.tool_choice
    names = {tool.name for tool in request.tools}
    # without tools, the adapters leave tool_choice out of the request
    if choice is not None and names and choice.mode == "tool" and choice.name not in names:
        problems.append(f"tool_choice names {choice.name!r}, which is not among the tools")
    if request.max_output_tokens is not None and request.max_output_tokens < 1:
        problems.append(f"max_output_tokens {request.max_output_tokens} is below 1")
    if request.temperature is not None and not 0 <= request.temperature <= 2:
        problems.append(f"temperature {request.temperature} is outside [0, 2]")
    return problems


def _tool_problems(tools: Sequence[ToolSpec]) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for tool in tools:
        if not _TOOL_NAME.fullmatch(tool.name):
            problems.append(f"tool name {tool.name!r} does not match ^[a-zA-Z0-9_-]{{1,64}}$")
        if tool.name in seen:
            problems.append(f"tool {tool.name!r} is offered twice")
        seen.add(tool.name)
        if not isinstance(tool.parameters, dict) or tool.parameters.get("type") != "object":
            problems.append(f"the parameters of tool {tool.name!r} are not an object schema")
    return problems


def _conversation_problems(messages: list[Message]) -> list[str]:
    problems: list[str] = []
    open_calls: dict[str, bool] = {}  # call id -> answered, for the last assistant message
    opened_at = -1
    for index, message in enumerate(messages):
        results = message.tool_results
        if results:
            for result in results:
                if result.call_id not in open_calls:
                    problems.append(
                        f"message {index}: the tool result for {result.call_id!r} answers no "
                        "call of the assistant message before it"
                    )
                elif open_calls[result.call_id]:
                    problems.append(
                        f"message {index}: the call {result.call_id!r} is answered twice"
                    )
                else:
                    open_calls[result.call_id] = True
            if len(results) == len(message.content):
                continue
        problems += _unanswered(opened_at, open_calls)
        open_calls = {}
        if message.role == "assistant" and message.tool_calls:
            opened_at = index
            open_calls = dict.fromkeys((call.id for call in message.tool_calls), False)
    problems += _unanswered(opened_at, open_calls)
    return problems


def _unanswered(opened_at: int, open_calls: dict[str, bool]) -> list[str]:
    missing = [call_id for call_id, answered in open_calls.items() if not answered]
    if not missing:
        return []
    return [f"message {opened_at}: the tool calls {missing} are not answered"]
