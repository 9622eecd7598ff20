"""Reads the instruction chain and environment facts from disk (PROMPT-1, PROMPT-2)."""

from __future__ import annotations

import datetime as dt
import platform
from pathlib import Path

from soong_agent.ports.prompt import EnvironmentInfo, InstructionDoc

_MAX_DOC_BYTES = 64 * 1024
_NAMES = ("CLAUDE.md", "AGENTS.md")


def _read(path: Path, label: str) -> InstructionDoc | None:
    try:
        data = path.read_bytes()[:_MAX_DOC_BYTES]
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return None
    text = data.decode("utf-8", errors="replace").strip()
    return InstructionDoc(source=label, text=text) if text else None


def _git_state(project: Path) -> str | None:
    for folder in (project, *project.parents):
        head = folder / ".git" / "HEAD"
        if head.is_file():
            ref = head.read_text(encoding="utf-8", errors="replace").strip()
            branch = ref.removeprefix("ref: refs/heads/") if ref.startswith("ref:") else ref[:12]
            return f"git repository at {folder}, on {branch}"
    return None


class FileContextSource:
    """Instruction files of the user home and the project, and facts about the machine."""

    def __init__(self, *, home: Path, project: Path, today: dt.date | None = None) -> None:
        self._home = home
        self._project = project
        self._today = today

    def instructions(self) -> list[InstructionDoc]:
        docs: list[InstructionDoc] = []
        for name in _NAMES:
            doc = _read(self._home / name, f"${{SOONG_AGENT_HOME}}/{name}")
            if doc:
                docs.append(doc)
        rules = self._home / "rules"
        if rules.is_dir():
            for path in sorted(rules.rglob("*.md")):
                rel = path.relative_to(rules).as_posix()
                doc = _read(path, f"${{SOONG_AGENT_HOME}}/rules/{rel}")
                if doc:
                    docs.append(doc)
        for name in _NAMES:
            doc = _read(self._project / name, f"<project>/{name}")
            if doc:
                docs.append(doc)
        return docs

    def environment(self) -> EnvironmentInfo:
        today = self._today or dt.date.today()
        return EnvironmentInfo(
            cwd=str(self._project),
            platform=f"{platform.system()} {platform.release()} ({platform.machine()})",
            date=today.isoformat(),
            git=_git_state(self._project),
        )
