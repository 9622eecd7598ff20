"""Reads the skills of `${SOONG_AGENT_HOME}/skills` (never a project's).

Two layouts, both with YAML frontmatter (`name`, `description`; the rules are in
`soong_agent.domain.skills`):

- `skills/<name>.md`: a one-file skill;
- `skills/<name>/SKILL.md`: a folder skill; every other file below that folder is one of its
  resources, listed (absolute paths, sorted) when the skill loads and readable through
  `read_resource`. Hidden files and folders (a name starting with `.`) are not listed, nor links
  that lead out of the skill's folder, and folders reached through a link are not entered;
  past `MAX_RESOURCES` files the rest are left out with a warning.

When both `<name>.md` and `<name>/SKILL.md` exist the folder wins and the file is skipped with
a warning. Other entries of the skills folder (files not ending in `.md`, hidden ones) are not
skills and are passed over. A skill file that cannot be used (unreadable, over
`MAX_FILE_BYTES`, not UTF-8, no or bad frontmatter, a rule broken, no body) is skipped with a
warning `<path>: skipped: <reason>`; the others still load. The folder is read once, at the
first question; `reload()` reads it again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from soong_agent.domain.skills import SkillFileError, check_metadata, split_frontmatter
from soong_agent.ports.skills import Skill

MAX_FILE_BYTES = 1_000_000
"""A skill file larger than this is skipped."""
MAX_RESOURCES = 200
"""At most this many resource files of one skill are listed."""
MAX_RESOURCE_BYTES = 1_000_000
"""`read_resource` returns at most this many bytes of a file, and says so when it cuts."""
SKILL_FILE = "SKILL.md"


@dataclass(frozen=True, slots=True)
class _Candidate:
    name: str  # the name the file or folder gives
    path: Path  # the Markdown file
    folder: Path | None  # the skill folder, for the folder layout


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _yaml_reason(exc: Exception) -> str:
    """A one-line reason for a YAML error, with the line in the skill file."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        # the frontmatter starts on the file's second line
        where = f" (line {mark.line + 2}, column {mark.column + 1})"
        return f"frontmatter is not valid YAML: {problem}{where}"
    return "frontmatter is not valid YAML: " + " ".join(str(exc).split())


def _candidates(folder: Path, warnings: list[str]) -> list[_Candidate]:
    """The skill files of `folder`, one per name, in name order."""
    flat: dict[str, Path] = {}
    folders: dict[str, Path] = {}
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        warnings.append(f"{folder}: cannot read the skills folder: {exc.strerror or exc}")
        return []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        path = folder / entry.name
        try:
            is_dir = entry.is_dir()
            is_file = not is_dir and entry.is_file()
        except OSError as exc:
            warnings.append(f"{path}: skipped: {exc.strerror or exc}")
            continue
        if is_dir:
            if (path / SKILL_FILE).is_file():
                folders[entry.name] = path
            else:
                warnings.append(f"{path}: skipped: a skill folder needs a {SKILL_FILE} file")
        elif is_file and entry.name.endswith(".md"):
            flat[entry.name[: -len(".md")]] = path
    found: list[_Candidate] = []
    for name in sorted(flat.keys() | folders.keys()):
        if name in folders:
            if name in flat:
                warnings.append(
                    f"{flat[name]}: skipped: the folder skill {folders[name] / SKILL_FILE} "
                    "has the same name"
                )
            found.append(_Candidate(name, folders[name] / SKILL_FILE, folders[name]))
        else:
            found.append(_Candidate(name, flat[name], None))
    return found


def _resources(folder: Path, warnings: list[str]) -> tuple[str, ...]:
    """The files below a skill folder other than its SKILL.md (see the module docstring)."""
    root = os.path.realpath(folder)
    skill_file = str(folder / SKILL_FILE)
    found: list[str] = []
    more = False

    def unreadable(exc: OSError) -> None:
        warnings.append(f"{exc.filename}: resources not listed: {exc.strerror or exc}")

    for dirpath, dirnames, filenames in os.walk(folder, onerror=unreadable):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for filename in sorted(filenames):
            path = os.path.join(dirpath, filename)
            if filename.startswith(".") or path == skill_file:
                continue
            real = os.path.realpath(path)
            if not _within(real, root):
                warnings.append(
                    f"{path}: not listed as a resource: it leads to {real}, outside the "
                    "skill's folder"
                )
                continue
            if not os.path.isfile(real):
                continue
            if len(found) == MAX_RESOURCES:
                more = True
                break
            found.append(path)
        if more:
            break
    if more:
        warnings.append(
            f"{folder}: more than {MAX_RESOURCES} resource files; only {MAX_RESOURCES} are listed"
        )
    return tuple(sorted(found))


