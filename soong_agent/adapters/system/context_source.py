"""Reads the instruction chain and environment facts from disk (PROMPT-1, PROMPT-2)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import time
from pathlib import Path

from soong_agent.ports.prompt import EnvironmentInfo, InstructionDoc

_MAX_DOC_BYTES = 64 * 1024
_NAMES = ("CLAUDE.md", "AGENTS.md")
_SETTLED_NS = 2_000_000_000
"""A file changed less than this long ago is read again every time: two writes within one
tick of the file system's clock, of the same size, would look unchanged to `os.stat`."""


def _read(path: str, label: str, folder: str | None = None) -> InstructionDoc | None:
    try:
        with open(path, "rb") as file:
            data = file.read(_MAX_DOC_BYTES)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return None
    text = data.decode("utf-8", errors="replace").strip()
    return InstructionDoc(source=label, text=text, folder=folder) if text else None


def _inside(path: str, root: str) -> bool:
    """Whether the real path of `path` is `root` (a real path) or below it."""
    real = os.path.realpath(path)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _project_folder(folder: str) -> str | None:
    """`folder` as a clean relative posix path (``pkg/sub``), or None when it is the project
    itself or names something outside it (absolute, ``..``)."""
    if not folder or folder.startswith(("/", "\\")) or "\x00" in folder:
        return None
    parts = [p for p in folder.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def _markdown_below(folder: str) -> list[str]:
    """The `*.md` files below `folder` (recursively), as sorted paths relative to it."""
    found: list[str] = []
    stack = [""]
    while stack:
        relative = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(folder, relative)))
        except OSError:
            continue
        for entry in entries:
            rel = f"{relative}/{entry.name}" if relative else entry.name
            if entry.is_dir():
                stack.append(rel)
            elif entry.name.endswith(".md") and entry.is_file():
                found.append(rel)
    return sorted(found)


def _is_repo(folder: Path) -> bool:
    return os.path.isfile(os.path.join(folder, ".git", "HEAD"))


def _git_root(project: Path) -> Path | None:
    for folder in (project, *project.parents):
        if _is_repo(folder):
            return folder
    return None


def _branch(root: Path) -> str | None:
    try:
        ref = (root / ".git" / "HEAD").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return ref.removeprefix("ref: refs/heads/") if ref.startswith("ref:") else ref[:12]


class FileContextSource:
    """Instruction files of the user home and the project, and facts about the machine."""

    def __init__(self, *, home: Path, project: Path, today: dt.date | None = None) -> None:
        self._home = home
        self._project = project
        self._today = today
        self._platform: str | None = None
        self._git: Path | None = None  # the repository root, looked for once (its branch is
        self._searched = False  # read every time: it changes between runs)
        home_dir, project_dir = str(home), str(project)
        self._home_files = [
            (os.path.join(home_dir, n), f"${{SOONG_AGENT_HOME}}/{n}") for n in _NAMES
        ]
        self._rules = os.path.join(home_dir, "rules")
        self._project_files = [(os.path.join(project_dir, n), f"<project>/{n}") for n in _NAMES]
        self._repo_head = os.path.join(project_dir, ".git", "HEAD")
        self._docs: dict[str, tuple[tuple[int, int, int, int], str, InstructionDoc | None]] = {}
        """The files read, by path: their `os.stat` when read, their label, what they held."""

    def instructions(self) -> list[InstructionDoc]:
        """Looked at afresh for every run (the user may edit them between runs); a file is
        read again only when `os.stat` says it changed."""
        docs: list[InstructionDoc] = []
        for path, label in self._home_files:
            doc = self._doc(path, label)
            if doc:
                docs.append(doc)
        rules = self._rules
        if os.path.isdir(rules):
            for rel in _markdown_below(rules):
                doc = self._doc(os.path.join(rules, rel), f"${{SOONG_AGENT_HOME}}/rules/{rel}")
                if doc:
                    docs.append(doc)
        for path, label in self._project_files:
            doc = self._doc(path, label)
            if doc:
                docs.append(doc)
        return docs

    def _doc(self, path: str, label: str, folder: str | None = None) -> InstructionDoc | None:
        """`_read`, or what it gave last time when the file's stat (inode, size, modification
        and change times) is the same and the file did not change in the last moments."""
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            self._docs.pop(path, None)
            return None
        except OSError:
            self._docs.pop(path, None)
            return _read(path, label, folder)
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        hit = self._docs.get(path)
        if hit is not None and hit[0] == key and hit[1] == label:
            doc = hit[2]
            if doc is None or doc.folder == folder:
                return doc
        doc = _read(path, label, folder)
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) >= _SETTLED_NS:
            self._docs[path] = (key, label, doc)
        else:
            self._docs.pop(path, None)
        return doc

    def folder_instructions(self, folder: str) -> list[InstructionDoc]:
        """The `CLAUDE.md` and `AGENTS.md` of a folder inside the project (PROMPT-2); none
        through a symlink that leads out of the project."""
        clean = _project_folder(folder)
        if clean is None:
            return []
        root = os.path.realpath(self._project)
        where = os.path.join(root, *clean.split("/"))
        if not os.path.isdir(where) or not _inside(where, root):
            return []
        docs: list[InstructionDoc] = []
        for name in _NAMES:
            path = os.path.join(where, name)
            if not _inside(path, root):  # the file itself a symlink out of the project
                continue
            doc = self._doc(path, f"<project>/{clean}/{name}", clean)
            if doc:
                docs.append(doc)
        return docs

    def environment(self) -> EnvironmentInfo:
        today = self._today or dt.date.today()
        if self._platform is None:
            self._platform = f"{platform.system()} {platform.release()} ({platform.machine()})"
        if not self._searched or (self._git is None and os.path.isfile(self._repo_head)):
            self._git, self._searched = _git_root(self._project), True
        branch = _branch(self._git) if self._git is not None else None
        if branch is None and self._git is not None:  # the repository went away
            self._git = _git_root(self._project)
            branch = _branch(self._git) if self._git is not None else None
        git = f"git repository at {self._git}, on {branch}" if branch is not None else None
        return EnvironmentInfo(
            cwd=str(self._project), platform=self._platform, date=today.isoformat(), git=git
        )
