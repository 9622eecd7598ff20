"""`save_memory` and `forget_memory`: the main agent's hands on its long-term memory.

Both go through the one memory writer (`MemoryStore`) and `save_memory` through the memory
policy first: a memory the policy refuses (file structure, code signatures, task progress,
branch or PR names, fix details, secrets) is not written, and the model is told why in an
error result, and the run records a ``memory_rejected`` event (the result's `events`); the
rejection is also handed to `on_rejected` when given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

from pydantic import AliasChoices, Field

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.domain.memory.paths import NAME_RULE
from soong_agent.domain.memory.policy import MemoryPolicy, MemoryVerdict
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.events import MemoryRejected
from soong_agent.ports.memory import MemoryFileInvalid, MemoryNotFound, MemoryStore

SAVE_SOURCE = "save_memory"
MAX_NAMES_SHOWN = 30

RejectionListener = Callable[[ToolContext, dict[str, Any]], None]
"""Called with the call's context and the fields of a `MemoryRejected` event
(``recorder.event(MemoryRejected, **fields)``)."""


class SaveMemoryArgs(ToolArgs):
    name: str = Field(
        description=f"The memory's name: {NAME_RULE} (e.g. prefer_tabs). Saving under an "
        "existing name replaces that memory."
    )
    description: str = Field(
        description="One line saying what the memory is about; it is what later sessions see "
        "in the memory index."
    )
    category: Literal["user", "feedback", "reference"] = Field(
        validation_alias=AliasChoices("category", "type"),
        description="user: who the user is, what they know and prefer. feedback: how they want "
        "the work done (corrections, do/don't). reference: where to find things outside the "
        "project (URLs, dashboards, trackers, documents).",
    )
    body: str = Field(
        validation_alias=AliasChoices("body", "content"),
        description="The memory in Markdown: one lasting fact, and why it matters.",
    )


class ForgetMemoryArgs(ToolArgs):
    name: str = Field(description="The name of the memory to remove.")


def memory_rejected_fields(verdict: MemoryVerdict, *, source: str) -> dict[str, Any]:
    """The fields of a `MemoryRejected` event for a refused candidate (the recorder adds the
    sequence number, run, session and time)."""
    return {
        "source": source,
        "name": verdict.memory.name,
        "category": verdict.memory.category,
        "codes": verdict.codes,
        "reasons": verdict.reasons,
    }


def _describe_save(args: SaveMemoryArgs, ctx: ToolContext) -> tuple[str, str]:
    return "*", f"save memory {args.name!r} ({args.category}): {args.description.strip()}"


def _describe_forget(args: ForgetMemoryArgs, ctx: ToolContext) -> tuple[str, str]:
    return "*", f"forget memory {args.name!r}"


class MemoryTools:
    """The handlers of the two tools over one store and policy."""

    def __init__(
        self,
        store: MemoryStore,
        policy: MemoryPolicy,
        *,
        on_rejected: RejectionListener | None = None,
    ) -> None:
        self._store = store
        self._policy = policy
        self._on_rejected = on_rejected

    async def save(self, args: SaveMemoryArgs, ctx: ToolContext) -> ToolOutput:
        verdict = self._policy.review(
            name=args.name, description=args.description, body=args.body, category=args.category
        )
        if not verdict.accepted:
            fields = memory_rejected_fields(verdict, source=SAVE_SOURCE)
            if self._on_rejected is not None:
                self._on_rejected(ctx, fields)
            return ToolOutput(
                f"memory {args.name!r} was not saved: {verdict.reason()}",
                is_error=True,
                events=((MemoryRejected, fields),),
            )
        try:
            before = await asyncio.to_thread(self._known_category, args.name)
            stored = await asyncio.to_thread(self._store.write, verdict.memory)
        except SoongAgentError as exc:
            return ToolOutput(f"memory {args.name!r} was not saved: {exc}", is_error=True)
        if before is None:
            verb = "created"
        elif before != stored.category:
            verb = f"updated (moved from {before} to {stored.category})"
        else:
            verb = "updated"
        return ToolOutput(
            f"memory {stored.name!r} {verb} ({stored.category}): {stored.description}"
        )

    async def forget(self, args: ForgetMemoryArgs, ctx: ToolContext) -> ToolOutput:
        try:
            removed = await asyncio.to_thread(self._store.delete, args.name)
        except MemoryNotFound:
            names = (await asyncio.to_thread(self._store.catalogue)).names()
            shown = ", ".join(names[:MAX_NAMES_SHOWN]) or "none"
            if len(names) > MAX_NAMES_SHOWN:
                shown += f", … ({len(names)} in all)"
            return ToolOutput(
                f"no memory named {args.name!r}; the memories are: {shown}", is_error=True
            )
        except SoongAgentError as exc:
            return ToolOutput(f"memory {args.name!r} was not removed: {exc}", is_error=True)
        return ToolOutput(f"memory {removed.name!r} ({removed.category}) forgotten")

    def _known_category(self, name: str) -> str | None:
        """The category of the memory called `name` now (None: there is none, or only a file
        that is not a valid memory, which the write replaces)."""
        try:
            return self._store.read(name).category
        except (MemoryNotFound, MemoryFileInvalid):
            return None


def memory_tools(
    store: MemoryStore,
    policy: MemoryPolicy,
    *,
    on_rejected: RejectionListener | None = None,
) -> list[Tool]:
    """`save_memory` and `forget_memory` over `store`, saving only what `policy` accepts.

    Both are ``write`` tools (they change what every later session starts with): asked for in
    the default mode, allowed in ``accept_edits``, refused in ``plan``.
    """
    tools = MemoryTools(store, policy, on_rejected=on_rejected)
    return [
        Tool(
            "save_memory",
            "Remember something for later sessions, or update a memory (same name). Keep only "
            "lasting facts that cannot be read again from the project: who the user is and "
            "what they prefer, how they want the work done, where to find things outside the "
            "project. Never save file structure, code signatures, the current task's progress, "
            "branch or PR names, details of a fix, or secrets: such memories are refused.",
            SaveMemoryArgs,
            tools.save,
            permission_class="write",
            describe=_describe_save,
        ),
        Tool(
            "forget_memory",
            "Remove a memory that is wrong or no longer true, by its name.",
            ForgetMemoryArgs,
            tools.forget,
            permission_class="write",
            describe=_describe_forget,
        ),
    ]
