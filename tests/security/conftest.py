"""Shared fixtures of the security suite: a real home, project and user home on disk, an SDK
runtime driven by a scripted model, approval callbacks that record what they were asked, and
loopback listeners that record every connection.

Every test drives `AgentRuntime` end to end with the adapters it wires itself (the real
`LocalFileSystem`, `SubprocessRunner`, web fetcher, tree-sitter analyzer and SQLite store) and
asserts side effects only: files unchanged or absent, secrets absent from what the model received
and from every file the runtime wrote, no connection on a listener.
"""

from __future__ import annotations

import contextlib
import secrets
import socketserver
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from soong_agent import AgentRuntime, ApprovalRequest, RunResult
from soong_agent.domain.permissions import PermissionMode
from soong_agent.ports.approval import Decision
from soong_agent.ports.messages import ToolResultBlock
from soong_agent.ports.model import ModelRequest
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config

Answer = Decision
ALLOW: Answer = "allow_once"
DENY: Answer = "deny"
Call = tuple[str, dict[str, Any]]
Mode = PermissionMode


def canary(label: str) -> str:
    """A random secret that cannot turn up anywhere by chance."""
    return f"CANARY-{label}-{secrets.token_hex(12)}"


# --- approval -----------------------------------------------------------------------------


@dataclass
class Approval:
    """An approval callback that answers `answers` in turn (the last one repeats) and records
    every request it gets."""

    answers: tuple[Answer, ...]
    requests: list[ApprovalRequest] = field(default_factory=list)

    def __call__(self, request: ApprovalRequest) -> Answer:
        self.requests.append(request)
        index = min(len(self.requests), len(self.answers)) - 1
        return self.answers[index]

    @property
    def asked(self) -> bool:
        return bool(self.requests)


# --- runs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One model turn: its tool calls, and something to do just before the model is called
    for it (a swap on disk between two tool calls of one run)."""

    calls: tuple[Call, ...]
    before: Callable[[], None] | None = None


def turn(*calls: Call, before: Callable[[], None] | None = None) -> Turn:
    return Turn(tuple(calls), before)


@dataclass
class Outcome:
    """What one run left behind for the assertions."""

    result: RunResult
    model: ScriptedModel
    approval: Approval | None

    @property
    def tool_results(self) -> list[ToolResultBlock]:
        """Every tool result the model received, in order."""
        found: list[ToolResultBlock] = []
        for request in self.model.calls[1:]:
            found.extend(request.messages[-1].tool_results)
        return found

    @property
    def seen_by_model(self) -> str:
        """All the tool result text the model received."""
        return "\n".join(block.content for block in self.tool_results)

    @property
    def asked(self) -> bool:
        return self.approval is not None and self.approval.asked


def _responder(step: Turn) -> Callable[[ModelRequest], ScriptedResponse]:
    response = ScriptedResponse.tool_calls(*step.calls)

    def respond(request: ModelRequest) -> ScriptedResponse:
        if step.before is not None:
            step.before()
        return response

    return respond


# --- the world on disk --------------------------------------------------------------------


@dataclass(frozen=True)
class Secret:
    """A canary and the file(s) where it lives legitimately."""

    path: Path
    value: str
    also_in: tuple[Path, ...] = ()

    @property
    def homes(self) -> tuple[Path, ...]:
        return (self.path, *self.also_in)


@dataclass
class World:
    """Folders on disk for one test and a way to run the agent over them.

    - `project`: the project the runtime is bound to;
    - `home`: the soong-agent home (config.toml, sessions.sqlite);
    - `user_home`: the fake user home (`HOME`), holding ``~/.ssh/id_rsa``;
    - `outside`: a folder outside the project holding ``outside.txt``.

    `secrets` maps a label to a file holding a canary: ``outside``, ``env``, ``env_local``,
    ``ssh``, ``config`` (a comment in config.toml).
    """

    root: Path
    project: Path
    home: Path
    user_home: Path
    outside: Path
    secrets: dict[str, Secret] = field(default_factory=dict)
    config_text: str = ""
    model_section: str | None = None

    @property
    def outside_file(self) -> Path:
        return self.secrets["outside"].path

    def secret(self, label: str) -> str:
        return self.secrets[label].value

    def plant(self, label: str, path: Path, template: str = "{}\n") -> Secret:
        """Write a file holding a new canary (kept under `label`)."""
        value = canary(label)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(value), encoding="utf-8")
        self.secrets[label] = Secret(path, value)
        return self.secrets[label]

    def write_config(self, extra: str = "") -> None:
        """Write config.toml: the minimal [model] (or `model_section`), the config canary as a
        comment, then `extra`."""
        config = self.secrets["config"]
        if self.model_section is None:
            write_minimal_config(self.home, f"# {config.value}\n{extra}")
        else:
            text = f"{self.model_section}# {config.value}\n{extra}"
            (self.home / "config.toml").write_text(text, encoding="utf-8")
        self.config_text = (self.home / "config.toml").read_text(encoding="utf-8")

    def config_intact(self) -> bool:
        """Whether config.toml still holds what the test wrote before the run."""
        return (self.home / "config.toml").read_text(encoding="utf-8") == self.config_text

    async def run(
        self,
        *steps: Call | Turn,
        approval: Answer | Sequence[Answer] | None = DENY,
        mode: Mode | None = None,
        config: str = "",
        message: str = "please help",
    ) -> Outcome:
        """Run the agent once: each step is one model turn, then the model ends its turn.

        The run must complete with every scripted turn played, so no test passes because the
        script broke off before the malicious call.
        """
        self.write_config(config)
        turns = [s if isinstance(s, Turn) else turn(s) for s in steps]
        model = ScriptedModel([*(_responder(t) for t in turns), ScriptedResponse.text("done")])
        callback: Approval | None = None
        if approval is not None:
            answers = (approval,) if isinstance(approval, str) else tuple(approval)
            callback = Approval(answers)
        runtime = AgentRuntime(
            project_dir=self.project,
            home=self.home,
            approval=callback,
            permission_mode=mode,
            model=model,
        )
        async with runtime:
            run = await runtime.run(message)
            result = await run.wait()
        outcome = Outcome(result, model, callback)
        assert result.status == "completed", result.reason
        assert len(model.calls) == len(turns) + 1
        assert len(outcome.tool_results) == sum(len(t.calls) for t in turns)
        return outcome

    # --- leak checks ------------------------------------------------------------------------

    def leaks(self, outcome: Outcome, *labels: str) -> list[str]:
        """Where the canaries of `labels` (all secrets when none) turn up: a tool result the
        model received, or any file under the soong-agent home (SQLite and sidecars included)
        other than the secret's own file."""
        chosen = labels or tuple(self.secrets)
        found: list[str] = []
        files = [p for p in self.home.rglob("*") if p.is_file() and not p.is_symlink()]
        for label in chosen:
            secret = self.secrets[label]
            needle = secret.value.encode("utf-8")
            for index, block in enumerate(outcome.tool_results):
                if secret.value in block.content:
                    found.append(f"{label}: tool result {index} ({block.name})")
            for path in files:
                if path in secret.homes:
                    continue
                with contextlib.suppress(OSError):
                    if needle in path.read_bytes():
                        found.append(f"{label}: {path}")
        return found

    def snapshot(self) -> dict[str, bytes]:
        """The bytes of every planted secret file (not the runtime's own files), to compare
        after a run."""
        return {
            label: s.path.read_bytes()
            for label, s in self.secrets.items()
            if not s.path.is_relative_to(self.home)
        }


