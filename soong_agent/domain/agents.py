"""Agent definitions (AGT-1): the rules of an agent file, the built-ins and the tool ceiling.

A user definition is `${SOONG_AGENT_HOME}/agents/<id>.md` (never a project's) with YAML
frontmatter; the body after it is the agent's prompt section::

    ---
    id: reviewer
    description: Reviews a diff and reports problems; never edits.
    tools: [read_file, list_dir, glob, grep, "mcp__git__*"]
    model_profile: review        # a [model_overrides] name; omitted: the main model
    max_turns: 20                # omitted: the config's
    permission_mode: default     # one of permissions.mode's values; omitted: the config's
    skills: [code-review]        # the home's skills it is offered; omitted or []: all of them
    ---
    You review code. ...

The rules (`definition_from_metadata`): `id`, `description` and `tools` are required; `id`
matches `[a-z0-9][a-z0-9-]*` (at most 64) and equals the file's name without `.md`;
`description` is one line of text (at most 1024 characters); `tools` is a list of tool names or
fnmatch patterns (`*` is every tool), possibly empty; `max_turns` is a positive integer;
`permission_mode` one of `default`, `accept_edits`, `plan`, `bypass`; `skills` a list of skill
names; any other key is a mistake (a typo such as `tool:` must not quietly widen an agent). The
body may be empty (no prompt section). A file that breaks a rule is left out with one warning
naming it and the reason (the loader, `soong_agent.adapters.agents`).

Built-ins (`BUILTINS`): `default_sub_agent`, `default_fork_agent`, `default_worker_agent` (their
ids have `_`, which a file's id cannot, so no file replaces them; point
`agents.default_sub_agent_definition` at a user definition instead) and the presets
`minimal`, `standard` and `full` (chosen per session). No file replaces a preset either: a
file whose id is a preset's is refused (left out with a warning saying to choose another id),
so `--agent standard` always means the shipped `standard`, and a user's variant is visibly
their own (`--agent my-standard`).

`allowed_tools` applies the ceiling to the tools a run actually has (`agent_ceiling`, imported
from here too).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import get_args

from soong_agent.domain.agent_ceiling import allowed_tools, is_pattern, stricter_mode, tool_listed
from soong_agent.domain.permissions.decision import PermissionMode
from soong_agent.ports.agents import BUILTIN_SOURCE, AgentDefinition, AgentSource

__all__ = [
    "BUILTINS",
    "BUILTIN_IDS",
    "BUILTIN_SOURCE",
    "DEFAULT_FORK_AGENT",
    "DEFAULT_SUB_AGENT",
    "DEFAULT_WORKER_AGENT",
    "FULL",
    "KEYS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_ID_CHARS",
    "MINIMAL",
    "MINIMAL_TOOLS",
    "PERMISSION_MODES",
    "PRESET_IDS",
    "STANDARD",
    "STANDARD_TOOLS",
    "AgentDefinition",
    "AgentFileError",
    "AgentSource",
    "allowed_tools",
    "check_definition",
    "content_hash",
    "definition_from_metadata",
    "is_pattern",
    "merge_definitions",
    "render_file",
    "stricter_mode",
    "tool_listed",
    "unknown_agent_message",
    "worker_id",
]

MAX_ID_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
PERMISSION_MODES: tuple[str, ...] = get_args(PermissionMode)
KEYS = ("id", "description", "tools", "model_profile", "max_turns", "permission_mode", "skills")
"""The frontmatter keys of an agent file, in the order `render_file` writes them."""

_ID = re.compile(r"[a-z0-9][a-z0-9-]*")
_BUILTIN_ID = re.compile(r"[a-z0-9][a-z0-9_-]*")
_TOOL = re.compile(r"[A-Za-z0-9_.*?\[\]!-]+")
_SKILL = re.compile(r"[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?")

PRESET_IDS: tuple[str, ...] = ("minimal", "standard", "full")
"""The shipped presets (AGT-3); a user file cannot take their ids."""
MINIMAL_TOOLS: tuple[str, ...] = ("read_file", "list_dir", "glob", "grep")
STANDARD_TOOLS: tuple[str, ...] = (
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "glob",
    "grep",
    "run_command",
    "web_fetch",
    "todo_write",
    "read_artifact",
    "compact",
)


class AgentFileError(ValueError):
    """Why an agent definition cannot be used (the message is the reason shown to the user)."""


def content_hash(text: str) -> str:
    """The sha256 (hex) of a definition file's text (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _string_list(metadata: dict[object, object], key: str) -> tuple[str, ...]:
    value = metadata.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AgentFileError(f"frontmatter: {key!r} must be a list of strings, found {value!r}")
    return tuple(value)