def _read_skill(candidate: _Candidate, warnings: list[str]) -> Skill:
    """The skill of one file; raises SkillFileError (why it is skipped)."""
    try:
        size = candidate.path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SkillFileError(f"the file has {size} bytes (at most {MAX_FILE_BYTES})")
        data = candidate.path.read_bytes()
    except OSError as exc:
        raise SkillFileError(f"cannot read it: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillFileError(f"not UTF-8 text (byte {exc.start})") from exc
    frontmatter, body = split_frontmatter(text)
    import yaml  # type: ignore[import-untyped,unused-ignore]  # only when a file is read

    try:
        metadata = yaml.safe_load(frontmatter)
    except yaml.YAMLError as exc:
        raise SkillFileError(_yaml_reason(exc)) from exc
    name, description = check_metadata(metadata, expected_name=candidate.name)
    if not body.strip():
        raise SkillFileError("no instructions after the frontmatter")
    resources = _resources(candidate.folder, warnings) if candidate.folder is not None else ()
    return Skill(
        name=name,
        description=description,
        body=body,
        source=str(candidate.path),
        resources=resources,
    )


def load_skills(folder: Path) -> tuple[list[Skill], list[str]]:
    """The usable skills of `folder` (sorted by name) and one warning per problem.

    A folder that does not exist holds no skills (and is no problem).
    """
    folder = folder.absolute()
    warnings: list[str] = []
    if not folder.exists():
        return [], warnings
    if not folder.is_dir():
        return [], [f"{folder}: not a folder, so no skills are loaded"]
    skills: list[Skill] = []
    for candidate in _candidates(folder, warnings):
        try:
            skills.append(_read_skill(candidate, warnings))
        except SkillFileError as exc:
            warnings.append(f"{candidate.path}: skipped: {exc}")
    return skills, warnings


class HomeSkillSource:
    """The `SkillSource` of `<home>/skills`: read at the first question, then kept."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self._folder = Path(home).absolute() / "skills"
        self._loaded: tuple[list[Skill], list[str]] | None = None

    def __repr__(self) -> str:
        return f"HomeSkillSource({str(self._folder.parent)!r})"

    @property
    def folder(self) -> Path:
        """The folder skills are read from."""
        return self._folder

    def _load(self) -> tuple[list[Skill], list[str]]:
        if self._loaded is None:
            self._loaded = load_skills(self._folder)
        return self._loaded

    def reload(self) -> None:
        """Read the folder again at the next question."""
        self._loaded = None

    def skills(self) -> list[Skill]:
        """Every usable skill, sorted by name."""
        return list(self._load()[0])

    def warnings(self) -> list[str]:
        """One line per skipped skill file or other problem, naming the file and why."""
        return list(self._load()[1])

    def read_resource(self, path: str) -> str:
        """The text of a listed resource file (at most `MAX_RESOURCE_BYTES`, the cut marked).

        Raises LookupError when no skill lists `path`; OSError when it cannot be read, or now
        leads out of its skill's folder.
        """
        owner = next((s for s in self._load()[0] if path in s.resources), None)
        if owner is None or owner.folder is None:
            raise LookupError(f"{path} is not a resource of any skill")
        real = os.path.realpath(path)
        if not _within(real, os.path.realpath(owner.folder)):
            raise PermissionError(f"{path} now leads to {real}, outside the skill's folder")
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(MAX_RESOURCE_BYTES)
        if b"\0" in data[:8192]:
            return f"[{path} is a binary file of {size} bytes; not shown]"
        text = data.decode("utf-8", errors="replace")
        if size > len(data):
            text += f"\n[cut: the file has {size} bytes; the first {len(data)} are shown]"
        return text
