"""The SDK facade (LOOP-1): `AgentRuntime(project_dir=…)`, `await runtime.run(message)`."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soong_agent.entrypoints.run_options import (
    parse_limits,
    with_permission_mode,
    with_storage_url,
)
from soong_agent.entrypoints.sdk_queue import QueueMethods
from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:  # kept out of the import of the SDK: `from soong_agent import AgentRuntime`
    # must stay cheap; what is needed at run time is imported where it is used
    from soong_agent.adapters.approvals.callback import ApprovalCallback
    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.application.checkpoints.rewind import RewindReport
    from soong_agent.application.runs.handle import Run, RunResult
    from soong_agent.application.tools.base import Tool
    from soong_agent.application.tools.function import FunctionTool
    from soong_agent.domain.permissions import PermissionMode
    from soong_agent.entrypoints.containers import SdkContainer
    from soong_agent.entrypoints.mcp_callbacks import (
        AuthorizeCallback,
        ElicitationCallback,
        SamplingCallback,
    )
    from soong_agent.ports.messages import ImageBlock, Message
    from soong_agent.ports.model import ModelProvider, ToolChoice
    from soong_agent.ports.storage import RunInfo, SessionInfo, SessionStore
    from soong_agent.ports.system import Clock, IdGenerator


def load(
    project_dir: str | Path | None, home: str | Path | None, env: Mapping[str, str] | None = None
) -> LoadedConfig:
    """Resolve home and project and load `config.toml`; raises ConfigError / UsageError."""
    from soong_agent.adapters.config.project import resolve_project
    from soong_agent.adapters.config.toml_loader import load_config, resolve_home

    environ = os.environ if env is None else env
    home_path = (
        Path(home).expanduser().resolve()
        if home is not None
        else resolve_home(environ, user_home=str(Path.home()))
    )
    project = resolve_project(None if project_dir is None else str(project_dir), cwd=Path.cwd())
    return load_config(home=home_path, project=project)


def parse_tool_choice(value: str | ToolChoice | None) -> ToolChoice | None:
    """A `tool_choice` argument as the port type; UsageError for an empty one."""
    from soong_agent.ports.model import ToolChoice

    if value is None or isinstance(value, ToolChoice):
        return value
    try:
        return ToolChoice.parse(value)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def read_images(
    paths: Sequence[str | Path], loaded: LoadedConfig, *, check_vision: bool = True
) -> list[ImageBlock]:
    """The images to attach to a run's user message (SDK `run(images=…)`, CLI `run --image`):
    each file read whole (a relative path is from the current folder), its format told by its
    bytes (PNG, JPEG, GIF or WebP), at most `tools.max_image_bytes`.

    Raises:
        UsageError: a file is missing, of another format or too large (naming it), or the main
            model profile is not shown images (naming `model.vision`; not checked with
            `check_vision` False, for a model the caller supplied).
    """
    if not paths:
        return []
    from soong_agent.domain.images import FORMATS, accepts_images, sniff_image
    from soong_agent.entrypoints.factories.models import main_profile
    from soong_agent.ports.messages import ImageBlock

    model = main_profile(loaded).model
    if check_vision and not accepts_images(model.name, model.vision):
        raise UsageError(
            f"images: the model {model.name or '(unnamed)'!r} is not shown images "
            "(model.vision = false, or a model name not known to take images); set [model] "
            "vision = true in config.toml if it takes them"
        )
    cap = loaded.config.tools.max_image_bytes
    blocks: list[ImageBlock] = []
    for given in paths:
        path = Path(given).expanduser()
        try:
            with path.open("rb") as file:
                data = file.read(cap + 1)
        except FileNotFoundError:
            raise UsageError(f"images: {given}: no such file") from None
        except IsADirectoryError:
            raise UsageError(f"images: {given}: a folder, not an image file") from None
        except OSError as exc:
            raise UsageError(f"images: {given}: cannot be read ({exc.strerror or exc})") from None
        if len(data) > cap:
            raise UsageError(
                f"images: {given} is {path.stat().st_size} bytes, more than "
                f"tools.max_image_bytes ({cap})"
            )
        media_type = sniff_image(data[:16])
        if media_type is None:
            raise UsageError(f"images: {given} is not a {FORMATS} image (by its bytes)")
        blocks.append(ImageBlock(media_type=media_type, data=data, source=str(given)))
    return blocks


def _as_tools(items: Sequence[FunctionTool | Tool]) -> list[Tool]:
    """The `Tool`s of `AgentRuntime(tools=...)`; anything else is a UsageError saying how."""
    from soong_agent.application.tools.base import Tool
    from soong_agent.application.tools.function import FunctionTool

    out: list[Tool] = []
    for item in items:
        if isinstance(item, FunctionTool):
            out.append(item.as_tool())
        elif isinstance(item, Tool):
            out.append(item)
        else:
            raise UsageError(
                f"tools: {item!r} is not a tool; decorate the function with @tool "
                "(from soong_agent import tool) to declare its permission class"
            )
    return out


class AgentRuntime(QueueMethods):
    """An agent core bound to one project folder and one soong-agent home.

    Args:
        project_dir: the project folder (a file means its folder); defaults to the cwd.
        home: the soong-agent home; defaults to `SOONG_AGENT_HOME` or `~/.soong-agent`.
        approval: called when a tool call needs permission; returns ``"allow_once"``,
            ``"allow_for_session"`` or ``"deny"`` (or an awaitable of one). Without it,
            `permissions.write_without_callback` decides.
        tools: Python functions made tools with `@soong_agent.tool` (or `Tool` objects); they
            run through the same permissions, sandbox, artifacts and events as the built-ins.
        permission_mode: ``"default"``, ``"accept_edits"``, ``"plan"`` (read-only) or
            ``"bypass"``; overrides `permissions.mode` for this runtime.
        storage_url: replaces `[storage] url` (STORE-1): ``sqlite:///<path>`` or
            ``postgresql://user@host:port/db`` (its password only through the config's
            `password_env`); every session, artifact, task log and mailbox is kept there.
        model, session_store, clock, ids: replace the configured adapters (tests, custom
            providers); `compact_model` (default: `model` when given) writes compaction
            summaries.
        tracer_provider, meter_provider: an application's own OpenTelemetry providers
            (OBS-1): the runtime's spans and metrics go through them, its runs' spans inside
            the application's current span; they are used even with `[telemetry] enabled =
            false` (then only they are: nothing of the runtime's own is exported), and the
            application flushes and shuts them down.
        mcp_authorize: called with an MCP server's name and its OAuth authorization URL when
            the server wants a login (MCP-3), instead of a browser; it (or the person it
            sends there) completes the login, whose redirect comes back to the runtime.
        elicitation: called with an `ElicitationRequest` when an MCP server asks the user a
            question (MCP-4); returns an `ElicitationAnswer` (or an awaitable of one), checked
            against the form's schema before it is sent. Without it questions are declined.
        sampling: called with a `SamplingRequest` an MCP server sent, once the permission
            rules or the `approval` callback allowed it (as tool ``mcp_sampling__<server>``),
            instead of the run's model; returns a `SamplingAnswer` or None (declined).
            Without it the run's model (or `[tools.mcp] sampling_profile`) answers.

    Raises:
        ConfigError: `config.toml` is missing or invalid.
        UsageError: `project_dir` does not exist, or a tool's name is already taken.
    """

    def __init__(
        self,
        project_dir: str | Path | None = None,
        home: str | Path | None = None,
        approval: ApprovalCallback | None = None,
        *,
        tools: Sequence[FunctionTool | Tool] = (),
        permission_mode: PermissionMode | None = None,
        storage_url: str | None = None,
        model: ModelProvider | None = None,
        compact_model: ModelProvider | None = None,
        session_store: SessionStore | None = None,
        clock: Clock | None = None,
        ids: IdGenerator | None = None,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        mcp_authorize: AuthorizeCallback | None = None,
        elicitation: ElicitationCallback | None = None,
        sampling: SamplingCallback | None = None,
    ) -> None:
        from soong_agent.entrypoints.containers import SdkContainer
        from soong_agent.entrypoints.di import providers

        self.loaded = load(project_dir, home)
        if permission_mode is not None:
            self.loaded = with_permission_mode(self.loaded, permission_mode)
        if storage_url is not None:
            self.loaded = with_storage_url(self.loaded, storage_url)
        container = SdkContainer(loaded=self.loaded)
        if approval is not None:
            from soong_agent.adapters.approvals.callback import CallbackApprover

            container.approver.override(providers.Object(CallbackApprover(approval)))
        adapters = container.adapters
        replacements: list[tuple[Any, object | None]] = [
            (adapters.model_provider, model),
            (adapters.compact_provider, compact_model or model),
            (adapters.session_store, session_store),
            (adapters.clock, clock),
            (adapters.ids, ids),
        ]
        for provider, value in replacements:
            if value is not None:
                provider.override(providers.Object(value))
        if tracer_provider is not None or meter_provider is not None:
            adapters.given_telemetry.override(providers.Object((tracer_provider, meter_provider)))
        if mcp_authorize is not None or elicitation is not None or sampling is not None:
            from soong_agent.entrypoints.mcp_callbacks import give_mcp_callbacks

            give_mcp_callbacks(adapters, mcp_authorize, elicitation, sampling)
        self._container: SdkContainer = container
        self._own_model = model is None  # the config's main profile says what it can see
        self._runs: list[Run] = []
        self._closed = False
        if tools:
            container.user_tools.override(providers.Object(_as_tools(tools)))
            container.services.catalog()  # a name clash is reported now, not at the first run

    @property
    def warnings(self) -> list[str]:
        """Problems met loading tools (bad declarative tool files, unknown overrides)."""
        return list(self._container.services.catalog().warnings)

    @property
    def project_dir(self) -> Path:
        """The resolved project folder."""
        return Path(self.loaded.project)

    @property
    def home(self) -> Path:
        """The resolved soong-agent home."""
        return Path(self.loaded.home)

    async def run(
        self,
        message: str,
        session_id: str | None = None,
        agent: str | None = None,
        orchestrator: bool = False,
        *,
        from_message: str | None = None,
        tool_choice: str | ToolChoice | None = None,
        max_cost_usd: float | None = None,
        max_tokens: int | None = None,
        max_wall_ms: int | None = None,
        plan_mode: bool = False,
        images: Sequence[str | Path] = (),
    ) -> Run:
        """Start a run; `session_id` resumes that session. Returns the run's handle.

        With `from_message` (the id of an earlier user message of that session) the run starts
        a new branch there: its message takes that message's place, and the old continuation
        stays stored as another branch. `tool_choice` (``"auto"``, ``"none"``, ``"required"``
        or a tool's name) applies to the run's first model request; later requests leave the
        choice to the model. `max_cost_usd`, `max_tokens` (input + output over the run) and
        `max_wall_ms` cap this run, replacing `runtime.*` for it; reaching one ends the run at a
        turn boundary with status ``budget_exhausted`` (the session stays resumable).
        `plan_mode` starts the run in plan mode: only reading and the plan tools are allowed
        until a plan is approved (`exit_plan_mode` asks the approval callback).
        `agent` runs the session as that agent definition (a preset, AGT-3); `orchestrator`
        gives the run `dispatch_worker` over `agents.worker_pools` (AGT-4). `images` (paths of
        PNG, JPEG, GIF or WebP files, relative to the current folder) are attached to the
        message, for a model profile that is shown images (`[model] vision`).

        Raises:
            UsageError: an empty message, an unknown session, a `tool_choice` naming a tool
                the run does not have, or an image that cannot be attached (missing, not an
                image, over `tools.max_image_bytes`, or a text-only model profile).
        """
        self._check_open()
        blocks = read_images(images, self.loaded, check_vision=self._own_model)
        service = self._container.services.run_service()
        run: Run = await service.start(
            message,
            session_id=session_id,
            from_message=from_message,
            tool_choice=parse_tool_choice(tool_choice),
            limits=parse_limits(max_cost_usd, max_tokens, max_wall_ms),
            plan_mode=plan_mode,
            agent=agent,
            orchestrator=orchestrator,
            images=blocks,
        )
        # only unfinished runs are kept (for aclose); a finished one belongs to its caller alone,
        # so a long-lived runtime serving many runs stays flat in memory
        self._runs = [r for r in self._runs if not r.done]
        self._runs.append(run)
        return run

    async def list_sessions(self, *, limit: int = 50) -> list[SessionInfo]:
        """The most recently used sessions first."""
        self._check_open()
        store: SessionStore = self._container.adapters.session_store()
        return await store.list_sessions(limit=limit)

    async def session_messages(self, session_id: str) -> list[Message]:
        """The active path of a session, root first."""
        self._check_open()
        store: SessionStore = self._container.adapters.session_store()
        return await store.active_path(session_id)

    async def session_runs(self, session_id: str) -> list[RunInfo]:
        """The runs of a session, oldest first."""
        self._check_open()
        store: SessionStore = self._container.adapters.session_store()
        return await store.list_runs(session_id)

    async def rewind(
        self,
        session_id: str,
        *,
        to: str,
        files: bool = True,
        conversation: bool = True,
        force: bool = False,
    ) -> RewindReport:
        """Rewind a session to before its user message `to` (RWD-1).

        With `files`, every file the agent's calls changed since that message (file tools,
        Python tools with a path target, and, in a git work tree, commands) is put back as it
        was (a file created since is removed), through the sandbox: nothing outside the project
        is written. With `conversation`, the session's next run continues from before that
        message; the messages after it stay stored as another branch.

        A file changed outside the agent since it last left it is not overwritten unless
        `force`: the rewind is then refused, nothing is changed, and the report's
        `changed_outside` names the files (`report.refused`). What cannot be restored is in the
        report's `not_restored`, with why.

        Raises:
            UsageError: `to` is not a user message of the session, the session has a run in
                progress or belongs to another project, or neither `files` nor `conversation`.
            SessionNotFound: no such session.
        """
        from soong_agent.entrypoints.rewinding import rewind_service

        self._check_open()
        service = rewind_service(self._container.adapters)
        return await service.rewind(
            session_id, to=to, files=files, conversation=conversation, force=force
        )

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(
                "this AgentRuntime is closed (by aclose, the end of `async with`, or run_sync, "
                "which closes it when its run ends): make a new one"
            )

    async def aclose(self) -> None:
        """Cancel unfinished runs and release connections and files; the runtime can run
        nothing more."""
        self._closed = True
        for run in self._runs:
            if not run.done:
                await run.cancel()
        from soong_agent.entrypoints.closing import close_all

        await close_all(self._container.adapters.closables())

    async def __aenter__(self) -> AgentRuntime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def run_sync(self, message: str, session_id: str | None = None) -> RunResult:
        """Run to the end without an event loop of your own (a convenience for scripts).

        It closes the runtime when the run ends (its event loop ends with it): one run per
        runtime. For several runs, `async with AgentRuntime(...) as runtime:` and
        `await runtime.run(...)`."""
        self._check_open()

        async def _go() -> RunResult:
            try:
                run = await self.run(message, session_id=session_id)
                return await run.wait()
            finally:
                await self.aclose()

        return asyncio.run(_go())