def definition_from_metadata(
    metadata: object, body: str, *, file_id: str, source: str, text: str
) -> AgentDefinition:
    """The definition of one agent file: its parsed frontmatter, body, name and whole text.

    `file_id` is the file's name without `.md`; `source` its absolute path; `text` the whole
    file (hashed into `content_hash`). Raises AgentFileError with the reason.
    """
    if not isinstance(metadata, dict):
        found = "nothing" if metadata is None else type(metadata).__name__
        raise AgentFileError(
            f"frontmatter: expected keys 'id', 'description' and 'tools', found {found}"
        )
    unknown = sorted(str(k) for k in metadata if k not in KEYS)
    if unknown:
        raise AgentFileError(
            f"frontmatter: unknown key {', '.join(repr(k) for k in unknown)} "
            f"(known: {', '.join(KEYS)})"
        )
    for key in ("id", "description", "tools"):
        if metadata.get(key) is None:
            raise AgentFileError(f"frontmatter: {key!r} is missing")
    agent_id = metadata["id"]
    description = metadata["description"]
    if not isinstance(agent_id, str):
        raise AgentFileError(f"frontmatter: 'id' must be a string, found {agent_id!r}")
    if not isinstance(description, str):
        raise AgentFileError(f"frontmatter: 'description' must be a string, found {description!r}")
    model_profile = metadata.get("model_profile")
    if model_profile is not None and not isinstance(model_profile, str):
        raise AgentFileError(
            f"frontmatter: 'model_profile' must be a profile name, found {model_profile!r}"
        )
    max_turns = metadata.get("max_turns")
    if max_turns is not None and (not isinstance(max_turns, int) or isinstance(max_turns, bool)):
        raise AgentFileError(f"frontmatter: 'max_turns' must be an integer, found {max_turns!r}")
    permission_mode = metadata.get("permission_mode")
    if permission_mode is not None and not isinstance(permission_mode, str):
        raise AgentFileError(
            f"frontmatter: 'permission_mode' must be a string, found {permission_mode!r}"
        )
    definition = AgentDefinition(
        id=agent_id,
        description=_one_line(description),
        tools=_string_list(metadata, "tools"),
        prompt=body.strip("\n"),
        source=source,
        content_hash=content_hash(text),
        model_profile=model_profile,
        max_turns=max_turns,
        permission_mode=permission_mode,
        skills=_string_list(metadata, "skills"),
    )
    check_definition(definition)
    if definition.id != file_id:
        raise AgentFileError(
            f"frontmatter: id {definition.id!r} differs from the file's name {file_id!r} "
            "(they must be the same)"
        )
    return definition


def check_definition(definition: AgentDefinition) -> None:
    """Raise AgentFileError when `definition` breaks a rule of the module docstring.

    A built-in (`source` is `BUILTIN_SOURCE`) may also have `_` in its id.
    """
    pattern = _BUILTIN_ID if definition.builtin else _ID
    if not pattern.fullmatch(definition.id) or len(definition.id) > MAX_ID_CHARS:
        raise AgentFileError(
            f"frontmatter: id {definition.id!r} is not an agent id (lowercase letters, digits "
            f"and '-', starting with a letter or digit, at most {MAX_ID_CHARS})"
        )
    if not definition.builtin and definition.id in PRESET_IDS:
        raise AgentFileError(
            f"frontmatter: id {definition.id!r} is a shipped preset, which a file cannot "
            f"replace; give yours another id (e.g. 'my-{definition.id}' in "
            f"my-{definition.id}.md) and choose it with --agent my-{definition.id}"
        )
    if not definition.description:
        raise AgentFileError("frontmatter: 'description' is empty")
    if _one_line(definition.description) != definition.description:
        raise AgentFileError("frontmatter: 'description' must be one line")
    if len(definition.description) > MAX_DESCRIPTION_CHARS:
        raise AgentFileError(
            f"frontmatter: 'description' has {len(definition.description)} characters "
            f"(at most {MAX_DESCRIPTION_CHARS})"
        )
    for tool in definition.tools:
        if not _TOOL.fullmatch(tool):
            raise AgentFileError(
                f"frontmatter: tools: {tool!r} is not a tool name or pattern (letters, digits, "
                "'_', '-', '.', and the pattern characters '*', '?', '[', ']', '!')"
            )
    if definition.model_profile is not None and not definition.model_profile.strip():
        raise AgentFileError("frontmatter: 'model_profile' is empty")
    if definition.max_turns is not None and definition.max_turns < 1:
        raise AgentFileError(
            f"frontmatter: 'max_turns' must be at least 1, found {definition.max_turns}"
        )
    if definition.permission_mode is not None and definition.permission_mode not in (
        PERMISSION_MODES
    ):
        raise AgentFileError(
            f"frontmatter: permission_mode {definition.permission_mode!r} is not one of "
            f"{', '.join(PERMISSION_MODES)}"
        )
    for skill in definition.skills:
        if not _SKILL.fullmatch(skill):
            raise AgentFileError(f"frontmatter: skills: {skill!r} is not a skill name")


