"""Every port Protocol has a fake in `soong_agent.testing` and a contract suite shared with its
real adapters; fake and real adapters take the same arguments as the Protocol declares."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import soong_agent.ports
from soong_agent import testing
from soong_agent.adapters.agents import HomeAgentSource
from soong_agent.adapters.approvals.callback import CallbackApprover
from soong_agent.adapters.approvals.terminal import TerminalApprover
from soong_agent.adapters.mailbox import FileMailbox
from soong_agent.adapters.mcp.hub import SdkMcpHub
from soong_agent.adapters.memory import FileMemoryStore
from soong_agent.adapters.ossandbox import (
    BubblewrapSandbox,
    LandlockSandbox,
    NoSandbox,
    RefusingSandbox,
)
from soong_agent.adapters.postgres import (
    PostgresArtifactStore,
    PostgresMailbox,
    PostgresSessionStore,
    PostgresTaskLog,
)
from soong_agent.adapters.postgres.approvals import PostgresApprovalStore
from soong_agent.adapters.postgres.run_queue import PostgresRunQueue
from soong_agent.adapters.process import SubprocessRunner
from soong_agent.adapters.process.background import SubprocessBackground
from soong_agent.adapters.providers.anthropic_messages import AnthropicMessagesProvider
from soong_agent.adapters.providers.ollama_chat import OllamaChatProvider
from soong_agent.adapters.providers.openai_chat import OpenAIChatProvider
from soong_agent.adapters.redaction import SecretScrubber
from soong_agent.adapters.sandbox.local_fs import LocalFileSystem
from soong_agent.adapters.shell import TreeSitterShellAnalyzer
from soong_agent.adapters.skills import HomeSkillSource
from soong_agent.adapters.storage.approvals import SqliteApprovalStore
from soong_agent.adapters.storage.artifacts import SqliteArtifactStore
from soong_agent.adapters.storage.run_queue import SqliteRunQueue
from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
from soong_agent.adapters.system.clock import RandomIds, SystemClock
from soong_agent.adapters.system.context_source import FileContextSource
from soong_agent.adapters.system.secrets import EnvSecretSource
from soong_agent.adapters.tasks import FileTaskLog
from soong_agent.adapters.telemetry import OtelTelemetry
from soong_agent.adapters.tokens.o200k import O200kTokenCounter
from soong_agent.adapters.web.fetcher import HttpxWebFetcher
from soong_agent.adapters.worktrees import GitWorktrees
from soong_agent.adapters.worktrees.snapshots import GitSnapshots
from soong_agent.application.runs.handle import Run

CONTRACTS = Path(__file__).parents[1] / "contract"


@dataclass(frozen=True)
class Coverage:
    fake: Callable[[], object]  # builds the fake with its defaults
    reals: tuple[type, ...]
    suite: str  # the contract module in tests/contract


PORTS: dict[str, Coverage] = {
    "ModelProvider": Coverage(
        testing.ScriptedModel,
        (OpenAIChatProvider, AnthropicMessagesProvider, OllamaChatProvider),
        "test_model_contract.py",
    ),
    "SessionStore": Coverage(
        testing.InMemorySessionStore,
        (SqliteSessionStore, PostgresSessionStore),
        "test_session_store_contract.py",
    ),
    "ArtifactStore": Coverage(
        testing.InMemoryArtifactStore,
        (SqliteArtifactStore, PostgresArtifactStore),
        "test_artifact_store_contract.py",
    ),
    "FileSystem": Coverage(
        testing.InMemoryFileSystem, (LocalFileSystem,), "test_filesystem_contract.py"
    ),
    "ProcessRunner": Coverage(
        testing.ScriptedProcessRunner, (SubprocessRunner,), "test_process_runner_contract.py"
    ),
    "BackgroundProcess": Coverage(
        testing.ScriptedBackground, (SubprocessBackground,), "test_process_runner_contract.py"
    ),
    "ShellAnalyzer": Coverage(
        testing.SimpleShellAnalyzer, (TreeSitterShellAnalyzer,), "test_shell_analyzer_contract.py"
    ),
    "WebFetcher": Coverage(
        testing.ScriptedWebFetcher, (HttpxWebFetcher,), "test_web_fetcher_contract.py"
    ),
    "Approver": Coverage(
        testing.RecordingApprover,
        (CallbackApprover, TerminalApprover),
        "test_approver_contract.py",
    ),
    "Clock": Coverage(testing.FixedClock, (SystemClock,), "test_system_contract.py"),
    "IdGenerator": Coverage(testing.SequentialIds, (RandomIds,), "test_system_contract.py"),
    "SecretSource": Coverage(
        testing.DictSecretSource, (EnvSecretSource,), "test_system_contract.py"
    ),
    "TokenCounter": Coverage(
        testing.ApproxTokenCounter, (O200kTokenCounter,), "test_token_counter_contract.py"
    ),
    "ContextSource": Coverage(
        testing.StaticContextSource, (FileContextSource,), "test_system_contract.py"
    ),
    "EventSink": Coverage(testing.RecordingEventSink, (Run,), "test_event_sink_contract.py"),
    "SecretRedactor": Coverage(
        testing.DictSecretRedactor, (SecretScrubber,), "test_secret_redactor_contract.py"
    ),
    "CommandSandbox": Coverage(
        testing.RecordingCommandSandbox,
        (NoSandbox, RefusingSandbox, BubblewrapSandbox, LandlockSandbox),
        "test_os_sandbox_contract.py",
    ),
    "McpHub": Coverage(testing.ScriptedMcpHub, (SdkMcpHub,), "test_mcp_hub_contract.py"),
    "MemoryStore": Coverage(
        testing.InMemoryMemoryStore, (FileMemoryStore,), "test_memory_store_contract.py"
    ),
    "SkillSource": Coverage(
        testing.InMemorySkillSource, (HomeSkillSource,), "test_skill_source_contract.py"
    ),
    "TaskLog": Coverage(
        testing.InMemoryTaskLog, (FileTaskLog, PostgresTaskLog), "test_task_log_contract.py"
    ),
    "AgentSource": Coverage(
        testing.InMemoryAgentSource, (HomeAgentSource,), "test_agent_source_contract.py"
    ),
    "Mailbox": Coverage(
        testing.InMemoryMailbox, (FileMailbox, PostgresMailbox), "test_mailbox_contract.py"
    ),
    "Worktrees": Coverage(testing.InMemoryWorktrees, (GitWorktrees,), "test_worktree_contract.py"),
    "RunQueue": Coverage(
        testing.InMemoryRunQueue,
        (SqliteRunQueue, PostgresRunQueue),
        "test_run_queue_contract.py",
    ),
    "ApprovalStore": Coverage(
        testing.InMemoryApprovalStore,
        (SqliteApprovalStore, PostgresApprovalStore),
        "test_approval_store_contract.py",
    ),
    "WorkTreeSnapshots": Coverage(
        testing.InMemorySnapshots, (GitSnapshots,), "test_snapshots_contract.py"
    ),
    "Telemetry": Coverage(
        testing.RecordingTelemetry, (OtelTelemetry,), "test_telemetry_contract.py"
    ),
}


def port_protocols() -> dict[str, type]:
    """Every Protocol class defined in a module of `soong_agent.ports`."""
    found: dict[str, type] = {}
    for info in pkgutil.iter_modules(soong_agent.ports.__path__):
        module = importlib.import_module(f"soong_agent.ports.{info.name}")
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and value.__module__ == module.__name__
                and getattr(value, "_is_protocol", False)
            ):
                found[name] = value
    return found


PROTOCOLS = port_protocols()


def members(protocol: type) -> dict[str, Any]:
    return {
        name: value
        for name, value in vars(protocol).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }


def attributes(protocol: type) -> list[str]:
    """The data members a Protocol declares (``commit_survives_cancel: bool``)."""
    return sorted(n for n in vars(protocol).get("__annotations__", {}) if not n.startswith("_"))


def has_signature(member: Any) -> bool:
    try:
        inspect.signature(member)
    except ValueError:
        return False
    return True


def shape(member: Any) -> list[tuple[str, Any, Any]]:
    """Parameter names, kinds and defaults (annotations aside: the fakes may spell them apart)."""
    if isinstance(member, property):
        return [("property", None, None)]
    params = list(inspect.signature(member).parameters.values())
    return [(p.name, p.kind, p.default) for p in params]


def test_every_port_is_listed_here() -> None:
    assert sorted(PROTOCOLS) == sorted(PORTS), "a port was added or removed: update PORTS"


@pytest.mark.parametrize("port", sorted(PORTS))
def test_the_fake_is_public_and_implements_the_port(port: str) -> None:
    coverage = PORTS[port]
    fake = coverage.fake()
    assert isinstance(fake, PROTOCOLS[port])
    assert coverage.fake.__name__ in testing.__all__


@pytest.mark.parametrize("port", sorted(PORTS))
def test_the_contract_suite_exists_and_names_fake_and_real(port: str) -> None:
    coverage = PORTS[port]
    suite = CONTRACTS / coverage.suite
    assert suite.is_file(), f"no contract suite {suite.name} for {port}"
    text = suite.read_text(encoding="utf-8")
    assert coverage.fake.__name__ in text


@pytest.mark.parametrize("port", sorted(PORTS))
def test_fake_and_real_adapters_declare_the_port_attributes(port: str) -> None:
    """A data member of a port is declared by every implementation (a class attribute or
    one set by its constructor): the runtime reads it directly, never probes for it."""
    coverage = PORTS[port]
    for implementation in (coverage.fake(), *coverage.reals):
        for name in attributes(PROTOCOLS[port]):
            if isinstance(implementation, type):
                declared = name in vars(implementation) or any(
                    name in vars(k).get("__annotations__", {}) for k in implementation.__mro__
                )
            else:
                declared = hasattr(implementation, name)
            shown = getattr(implementation, "__name__", type(implementation).__name__)
            assert declared, f"{shown} does not declare {port}.{name}"


def test_the_session_store_declares_whether_its_commit_survives_cancel() -> None:
    assert attributes(PROTOCOLS["SessionStore"]) == ["commit_survives_cancel"]
    assert testing.InMemorySessionStore.commit_survives_cancel is True
    assert SqliteSessionStore.commit_survives_cancel is True


@pytest.mark.parametrize("port", sorted(PORTS))
def test_fake_and_real_adapters_take_what_the_port_declares(port: str) -> None:
    protocol = PROTOCOLS[port]
    coverage = PORTS[port]
    for implementation in (type(coverage.fake()), *coverage.reals):
        for name, declared in members(protocol).items():
            given = inspect.getattr_static(implementation, name, None)
            assert given is not None, f"{implementation.__name__} lacks {port}.{name}"
            want = shape(declared)
            if isinstance(given, staticmethod):
                want = want[1:]  # the port's `self` is not passed on to a static method
            if isinstance(given, staticmethod | classmethod):
                given = given.__func__
            if isinstance(given, types.BuiltinFunctionType) and not has_signature(given):
                # a C function (SystemClock.now is time.time): called as the port is, checked
                # by the adapter's own tests
                assert not want, f"{implementation.__name__}.{name}: {port} passes arguments"
                continue
            got = shape(given)
            # an implementation may take more, as long as a caller of the port need not pass it
            extra = [p for p in got if p not in want]
            assert [p for p in got if p in want] == want, f"{implementation.__name__}.{name}"
            assert all(d is not inspect.Parameter.empty for _, _, d in extra), (
                f"{implementation.__name__}.{name} requires more than {port} declares"
            )
