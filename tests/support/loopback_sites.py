"""Loopback servers for the network tests of commands (SBX-4): a static site that is also a
PEP 503 simple index holding one wheel, and a git smart-HTTP server (``git http-backend`` run
as a CGI program per request). Each counts the connections it accepted."""

from __future__ import annotations

import io
import os
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PAGE = b"hello through the proxy\n"
WHEEL_NAME = "demo_pkg-1.0-py3-none-any.whl"


def demo_wheel() -> bytes:
    """A minimal valid wheel of the project ``demo-pkg`` 1.0."""
    buffer = io.BytesIO()
    info = "demo_pkg-1.0.dist-info"
    files = {
        "demo_pkg/__init__.py": "VALUE = 1\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
        archive.writestr(f"{info}/RECORD", record)
    return buffer.getvalue()


@dataclass
class Site:
    """A running loopback server: its port, and how many connections it accepted."""

    port: int
    server: ThreadingHTTPServer
    accepted: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class _Counting(ThreadingHTTPServer):
    daemon_threads = True
    accepted: list[int]

    def get_request(self):  # type: ignore[no-untyped-def]
        request = super().get_request()
        self.accepted.append(1)
        return request


def _static_handler(files: dict[str, tuple[str, bytes]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = files.get(self.path.split("?", 1)[0])
            if found is None:
                self.send_error(404)
                return
            kind, body = found
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    return Handler


def _git_handler(root: Path) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _cgi(self) -> None:
            path, _, query = self.path.partition("?")
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "GIT_PROJECT_ROOT": str(root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(length),
                "REMOTE_ADDR": "127.0.0.1",
                "GATEWAY_INTERFACE": "CGI/1.1",
                "SERVER_PROTOCOL": "HTTP/1.1",
            }
            if self.headers.get("Git-Protocol"):
                env["HTTP_GIT_PROTOCOL"] = self.headers["Git-Protocol"]
            done = subprocess.run(
                ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
            )
            head, _, payload = done.stdout.replace(b"\r\n", b"\n").partition(b"\n\n")
            status = 200
            headers: list[tuple[str, str]] = []
            for line in head.decode("latin-1").splitlines():
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.split()[0])
                else:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = _cgi
        do_POST = _cgi

        def log_message(self, *args: object) -> None:
            return

    return Handler


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[Site]:
    server = _Counting(("127.0.0.1", 0), handler)
    server.accepted = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Site(int(server.server_address[1]), server, server.accepted)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def static_site() -> Iterator[Site]:
    """``/`` (`PAGE`), ``/big`` (filled by `Site.server`'s caller), and a simple index with
    ``demo-pkg`` 1.0 at ``/simple/``."""
    wheel = demo_wheel()
    files = {
        "/": ("text/plain", PAGE),
        "/simple/": ("text/html", b'<a href="/simple/demo-pkg/">demo-pkg</a>'),
        "/simple/demo-pkg/": (
            "text/html",
            f'<a href="/files/{WHEEL_NAME}">{WHEEL_NAME}</a>'.encode(),
        ),
        f"/files/{WHEEL_NAME}": ("application/octet-stream", wheel),
    }
    with _serving(_static_handler(files)) as site:
        yield site


@contextmanager
def git_site(root: Path) -> Iterator[Site]:
    """A bare repository ``repo.git`` (one commit on ``main``) under `root`, served over smart
    HTTP by ``git http-backend``."""
    work = root / "work"
    work.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(work)], check=True)
    (work / "README").write_text("hi\n", encoding="utf-8")
    subprocess.run([*git, "-C", str(work), "add", "README"], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-q", "-m", "one"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(root / "repo.git")], check=True)
    with _serving(_git_handler(root)) as site:
        yield site