def _yaml_scalar(value: str) -> str:
    """`value` as a YAML double-quoted string (JSON's escapes are valid YAML)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def render_file(definition: AgentDefinition) -> str:
    """The text of an agent file defining `definition` (frontmatter, then the prompt).

    A built-in's `content_hash` is the hash of this text; `agents show` prints it.
    """
    lines = ["---", f"id: {definition.id}", f"description: {_yaml_scalar(definition.description)}"]
    lines.append("tools: [" + ", ".join(_yaml_scalar(t) for t in definition.tools) + "]")
    if definition.model_profile is not None:
        lines.append(f"model_profile: {_yaml_scalar(definition.model_profile)}")
    if definition.max_turns is not None:
        lines.append(f"max_turns: {definition.max_turns}")
    if definition.permission_mode is not None:
        lines.append(f"permission_mode: {definition.permission_mode}")
    if definition.skills:
        lines.append("skills: [" + ", ".join(definition.skills) + "]")
    lines.append("---")
    return "\n".join(lines) + "\n" + (definition.prompt + "\n" if definition.prompt else "")


def _builtin(
    agent_id: str, description: str, tools: tuple[str, ...], prompt: str
) -> AgentDefinition:
    draft = AgentDefinition(
        id=agent_id,
        description=description,
        tools=tools,
        prompt=prompt,
        source=BUILTIN_SOURCE,
        content_hash="",
    )
    check_definition(draft)
    return AgentDefinition(
        id=agent_id,
        description=description,
        tools=tools,
        prompt=prompt,
        source=BUILTIN_SOURCE,
        content_hash=content_hash(render_file(draft)),
    )


DEFAULT_SUB_AGENT = _builtin(
    "default_sub_agent",
    "A sub-agent with a fresh context for one self-contained task; returns only its result.",
    STANDARD_TOOLS,
    "You are a sub-agent working on one task handed to you by another agent, which sees only "
    "your final answer. Work on that task alone; when done, answer with a complete, "
    "self-contained report of what you found or changed.",
)
DEFAULT_FORK_AGENT = _builtin(
    "default_fork_agent",
    "A fork: starts from a copy of its parent's context to work on one sub-task.",
    ("*",),
    "",  # a fork keeps its parent's prompt, so the provider's prompt cache still hits
)
DEFAULT_WORKER_AGENT = _builtin(
    "default_worker_agent",
    "An orchestrator worker: claims steps of the task graph and completes them.",
    (*STANDARD_TOOLS, "task_*"),
    "You are a worker of an orchestrator. Claim one ready step of the task graph at a time, "
    "do it, then complete it (or fail it, saying why) before you claim the next; keep your "
    "lease alive with task_heartbeat during long steps.",
)
MINIMAL = _builtin(
    "minimal",
    "Reads and searches the project's files; changes nothing and runs nothing.",
    MINIMAL_TOOLS,
    "You can only read: look at files, list folders and search. Answer from what you read.",
)
STANDARD = _builtin(
    "standard",
    "The core tool set: files, commands, web pages, the todo list, artifacts, compaction.",
    STANDARD_TOOLS,
    "",
)
FULL = _builtin(
    "full",
    "Every tool the run has, MCP, memory, skills, plans and tasks included.",
    ("*",),
    "",
)

BUILTINS: tuple[AgentDefinition, ...] = (
    DEFAULT_FORK_AGENT,
    DEFAULT_SUB_AGENT,
    DEFAULT_WORKER_AGENT,
    FULL,
    MINIMAL,
    STANDARD,
)
BUILTIN_IDS: frozenset[str] = frozenset(d.id for d in BUILTINS)


def merge_definitions(
    builtins: Iterable[AgentDefinition], files: Iterable[AgentDefinition]
) -> list[AgentDefinition]:
    """The built-ins and the file definitions, sorted by id (`check_definition` keeps a file
    from taking a built-in's id)."""
    by_id = {d.id: d for d in builtins}
    by_id.update({d.id: d for d in files})
    return [by_id[k] for k in sorted(by_id)]


def worker_id(pool_id: str, position: int, agent_id: str, explicit: str | None) -> str:
    """A worker's stable id (AGT-4): its explicit `worker_id`, else derived from its pool,
    its position in the pool (from 1) and its definition, so a restart keeps it."""
    return explicit if explicit else f"{pool_id}-{position}-{agent_id}"


def unknown_agent_message(agent_id: str, known: Sequence[str]) -> str:
    """The error for an id no definition has, listing the known ids."""
    return f"unknown agent {agent_id!r}; known agents: {', '.join(sorted(known))}"
