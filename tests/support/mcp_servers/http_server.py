"""The contract server (`contract_server.py`, built with the `mcp` SDK's MCPServer) over
streamable HTTP or SSE, served by uvicorn on a loopback port the OS picks: no Node.js needed.
Usage: http_server.py http|sse [--marker X]

It binds before it serves and prints the port on one line of stdout, so a test connects to a
server that is already listening (no free-port race). Endpoints: ``/mcp`` (streamable HTTP),
``/sse`` (SSE). The `crash` tool ends the process in the middle of its request (exit code 5).
"""

import socket
import sys

import anyio
import uvicorn
from contract_server import app


def main(argv: list[str]) -> None:
    transport = argv[0]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    if transport == "http":
        starlette = app.streamable_http_app()
    elif transport == "sse":
        starlette = app.sse_app()
    else:
        raise SystemExit(f"http_server: unknown transport {transport!r} (http or sse)")
    server = uvicorn.Server(uvicorn.Config(starlette, log_level="warning", lifespan="on"))
    sys.stdout.write(f"{sock.getsockname()[1]}\n")
    sys.stdout.flush()
    anyio.run(server.serve, [sock])


if __name__ == "__main__":
    main(sys.argv[1:])
