"""`soong-agent team show SESSION`: the team of an orchestrator session (issue 20).

One line per teammate: name, role (agent definition), status label, current step, unread mail,
worktree, runs and cost (from the teammate's own session); then the lead's unread mail and the
team's total cost. Read from the store (the roster mark), the mailbox and the sessions (files
or PostgreSQL), so it works while the team runs in another process, and after.
"""

from __future__ import annotations

import asyncio
import sys

from soong_agent.entrypoints.cli.common import EXIT_OK, guarded
from soong_agent.ports.errors import SessionNotFound


def team_show(session_id: str, path: str | None) -> int:
    async def go() -> int:
        from soong_agent.application.teams.service import ROSTER_MARK, roster_from_mark
        from soong_agent.entrypoints.cli.session_tree import Spend, session_spend
        from soong_agent.entrypoints.containers import CliContainer
        from soong_agent.entrypoints.sdk import load
        from soong_agent.ports.mailbox import LEAD

        loaded = load(path, None)
        container = CliContainer(loaded=loaded)
        store = container.adapters.session_store()
        redactor = container.adapters.redactor()
        try:
            session = await store.get_session(session_id)
            if session is None:
                raise SessionNotFound(session_id)
            members = roster_from_mark(await store.get_mark(session_id, ROSTER_MARK))
            mailbox = container.adapters.mailbox()
            out = sys.stdout
            if not members:
                out.write(f"session {session_id} has no team\n")
                return EXIT_OK
            out.write(f"team of session {session_id} ({len(members)} teammates)\n")
            total = Spend()
            for m in members:
                runs = await store.list_runs(m.session_id)
                spend = session_spend({r.id: await store.run_events(r.id) for r in runs})
                total = total.merged(spend)
                unread = len(mailbox.unread(session_id, m.name))
                parts = [f"{m.name} ({m.role}): {m.status}"]
                if m.step:
                    parts.append(f"step {m.step}")
                if unread:
                    parts.append(f"{unread} unread mail")
                parts.append(f"{m.runs} run{'s' if m.runs != 1 else ''}")
                parts.append(spend.cost_text())
                parts.append(f"session {m.session_id}")
                if m.worktree:
                    parts.append(f"worktree {m.worktree}")
                out.write("  " + redactor.redact(", ".join(parts)) + "\n")
            lead_unread = len(mailbox.unread(session_id, LEAD))
            if lead_unread:
                out.write(f"lead: {lead_unread} unread mail\n")
            out.write(f"team cost: {total.cost_text()}\n")
            return EXIT_OK
        finally:
            from soong_agent.entrypoints.closing import close_all

            await close_all(container.adapters.closables())

    return guarded(lambda: asyncio.run(go()))
