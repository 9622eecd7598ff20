"""Inside a bubblewrap sandbox without a network (SBX-4): listen on the sandbox's own loopback at
the proxy's port and carry each connection to the host's proxy through its Unix socket, then
run the command and end with its status.

Run as ``python -I -S -c <this source> <unix socket> <port> <argv…>``: standard library only,
no site, so it starts in a few milliseconds. The command is a child of this process; when it
ends, so does the forwarding (connections still open are cut).
"""

import contextlib
import os
import signal
import socket
import sys
import threading


def _splice(source: socket.socket, target: socket.socket) -> None:
    """Move bytes kernel-side through a pipe (no copy into Python) until the end."""
    read_end, write_end = os.pipe()
    try:
        while moved := os.splice(source.fileno(), write_end, 1048576):
            while moved:
                moved -= os.splice(read_end, target.fileno(), moved)
    finally:
        os.close(read_end)
        os.close(write_end)


def _pipe(source: socket.socket, target: socket.socket) -> None:
    # a reset on either side ends this direction; the other side learns it from the shutdown
    with contextlib.suppress(OSError):
        if hasattr(os, "splice"):
            _splice(source, target)
        else:
            while data := source.recv(262144):
                target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def _carry(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_carry, args=(client, path), daemon=True).start()


def main() -> None:
    path, port, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    listener.set_inheritable(False)
    pid = os.fork()
    if pid == 0:
        listener.close()
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            sys.stderr.write(f"{argv[0]}: {exc.strerror}\n")
            os._exit(127)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: os.kill(pid, number))
    threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
