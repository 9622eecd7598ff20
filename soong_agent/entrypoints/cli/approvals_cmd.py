"""`soong-agent approvals list|answer` (WORK-3): the questions workers' runs wait on, answered
from any process or host that reaches the store."""

from __future__ import annotations

import asyncio
import datetime as dt
import getpass
import json
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from soong_agent.entrypoints.cli.common import EXIT_OK, guarded
from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:
    from soong_agent.entrypoints.containers import CliContainer
    from soong_agent.ports.approval_store import ApprovalStore, PendingApproval

T = TypeVar("T")


def _with_store(path: str | None, work: Callable[[CliContainer, ApprovalStore], Awaitable[T]]) -> T:
    async def go() -> T:
        from soong_agent.entrypoints.closing import close_all
        from soong_agent.entrypoints.containers import CliContainer
        from soong_agent.entrypoints.sdk import load

        container = CliContainer(loaded=load(path, None))
        try:
            return await work(container, container.adapters.approval_store())
        finally:
            await close_all(container.adapters.closables())

    return asyncio.run(go())


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return dt.datetime.fromtimestamp(at, tz=dt.UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def as_json(approval: PendingApproval) -> dict[str, object]:
    return {
        "approval_id": approval.id,
        "run_id": approval.run_id,
        "session_id": approval.session_id,
        "project_dir": approval.project_dir,
        "tool": approval.tool,
        "summary": approval.summary,
        "detail": approval.detail,
        "scope": approval.scope,
        "asked_at": approval.asked_at,
        "status": approval.status,
        "decision": approval.decision,
        "answered_by": approval.answered_by,
        "answered_at": approval.answered_at,
    }


def list_command(*, path: str | None, all_: bool, output: str) -> int:
    """The pending approvals (with `all_`, answered and expired ones too), newest first."""

    async def work(container: CliContainer, store: ApprovalStore) -> int:
        found = await store.list(status=None if all_ else "pending")
        if output == "json":
            for approval in found:
                sys.stdout.write(json.dumps(as_json(approval)) + "\n")
            return EXIT_OK
        if not found:
            sys.stdout.write("no pending approvals\n" if not all_ else "no approvals\n")
            return EXIT_OK
        blocks = []
        for a in found:
            head = f"{a.id}  {a.status}  {a.tool}: {a.summary}"
            lines = [head, f"  run {a.run_id}, session {a.session_id}, asked {_when(a.asked_at)}"]
            if a.scope:
                lines.append(f"  allow_for_session covers: {a.scope}")
            if a.status != "pending":
                by = f" by {a.answered_by}" if a.answered_by else ""
                lines.append(f"  {a.decision}{by} at {_when(a.answered_at)}")
            if a.detail:
                lines += ["  " + line for line in a.detail.splitlines()[:40]]
            blocks.append("\n".join(lines))
        sys.stdout.write("\n\n".join(blocks) + "\n")
        return EXIT_OK

    def go() -> int:
        if output not in ("text", "json"):
            raise UsageError(f"--output: expected text or json, found {output!r}")
        return _with_store(path, work)

    return guarded(go)


def answer_command(approval_id: str, decision: str, *, path: str | None) -> int:
    """Answer a pending approval; the run waiting on it goes on at once."""
    from soong_agent.ports.approval_store import DECISIONS

    async def work(container: CliContainer, store: ApprovalStore) -> int:
        who = f"{getpass.getuser()}@{socket.gethostname()}"
        clock = container.adapters.clock()
        answered = await store.answer(approval_id, decision, by=who, now=clock.now())  # type: ignore[arg-type]
        said = f"{answered.decision} ({answered.tool}, run {answered.run_id})"
        sys.stdout.write(f"approval {answered.id}: {said}\n")
        return EXIT_OK

    def go() -> int:
        if decision not in DECISIONS:
            raise UsageError(
                f"expected one of {', '.join(DECISIONS)} as the answer, found {decision!r}"
            )
        return _with_store(path, work)

    return guarded(go)
