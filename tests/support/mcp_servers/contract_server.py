"""An MCP server built with the `mcp` SDK's MCPServer, over stdio: the server side of the hub's
contract suite. Usage: contract_server.py [--marker X]

Tools: echo, add (structured), slow, fail (isError), image, audio, embedded, link, grow (adds
the tool `extra` and sends notifications/tools/list_changed), crash (exits with code 5).
Resources: memo://greeting (text), memo://blob (binary).
"""

import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Audio, Image
from mcp_types import BlobResourceContents, EmbeddedResource, ResourceLink, TextResourceContents
from pydantic import BaseModel

app = MCPServer("contract-server", version="1.2.3")


class Sum(BaseModel):
    sum: int


@app.tool(description="Echo the text back")
def echo(text: str) -> str:
    return text


@app.tool(description="Add two numbers", annotations={"readOnlyHint": True})
def add(a: int, b: int) -> Sum:
    return Sum(sum=a + b)


@app.tool(description="Sleep, then answer")
async def slow(seconds: float) -> str:
    await anyio.sleep(seconds)
    return "done"


@app.tool(description="Always fails")
def fail() -> str:
    raise ToolError("it failed on purpose")


@app.tool(description="A tiny image")
def image() -> Image:
    return Image(data=b"\x89PNG\r\n", format="png")


@app.tool(description="A tiny sound")
def audio() -> Audio:
    return Audio(data=b"RIFF", format="wav")


@app.tool(description="An embedded resource")
def embedded() -> list[EmbeddedResource]:
    text = TextResourceContents(uri="memo://inline", mime_type="text/plain", text="inline text")
    blob = BlobResourceContents(
        uri="memo://inline.bin", mime_type="application/octet-stream", blob="AAE="
    )
    return [
        EmbeddedResource(type="resource", resource=text),
        EmbeddedResource(type="resource", resource=blob),
    ]


@app.tool(description="A link to a resource")
def link() -> list[ResourceLink]:
    return [
        ResourceLink(
            type="resource_link", name="greeting", uri="memo://greeting", mime_type="text/plain"
        )
    ]


@app.tool(description="Adds the tool `extra`")
async def grow(ctx: Context) -> str:
    if "extra" not in [tool.name for tool in await app.list_tools()]:

        @app.tool(name="extra", description="Added by grow")
        def extra() -> str:
            return "extra"

    await ctx.request_context.session.send_tool_list_changed()
    return "grown"


@app.tool(description="Exits the server")
def crash() -> str:
    sys.stderr.write("contract_server: crash requested\n")
    sys.stderr.flush()
    os._exit(5)


@app.resource("memo://greeting", description="A greeting", mime_type="text/plain")
def greeting() -> str:
    return "hello"


@app.resource("memo://blob", description="Two bytes", mime_type="application/octet-stream")
def blob() -> bytes:
    return b"\x00\x01"


if __name__ == "__main__":
    app.run()
