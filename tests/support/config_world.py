"""A harness for tables of config keys: write a config, build the runtime or make a run,
and look at what it did (tests/integration/test_config_keys_table.py)."""

from __future__ import annotations

import http.server
import inspect
import json
import re
import threading
import types
import typing
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel

from soong_agent import AgentRuntime, ApprovalRequest
from soong_agent.adapters.config import LoadedConfig, load_config
from soong_agent.domain.config.schema import SoongConfig
from soong_agent.entrypoints.containers import SdkContainer
from soong_agent.entrypoints.di import providers
from soong_agent.ports.approval import Decision
from soong_agent.ports.events import RunEvent, ToolResultEvent
from soong_agent.ports.model import ModelRequest
from soong_agent.testing import (
    ScriptedMcpHub,
    ScriptedModel,
    ScriptedResponse,
)

REPO = Path(__file__).resolve().parents[2]

BASE: dict[str, Any] = {"model": {"name": "m", "api_key_env": ""}}
"""What every config of the table has (a model call needs a name; no key variable)."""

Config = dict[str, Any]

# --- the schema's keys -------------------------------------------------------------------


def _members(annotation: Any) -> tuple[Any, ...]:
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for a in get_args(annotation) if a is not type(None))
    return (annotation,)


def _model(annotation: Any) -> type[BaseModel] | None:
    members = _members(annotation)
    if len(members) == 1 and isinstance(members[0], type) and issubclass(members[0], BaseModel):
        return members[0]
    return None


def schema_keys(model: type[BaseModel] = SoongConfig, prefix: str = "") -> Iterator[str]:
    """Every leaf key, as `section.key`; `<name>` stands for a table's own keys
    (`tools.overrides.<name>.timeout_ms`), `[]` for an entry of an array of tables."""
    for name, info in model.model_fields.items():
        annotation = info.annotation
        inner = _model(annotation)
        if inner is not None:
            yield from schema_keys(inner, f"{prefix}{name}.")
            continue
        origin, args = get_origin(annotation), get_args(annotation)
        if origin is dict and _model(args[1]) is not None:
            yield from schema_keys(_model(args[1]), f"{prefix}{name}.<name>.")  # type: ignore[arg-type]
        elif origin is list and _model(args[0]) is not None:
            yield from schema_keys(_model(args[0]), f"{prefix}{name}[].")  # type: ignore[arg-type]
        else:
            yield f"{prefix}{name}"


# --- writing a config ----------------------------------------------------------------------


def merged(*layers: Mapping[str, Any]) -> Config:
    """The layers deep-merged (tables merge, every other value replaces, arrays included)."""
    out: Config = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, Mapping) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            elif isinstance(value, Mapping):
                out[key] = merged(value)
            else:
                out[key] = value
    return out


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {value!r}")


def toml_text(config: Mapping[str, Any], prefix: str = "") -> str:
    """`config` as TOML: tables as `[a.b]` headers, arrays of tables inline."""
    lines = [f"[{prefix}]"] if prefix else []
    tables = {k: v for k, v in config.items() if isinstance(v, Mapping)}
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in config.items() if k not in tables]
    text = "\n".join(lines) + "\n"
    for key, table in tables.items():
        text += toml_text(table, f"{prefix}.{_toml_key(key)}" if prefix else _toml_key(key))
    return text


# --- the world a row is tried in -----------------------------------------------------------


def allow(request: ApprovalRequest) -> Decision:
    return "allow_once"


Approve = Callable[[ApprovalRequest], Decision] | None


@dataclass
class Outcome:
    """What one run did."""

    status: str
    reason: str | None
    events: list[RunEvent]
    calls: list[ModelRequest]
    asked: list[ApprovalRequest]
    home: Path
    project: Path

    def results(self) -> list[ToolResultEvent]:
        return [e for e in self.events if isinstance(e, ToolResultEvent)]

    def result(self, index: int = 0) -> str:
        return self.results()[index].content

    def failed(self, index: int = 0) -> bool:
        return self.results()[index].is_error

    def offered(self, call: int = 0) -> list[str]:
        return [t.name for t in self.calls[call].tools]

    def system(self, call: int) -> str:
        return "\n".join(part.text for part in self.calls[call].system)


