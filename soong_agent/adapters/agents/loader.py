"""Reads the agent definitions of `${SOONG_AGENT_HOME}/agents` (never a project's) (AGT-1).

Each `agents/<id>.md` is one definition (the rules are in `soong_agent.domain.agents`); other
entries (hidden ones, files not ending in `.md`) are passed over, and so are sub-folders. A file
that cannot be used (unreadable, over `MAX_FILE_BYTES`, not UTF-8, no or bad frontmatter, a
rule broken, its id not its file's name) is left out with one warning
`<path>: skipped: <reason>`; the others still load. The definitions are the built-ins and the
files: a file that takes a preset's id (`minimal.md`, `standard.md`, `full.md`) is one of the
skipped ones, its warning saying to choose another id. The folder is read once, at the first
question; `reload()` reads it again.
"""

from __future__ import annotations

import os
from pathlib import Path

from soong_agent.domain.agents import (
    BUILTINS,
    AgentFileError,
    definition_from_metadata,
    merge_definitions,
)
from soong_agent.domain.skills import SkillFileError, split_frontmatter
from soong_agent.ports.agents import AgentDefinition

MAX_FILE_BYTES = 256_000
"""An agent file larger than this is skipped."""


def _yaml_reason(exc: Exception) -> str:
    """A one-line reason for a YAML error, with the line in the agent file."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        # the frontmatter starts on the file's second line
        return (
            f"frontmatter is not valid YAML: {problem} "
            f"(line {mark.line + 2}, column {mark.column + 1})"
        )
    return "frontmatter is not valid YAML: " + " ".join(str(exc).split())


def _read(path: Path) -> AgentDefinition:
    """The definition of one file; raises AgentFileError (why it is skipped)."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise AgentFileError(f"the file has {size} bytes (at most {MAX_FILE_BYTES})")
        data = path.read_bytes()
    except OSError as exc:
        raise AgentFileError(f"cannot read it: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AgentFileError(f"not UTF-8 text (byte {exc.start})") from exc
    try:
        frontmatter, body = split_frontmatter(text)
    except SkillFileError as exc:
        raise AgentFileError(str(exc)) from exc
    import yaml  # type: ignore[import-untyped,unused-ignore]  # only when a file is read

    try:
        metadata = yaml.safe_load(frontmatter)
    except yaml.YAMLError as exc:
        raise AgentFileError(_yaml_reason(exc)) from exc
    return definition_from_metadata(
        metadata, body, file_id=path.name[: -len(".md")], source=str(path), text=text
    )


def load_agent_files(folder: Path) -> tuple[list[AgentDefinition], list[str]]:
    """The usable definitions of the files of `folder` (sorted by id; no built-ins) and one
    warning per problem. A folder that does not exist holds none (and is no problem)."""
    folder = folder.absolute()
    if not folder.exists():
        return [], []
    if not folder.is_dir():
        return [], [f"{folder}: not a folder, so no agent definitions are read from it"]
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        return [], [f"{folder}: cannot read the agents folder: {exc.strerror or exc}"]
    found: list[AgentDefinition] = []
    warnings: list[str] = []
    for name in names:
        path = folder / name
        if name.startswith(".") or not name.endswith(".md") or path.is_dir():
            continue
        try:
            found.append(_read(path))
        except AgentFileError as exc:
            warnings.append(f"{path}: skipped: {exc}")
    return found, warnings


class HomeAgentSource:
    """The `AgentSource` of the built-ins and `<home>/agents`: read at the first question,
    then kept."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self._folder = Path(home).absolute() / "agents"
        self._loaded: tuple[list[AgentDefinition], list[str]] | None = None

    def __repr__(self) -> str:
        return f"HomeAgentSource({str(self._folder.parent)!r})"

    @property
    def folder(self) -> Path:
        """The folder agent files are read from."""
        return self._folder

    def _load(self) -> tuple[list[AgentDefinition], list[str]]:
        if self._loaded is None:
            files, warnings = load_agent_files(self._folder)
            self._loaded = (merge_definitions(BUILTINS, files), warnings)
        return self._loaded

    def reload(self) -> None:
        """Read the folder again at the next question."""
        self._loaded = None

    def definitions(self) -> list[AgentDefinition]:
        """Every usable definition (built-ins and files), sorted by id."""
        return list(self._load()[0])

    def warnings(self) -> list[str]:
        """One line per skipped agent file or other problem, naming the file and why."""
        return list(self._load()[1])

    def get(self, agent_id: str) -> AgentDefinition | None:
        """The definition with this id, or None."""
        return next((d for d in self._load()[0] if d.id == agent_id), None)
