"""What a resumed session brings to its next root run: the path the run continues (the active
one, or a branch from one of the session's user messages), that it runs in its own project,
and whether the agent definition
the session follows was edited since its last run (AGT-3)."""

from __future__ import annotations

from soong_agent.application.runs.spec import RunSpec
from soong_agent.ports.errors import SessionNotFound, UsageError
from soong_agent.ports.events import RunStarted
from soong_agent.ports.filesystem import FileSystem
from soong_agent.ports.messages import Message
from soong_agent.ports.storage import SessionInfo, SessionStore

__all__ = ["definition_changed", "same_project", "session_path"]


async def session_path(
    store: SessionStore, session_id: str, from_message: str | None
) -> tuple[SessionInfo, list[Message]]:
    """The session and the path a run of it continues: its active path, or (`from_message`,
    a user message of it) the path up to that message, which the run's message replaces.
    SessionNotFound, or UsageError for a message that is not one the user wrote."""
    session = await store.get_session(session_id)
    if session is None:
        raise SessionNotFound(session_id)
    if from_message is None:
        return session, await store.active_path(session_id)
    path = await store.path_to(session_id, from_message)
    if not path:
        raise UsageError(f"session {session_id} has no message {from_message!r}")
    target = path[-1]
    if target.role != "user" or target.kind != "normal":
        what = target.role if target.kind == "normal" else f"{target.kind} ({target.role})"
        article = "an" if what[0] in "aeiou" else "a"
        raise UsageError(
            f"message {from_message} is {article} {what} message, not one the user wrote; a "
            'branch starts from a user message (context.allow_branch_from = "user_message")'
        )
    return session, path[:-1]


async def definition_changed(store: SessionStore, session_id: str, spec: RunSpec) -> str | None:
    """Why the session's agent definition differs from the one its last run followed (its
    text was edited since), or None."""
    runs = await store.list_runs(session_id)
    if not runs:
        return None
    for event in await store.run_events(runs[-1].id):
        if isinstance(event, RunStarted):
            before = event.agent_hash
            if before and before != spec.settings.agent_hash:
                return (
                    f"the agent definition {spec.agent!r} changed since this session's "
                    f"last run (sha256 {before[:12]}… -> "
                    f"{(spec.settings.agent_hash or '')[:12]}…); the session goes on with "
                    "the new one"
                )
            return None
    return None


def same_project(session: SessionInfo, root: str, fs: FileSystem) -> None:
    """A session resumes only in its own project: its context, its files and its commands'
    folder all belong there (UsageError naming both folders otherwise)."""
    if session.project_dir == root:
        return
    if fs.path_facts(session.project_dir).resolved == fs.path_facts(root).resolved:
        return
    raise UsageError(
        f"session {session.id} belongs to the project {session.project_dir}, not {root}: "
        "resume it there (the CLI: run it from that folder or with --path; the SDK: "
        "project_dir)"
    )
