"""An MCP server (the `mcp` SDK's MCPServer, over stdio) whose tools ask the client things
(MCP-4), and say in their result what the client answered:

- `summarize(text)`: `sampling/createMessage` (a system prompt, one user message, at most 50
  tokens) -> ``sampled by <model>: <answer>`` or ``sampling refused: <error>``;
- `book(city)`: `elicitation/create`, a form of four fields (a string, an integer with a
  default, a boolean with a default, a choice) -> ``<action> {json of the content}`` or
  ``elicitation failed: <error>``;
- `roots()`: `roots/list` -> the roots' URIs, one per line.
"""

import json

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import SamplingMessage, TextContent

app = MCPServer("asking-server", version="0.1.0")

BOOKING_FORM = {
    "type": "object",
    "properties": {
        "date": {"type": "string", "description": "Arrival date (YYYY-MM-DD)"},
        "nights": {"type": "integer", "minimum": 1, "default": 1},
        "breakfast": {"type": "boolean", "default": True},
        "room": {"type": "string", "enum": ["single", "double"]},
    },
    "required": ["date", "room"],
}


@app.tool(description="Ask the client's model to summarize a text")
async def summarize(text: str, ctx: Context) -> str:
    message = SamplingMessage(role="user", content=TextContent(type="text", text=text))
    try:
        result = await ctx.request_context.session.create_message(
            [message], max_tokens=50, system_prompt="Answer in one short sentence."
        )
    except MCPError as exc:
        return f"sampling refused: {exc}"
    content = result.content
    answer = content.text if isinstance(content, TextContent) else str(content)
    return f"sampled by {result.model}: {answer}"


@app.tool(description="Book a hotel room, asking the user for the details")
async def book(city: str, ctx: Context) -> str:
    try:
        result = await ctx.request_context.session.elicit_form(
            f"Booking a room in {city}: when, and which room?", BOOKING_FORM
        )
    except MCPError as exc:
        return f"elicitation failed: {exc}"
    return f"{result.action} {json.dumps(result.content, sort_keys=True)}"


@app.tool(description="List the client's roots")
async def roots(ctx: Context) -> str:
    listed = await ctx.request_context.session.list_roots()
    return "\n".join(str(root.uri) for root in listed.roots)


if __name__ == "__main__":
    app.run()