def _make_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, home_is_project: bool) -> World:
    user_home = tmp_path / "user"
    user_home.mkdir()
    if home_is_project:
        project, home = user_home, user_home / ".soong-agent"
    else:
        project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir(exist_ok=True)
    home.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.delenv("SOONG_AGENT_HOME", raising=False)
    world = World(tmp_path, project, home, user_home, outside)
    world.plant("outside", outside / "outside.txt", "outside data {}\n")
    world.plant("env", project / ".env", "API_TOKEN={}\n")
    world.plant("env_local", project / ".env.local", "DB_PASSWORD={}\n")
    world.plant(
        "ssh", user_home / ".ssh" / "id_rsa", "-----BEGIN KEY-----\n{}\n-----END KEY-----\n"
    )
    world.secrets["config"] = Secret(home / "config.toml", canary("config"))
    world.write_config()
    (project / "readme.txt").write_text("an ordinary project file\n", encoding="utf-8")
    return world


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    """Project, soong-agent home, user home and an outside folder side by side."""
    return _make_world(tmp_path, monkeypatch, home_is_project=False)


@pytest.fixture
def home_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    """The user runs the agent on their home folder: ``~/.ssh``, ``~/.soong-agent`` and the
    ``.env`` files all lie inside the project, so only the sensitive-path policy keeps them."""
    world = _make_world(tmp_path, monkeypatch, home_is_project=True)
    world.plant("nested_env", world.project / "service" / ".env", "SECRET_KEY={}\n")
    return world


# --- loopback listeners -------------------------------------------------------------------


Reply = tuple[int, dict[str, str], bytes]


@dataclass
class Listener:
    """An HTTP server on 127.0.0.1 that records every connection it accepts."""

    port: int = 0
    connections: int = 0
    paths: list[str] = field(default_factory=list)
    routes: dict[str, Reply] = field(default_factory=dict)
    body: bytes = b""

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "/") -> str:
        return self.origin + path

    @property
    def hit(self) -> bool:
        return self.connections > 0

    def redirect(self, path: str, location: str, status: int = 302) -> None:
        self.routes[path] = (status, {"Location": location}, b"")


@contextlib.contextmanager
def serve() -> Iterator[Listener]:
    listener = Listener()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def setup(self) -> None:
            with lock:
                listener.connections += 1
            super().setup()

        def do_GET(self) -> None:
            listener.paths.append(self.path)
            default: Reply = (200, {"Content-Type": "text/plain"}, listener.body)
            status, headers, body = listener.routes.get(self.path, default)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    server = Server(("127.0.0.1", 0), Handler)
    listener.port = server.server_address[1]
    listener.body = f"hello from listener {listener.port} {secrets.token_hex(6)}".encode()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def allowed_site() -> Iterator[Listener]:
    """The listener the tests put in `tools.network.allowed_hosts`."""
    with serve() as listener:
        yield listener


@pytest.fixture
def forbidden_site() -> Iterator[Listener]:
    """A listener that is never allowed: any connection to it is a failure."""
    with serve() as listener:
        yield listener


def network_config(*hosts: str, domains: Sequence[str] = (), extra: str = "") -> str:
    listed = ", ".join(f'"{h}"' for h in hosts)
    named = ", ".join(f'"{d}"' for d in domains)
    return f"[tools.network]\nallowed_hosts = [{listed}]\nallowed_domains = [{named}]\n{extra}"
