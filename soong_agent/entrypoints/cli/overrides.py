"""What `run` and `chat` change of the configuration for one invocation (CLI-4): the main
model (`--model`), the permission mode (`--permission-mode`), the turn limit (`--max-turns`),
and which session `-c/--continue` resumes."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:
    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.ports.storage import SessionStore

BYPASS_WARNING = (
    "soong-agent: WARNING: permission mode bypass: no tool call asks for approval, writes "
    "and commands included; only deny rules and the sandbox's limits still hold\n"
)
PERMISSION_MODES = ("default", "accept_edits", "plan", "bypass")
CONTINUE_SCAN = 1000
"""How many of the most recent sessions `--continue` looks through for this project's."""


@dataclass(frozen=True, slots=True)
class Overrides:
    """The command line's replacements for config values, None where it gives none."""

    model: str | None = None
    permission_mode: str | None = None
    max_turns: int | None = None

    def applied(self, loaded: LoadedConfig) -> LoadedConfig:
        """`loaded` with these values in place (validated as the file's would be); prints the
        bypass warning when the mode is bypass."""
        if self.model is not None:
            loaded = with_model(loaded, self.model)
        if self.permission_mode is not None:
            from soong_agent.entrypoints.run_options import with_permission_mode

            if self.permission_mode not in PERMISSION_MODES:
                raise UsageError(
                    "--permission-mode: expected default, accept_edits, plan or bypass, found "
                    f"{self.permission_mode!r}"
                )
            loaded = with_permission_mode(loaded, self.permission_mode)
        if self.max_turns is not None:
            loaded = with_max_turns(loaded, self.max_turns)
        if loaded.config.permissions.mode == "bypass":
            sys.stderr.write(BYPASS_WARNING)
            sys.stderr.flush()
        return loaded


def with_model(loaded: LoadedConfig, name: str) -> LoadedConfig:
    """`loaded` with `[model] name` replaced: the main profile, and every profile that is
    `[model]` itself (compaction and memory without a profile of their own), use `name`."""
    from soong_agent.domain.config.resolve import MAIN

    name = name.strip()
    if not name:
        raise UsageError("--model: give a model name (e.g. --model gpt-4o)")
    config = loaded.config
    model = config.model.model_copy(update={"name": name})
    profiles = tuple(
        dataclasses.replace(
            p,
            model=p.model.model_copy(update={"name": name}),
            source=f"{p.source} with --model {name}",
        )
        if p.name == MAIN
        else p
        for p in loaded.profiles
    )
    return dataclasses.replace(
        loaded, config=config.model_copy(update={"model": model}), profiles=profiles
    )


def with_max_turns(loaded: LoadedConfig, turns: int) -> LoadedConfig:
    """`loaded` with `runtime.max_turns` replaced (at least 1)."""
    if turns < 1:
        raise UsageError(f"--max-turns: expected a whole number of at least 1, found {turns}")
    runtime = loaded.config.runtime.model_copy(update={"max_turns": turns})
    config = loaded.config.model_copy(update={"runtime": runtime})
    return dataclasses.replace(loaded, config=config)


async def latest_session(store: SessionStore, project: str) -> str:
    """The most recently used session of `project` (the resolved folder, as sessions record
    it; not a sub-agent's, a fork's or a teammate's); UsageError saying so when it has none."""
    for session in await store.list_sessions(limit=CONTINUE_SCAN):
        if session.parent_session_id is None and session.project_dir == project:
            return session.id
    raise UsageError(
        f"--continue: no session of this project ({project}) yet; run without --continue to "
        "start one"
    )
