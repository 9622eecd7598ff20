"""A tiny MCP stdio server that misbehaves on purpose (test support; starts in ~30 ms because it
does not import the SDK). Usage: line_server.py MODE [SECONDS] [--marker X]

    ok            answers initialize, tools/list (one tool, `ping`) and tools/call
    slow-start S  like ok, but sleeps S seconds before answering anything
    exit          writes three lines to stderr (and $LEAK when set) and exits with code 3
    hang          never answers and ignores the end of stdin
    garbage       writes a line that is not JSON-RPC on stdout, then never answers
    crash-second  like ok, but exits with code 7 on the second tools/call
    die-after S   like ok, but exits with code 9 S seconds after it answered tools/list
"""

import json
import os
import sys
import threading
import time


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request, result):
    send({"jsonrpc": "2.0", "id": request["id"], "result": result})


def die_later(seconds):
    time.sleep(seconds)
    sys.stderr.write("line_server: dying as told\n")
    sys.stderr.flush()
    os._exit(9)


def serve(mode, args):
    calls = 0
    for line in sys.stdin:
        request = json.loads(line)
        method = request.get("method")
        if "id" not in request:
            continue
        if method == "initialize":
            answer(
                request,
                {
                    "protocolVersion": request["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "line-server", "version": "0.1"},
                },
            )
        elif method == "tools/list":
            tool = {
                "name": "ping",
                "description": "Answers pong",
                "inputSchema": {"type": "object"},
            }
            answer(request, {"tools": [tool]})
            if mode == "die-after":
                threading.Thread(target=die_later, args=(float(args[1]),), daemon=True).start()
        elif method == "tools/call":
            calls += 1
            if mode == "crash-second" and calls == 2:
                sys.stderr.write("line_server: crashing on call 2\n")
                sys.stderr.flush()
                os._exit(7)
            answer(request, {"content": [{"type": "text", "text": f"pong {calls}"}]})
        else:
            send(
                {
                    "jsonrpc": "2.0",
                    "id": request["id"],
                    "error": {"code": -32601, "message": method},
                }
            )


def main():
    args = [arg for arg in sys.argv[1:]]
    if "--marker" in args:
        at = args.index("--marker")
        del args[at : at + 2]
    mode = args[0]
    if mode == "exit":
        sys.stderr.write("line_server: reading config\nline_server: bad config\n")
        if os.environ.get("LEAK"):
            sys.stderr.write(f"line_server: LEAK={os.environ['LEAK']}\n")
        sys.stderr.write("line_server: giving up\n")
        sys.exit(3)
    if mode == "hang":
        sys.stderr.write("line_server: hanging\n")
        sys.stderr.flush()
        while True:
            time.sleep(3600)
    if mode == "garbage":
        sys.stdout.write("Hello, this is not JSON-RPC\n")
        sys.stdout.flush()
        while True:
            time.sleep(3600)
    if mode == "slow-start":
        time.sleep(float(args[1]))
    serve(mode, args)


if __name__ == "__main__":
    main()
