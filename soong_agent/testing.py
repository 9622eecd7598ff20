"""Fakes of every port, for testing agents built on soong-agent the way its own tests do.

Each fake refuses what the strictest real adapter refuses, and runs the same contract suite as
the real adapter (tests/contract):

    ModelProvider   ScriptedModel            SessionStore   InMemorySessionStore
    ArtifactStore   InMemoryArtifactStore    FileSystem     InMemoryFileSystem
    ProcessRunner   ScriptedProcessRunner    ShellAnalyzer  SimpleShellAnalyzer
    WebFetcher      ScriptedWebFetcher       TokenCounter   ApproxTokenCounter
    EventSink       RecordingEventSink       Approver       RecordingApprover, CallbackApprover
    Clock           FixedClock               IdGenerator    SequentialIds
    SecretSource    DictSecretSource         ContextSource  StaticContextSource
    SecretRedactor  DictSecretRedactor       CommandSandbox RecordingCommandSandbox
    McpHub          ScriptedMcpHub (servers declared with ScriptedMcpServer)
    MemoryStore     InMemoryMemoryStore
    SkillSource     InMemorySkillSource
    TaskLog         InMemoryTaskLog
    AgentSource     InMemoryAgentSource
    Worktrees       InMemoryWorktrees
    Mailbox         InMemoryMailbox
    RunQueue        InMemoryRunQueue (InMemorySessionStore(run_queue=...) checks fences with it)
    ApprovalStore   InMemoryApprovalStore
    BackgroundProcess  ScriptedBackground (what ScriptedProcessRunner.start returns)
    WorkTreeSnapshots  InMemorySnapshots (over an InMemoryFileSystem)
    Telemetry       RecordingTelemetry

Example:
    model = ScriptedModel([
        ScriptedResponse.tool_calls(("write_file", {"path": "a", "content": "x"})),
        ScriptedResponse.text("done"),
    ])
    runtime = AgentRuntime(project_dir=tmp, home=home, model=model,
                           session_store=InMemorySessionStore(), approval=lambda req: "allow_once")
"""

from __future__ import annotations

from pathlib import Path

from soong_agent.adapters.approvals.callback import CallbackApprover
from soong_agent.adapters.inmemory.agents import InMemoryAgentSource
from soong_agent.adapters.inmemory.approvals import InMemoryApprovalStore
from soong_agent.adapters.inmemory.artifacts import InMemoryArtifactStore
from soong_agent.adapters.inmemory.events import RecordingEventSink
from soong_agent.adapters.inmemory.fakes import (
    DictSecretSource,
    FixedClock,
    RecordingApprover,
    SequentialIds,
    StaticContextSource,
)
from soong_agent.adapters.inmemory.filesystem import InMemoryFileSystem
from soong_agent.adapters.inmemory.mailbox import InMemoryMailbox
from soong_agent.adapters.inmemory.mcp import McpCall, ScriptedMcpHub, ScriptedMcpServer
from soong_agent.adapters.inmemory.memory import InMemoryMemoryStore
from soong_agent.adapters.inmemory.ossandbox import RecordingCommandSandbox, SandboxCall
from soong_agent.adapters.inmemory.process import (
    ProcessCall,
    ScriptedBackground,
    ScriptedProcess,
    ScriptedProcessRunner,
    UnscriptedCommand,
)
from soong_agent.adapters.inmemory.redactor import DictSecretRedactor
from soong_agent.adapters.inmemory.run_queue import InMemoryRunQueue
from soong_agent.adapters.inmemory.scripted_model import ScriptedModel, ScriptedResponse
from soong_agent.adapters.inmemory.session_store import InMemorySessionStore
from soong_agent.adapters.inmemory.shell import SimpleShellAnalyzer
from soong_agent.adapters.inmemory.skills import InMemorySkillSource
from soong_agent.adapters.inmemory.snapshots import InMemorySnapshots
from soong_agent.adapters.inmemory.tasks import InMemoryTaskLog
from soong_agent.adapters.inmemory.telemetry import RecordingTelemetry
from soong_agent.adapters.inmemory.tokens import ApproxTokenCounter
from soong_agent.adapters.inmemory.web import ScriptedPage, ScriptedWebFetcher
from soong_agent.adapters.inmemory.worktrees import InMemoryWorktrees

__all__ = [
    "ApproxTokenCounter",
    "CallbackApprover",
    "DictSecretRedactor",
    "DictSecretSource",
    "FixedClock",
    "InMemoryAgentSource",
    "InMemoryApprovalStore",
    "InMemoryArtifactStore",
    "InMemoryFileSystem",
    "InMemoryMailbox",
    "InMemoryMemoryStore",
    "InMemoryRunQueue",
    "InMemorySessionStore",
    "InMemorySkillSource",
    "InMemorySnapshots",
    "InMemoryTaskLog",
    "InMemoryWorktrees",
    "McpCall",
    "ProcessCall",
    "RecordingApprover",
    "RecordingCommandSandbox",
    "RecordingEventSink",
    "RecordingTelemetry",
    "SandboxCall",
    "ScriptedBackground",
    "ScriptedMcpHub",
    "ScriptedMcpServer",
    "ScriptedModel",
    "ScriptedPage",
    "ScriptedProcess",
    "ScriptedProcessRunner",
    "ScriptedResponse",
    "ScriptedWebFetcher",
    "SequentialIds",
    "SimpleShellAnalyzer",
    "StaticContextSource",
    "UnscriptedCommand",
    "write_minimal_config",
]

MINIMAL_CONFIG = """\
[model]
provider = "openai"
name = "scripted"
api_key_env = ""
"""


def write_minimal_config(home: Path, extra: str = "") -> Path:
    """Create `home/config.toml` with a minimal valid config (plus `extra` TOML) for tests."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.toml"
    path.write_text(MINIMAL_CONFIG + extra, encoding="utf-8")
    return path