class World:
    """Fresh homes and projects under one temporary folder, a config written in each."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._count = 0

    def place(self, config: Config, files: Mapping[str, str] = {}) -> tuple[Path, Path]:
        """A new home (with `config.toml`) and project; `files` are written relative to the
        folder holding both (`home/agents/x.md`, `project/a.txt`)."""
        self._count += 1
        root = self.root / f"w{self._count}"
        home, project = root / "home", root / "project"
        home.mkdir(parents=True)
        project.mkdir()
        (home / "config.toml").write_text(toml_text(merged(BASE, config)), encoding="utf-8")
        for name, text in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text.replace("{root}", str(root)), encoding="utf-8")
        return home, project.resolve()

    def loaded(self, config: Config, files: Mapping[str, str] = {}) -> LoadedConfig:
        home, project = self.place(config, files)
        return load_config(home=home, project=project)

    def container(self, config: Config, files: Mapping[str, str] = {}) -> SdkContainer:
        return SdkContainer(loaded=self.loaded(config, files))

    async def run(
        self,
        config: Config,
        script: Sequence[object],
        *,
        message: str = "go",
        approve: Approve = allow,
        files: Mapping[str, str] = {},
        orchestrator: bool = False,
        hub: ScriptedMcpHub | None = None,
        default: object = None,
    ) -> Outcome:
        home, project = self.place(config, files)
        model = ScriptedModel(script, default=default)  # type: ignore[arg-type]
        asked: list[ApprovalRequest] = []

        def approval(request: ApprovalRequest) -> Decision:
            asked.append(request)
            assert approve is not None
            return approve(request)

        runtime = AgentRuntime(
            project,
            home,
            approval if approve is not None else None,
            model=model,
        )
        if hub is not None:
            runtime._container.adapters.mcp_hub.override(providers.Object(hub))
        async with runtime:
            run = await runtime.run(message, orchestrator=orchestrator)
            events = [event async for event in run.events()]
            result = await run.wait()
        return Outcome(result.status, result.reason, events, model.calls, asked, home, project)


# --- the rows --------------------------------------------------------------------------------

Probe = Callable[[World, Config], Awaitable[object]]


@dataclass(frozen=True)
class Effect:
    """Setting `key` as `value` changes what `probe` sees from `default` to `changed`."""

    key: str
    value: Config
    probe: Probe
    default: object
    changed: object
    base: Config = field(default_factory=dict)


@dataclass(frozen=True)
class Refused:
    """Setting `key` as `value` stops the start with a ConfigError naming `where` (the key as
    written) and saying `says`."""

    key: str
    value: Config
    says: str
    where: str = ""


Row = Effect | Refused


def at(path: str, value: object) -> Config:
    """`at("tools.mcp.call_timeout_ms", 5)` → `{"tools": {"mcp": {"call_timeout_ms": 5}}}`."""
    out: Any = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return out  # type: ignore[no-any-return]


def built(look: Callable[[SdkContainer], object], files: Mapping[str, str] = {}) -> Probe:
    """Probe: `look` at the runtime the containers build."""

    async def probe(world: World, config: Config) -> object:
        value = look(world.container(config, files))
        return await value if inspect.isawaitable(value) else value

    return probe


def ran(
    script: Callable[[], Sequence[object]],
    look: Callable[[Outcome], object],
    **options: Any,
) -> Probe:
    """Probe: make one run with `script` (a fresh list each time) and `look` at it."""

    async def probe(world: World, config: Config) -> object:
        return look(await world.run(config, script(), **options))

    return probe


def text(*answers: str) -> Callable[[], list[object]]:
    return lambda: [ScriptedResponse.text(a) for a in answers]


def calls(*items: tuple[str, Mapping[str, Any]], then: str = "done") -> Callable[[], list[object]]:
    """One model turn per tool call, then a final answer."""
    return lambda: [
        *(ScriptedResponse.tool_calls(item) for item in items),
        ScriptedResponse.text(then),
    ]


# --- a loopback web server (web_fetch rows) -------------------------------------------------

PAGE = "hello from the table\n" * 10


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # (the name http.server calls)
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


class _Web:
    server: http.server.ThreadingHTTPServer | None = None

    def port(self) -> int:
        if self.server is None:
            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
            threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self.server.server_address[1]

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


WEB = _Web()


def fetch(host: str = "127.0.0.1") -> Callable[[], list[object]]:
    return lambda: [
        ScriptedResponse.tool_calls(("web_fetch", {"url": f"http://{host}:{WEB.port()}/"})),
        ScriptedResponse.text("done"),
    ]


# --- the docs ---------------------------------------------------------------------------------


def schema_entries(model: type[BaseModel] = SoongConfig, prefix: str = "") -> Iterator[str]:
    """Every key of every table, tables included (`tools.network` and its keys)."""
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        annotation = info.annotation
        origin, args = get_origin(annotation), get_args(annotation)
        inner = _model(annotation)
        if inner is not None:
            yield from schema_entries(inner, f"{path}.")
        elif origin is dict and _model(args[1]) is not None:
            yield from schema_entries(_model(args[1]), f"{path}.<name>.")  # type: ignore[arg-type]
        elif origin is list and _model(args[0]) is not None:
            yield from schema_entries(_model(args[0]), f"{path}[].")  # type: ignore[arg-type]


def documented_keys(text: str) -> list[str]:
    """The keys the tables of "Every key" list (`| key | type | default | meaning |`), each
    under the table its heading names: `[tools.network]`, `[[agents.worker_pools]]`,
    `[tools.overrides.<tool>]`."""
    section = text.split("\n## Every key\n", 1)[1].split("\n## ", 1)[0]
    arrays: set[str] = set()
    table: str | None = None
    header = False
    keys: list[str] = []
    for line in section.splitlines():
        heading = re.match(r"#+ `(\[\[?)([^\]]+)\]\]?`$", line)
        if heading:
            name = re.sub(r"<\w+>", "<name>", heading.group(2))
            if heading.group(1) == "[[":
                arrays.add(name)
            parts = name.split(".")
            table = ".".join(
                p + ("[]" if ".".join(parts[: i + 1]) in arrays else "")
                for i, p in enumerate(parts)
            )
            header = False
        elif line.startswith("#"):
            table = None
        elif line.startswith("| key | type | default | meaning |"):
            header = True
        elif header and line.startswith("| `"):
            key = line.split("`")[1]
            assert table is not None, f"a key table outside a table's heading: {line}"
            keys.append(f"{table}.{key}")
        elif not line.startswith("|"):
            header = False
    return keys
