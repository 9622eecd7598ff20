"""The `compact` tool: the model asks for its context to be compacted (CTX-6)."""

from __future__ import annotations

from collections.abc import Callable

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput


class CompactArgs(ToolArgs):
    pass


def compact_tool(request: Callable[[], object]) -> Tool:
    """A tool that schedules a compaction before the next model call."""

    async def handler(args: CompactArgs, ctx: ToolContext) -> ToolOutput:
        request()
        return ToolOutput(
            "The context will be compacted before the next model call: older messages are "
            "replaced by a summary; the latest request, todo list and touched files are kept."
        )

    return Tool(
        "compact",
        "Compact the conversation now: older messages are replaced by a summary. Use it when "
        "the conversation is long and its older details are no longer needed.",
        CompactArgs,
        handler,
    )
