"""Inside a bubblewrap sandbox without a network (SBX-4): open a listening socket on the
sandbox's own loopback at the proxy's port, hand it to the host's proxy through its Unix socket,
then become the command.

Run as ``python -I -S -c <this source> <unix socket> <port> <argv…>``: standard library only,
no site, no ``os``, and only the C socket module (``_socket``; Python's ``socket`` module takes
several times the interpreter's start to import), so it adds little to a command's start. The proxy
accepts the sandbox's connections on that socket itself (a socket stays in the network
namespace it was made in, whoever holds it), so no byte passes through this process, which
is replaced by the command (``exec``): its status is the command's. The proxy stops listening
when the command, the process that handed the socket over, ends.

Hand-over: one byte ``L`` with the listening socket (SCM_RIGHTS) on a new connection to the
Unix socket; the proxy answers ``K`` once it serves it. Any other answer (a proxy that cannot
tell when the command ends, e.g. without pidfd) and this process stays in front of the command
and carries each connection to the Unix socket itself, as a child process runs the command.
"""

import posix  # imported at start already, unlike `os` (which -S leaves out)
import sys

try:
    import _socket as sockets
except ImportError:  # pragma: no cover - CPython has it
    import socket as sockets  # type: ignore[no-redef]


def _listen(port: int) -> "sockets.socket":
    listener = sockets.socket(sockets.AF_INET, sockets.SOCK_STREAM)
    listener.setsockopt(sockets.SOL_SOCKET, sockets.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    return listener


def _hand_over(listener: "sockets.socket", path: str) -> bool:
    """Whether the proxy took `listener` (it then serves it until this process ends)."""
    link = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    try:
        link.connect(path)
        fd = listener.fileno().to_bytes(4, sys.byteorder)
        link.sendmsg([b"L"], [(sockets.SOL_SOCKET, sockets.SCM_RIGHTS, fd)])
        return link.recv(1) == b"K"
    except OSError:
        return False
    finally:
        link.close()


def _run(argv: list[str]) -> None:
    try:
        if "/" in argv[0]:
            posix.execv(argv[0], argv)
        import os  # a name to look up in PATH

        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"{argv[0]}: {exc.strerror}\n")
        posix._exit(127)


# --- the fallback: this process carries the connections --------------------------------------


def _pipe(source, target) -> None:  # type: ignore[no-untyped-def]
    import contextlib
    import os
    import socket

    # a reset on either side ends this direction; the other side learns it from the shutdown
    with contextlib.suppress(OSError):
        if hasattr(os, "splice"):
            read_end, write_end = os.pipe()
            try:
                while moved := os.splice(source.fileno(), write_end, 1048576):
                    while moved:
                        moved -= os.splice(read_end, target.fileno(), moved)
            finally:
                os.close(read_end)
                os.close(write_end)
        else:
            while data := source.recv(262144):
                target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def _carry(client, path: str) -> None:  # type: ignore[no-untyped-def]
    import socket
    import threading

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


def _carry_here(listener: "sockets.socket", path: str, argv: list[str]) -> None:
    import os
    import signal
    import socket
    import threading

    pid = os.fork()
    if pid == 0:
        listener.close()
        _run(argv)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: os.kill(pid, number))
    served = socket.socket(fileno=listener.detach())

    def serve() -> None:
        while True:
            try:
                client, _ = served.accept()
            except OSError:
                return
            threading.Thread(target=_carry, args=(client, path), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def main() -> None:
    path, port, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    listener = _listen(port)
    if _hand_over(listener, path):
        listener.close()
        _run(argv)
    _carry_here(listener, path, argv)


if __name__ == "__main__":
    main()
