"""Reads the instruction chain and environment facts from disk (PROMPT-1, PROMPT-2).

The home's files are the user's own and are read wherever they lead. The project's files
(``<project>/CLAUDE.md``, ``AGENTS.md``, and those of its folders) come with the repository, so
each is read only when its real path lies inside the project and neither form of it (as named,
as resolved) is a sensitive path (`tools.sensitive_paths`, matched by the sandbox's own
`SensitivePaths`): a ``CLAUDE.md`` linked to ``~/.ssh/id_rsa`` or an ``AGENTS.md`` linked to
``.env`` is left out, and `skipped` says which and why. The file is then opened one component
at a time from the project without following a link, so a link swapped in after the check
cannot redirect the read either.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import platform
import re
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from soong_agent.adapters.durable_files import read_all
from soong_agent.domain.config.resolve import expand_placeholders
from soong_agent.domain.config.schema import DEFAULT_SENSITIVE_PATHS
from soong_agent.domain.permissions.sensitive import SensitivePaths
from soong_agent.ports.prompt import EnvironmentInfo, InstructionDoc, SkippedInstruction

_MAX_DOC_BYTES = 64 * 1024
_NAMES = ("CLAUDE.md", "AGENTS.md")
_SETTLED_NS = 2_000_000_000
"""A file changed less than this long ago is read again every time: two writes within one
tick of the file system's clock, of the same size, would look unchanged to `os.stat`."""
_FOLD_CASE = sys.platform in ("darwin", "win32")  # as the sandbox matches sensitive paths
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_HEAD = re.compile(r"ref: (refs/\S{1,250})|([0-9a-f]{40}|[0-9a-f]{64})")
"""What ``.git/HEAD`` holds: a symbolic ref, or a commit (a detached HEAD)."""


def _read(path: str, label: str, folder: str | None = None) -> InstructionDoc | None:
    try:
        with open(path, "rb") as file:
            data = file.read(_MAX_DOC_BYTES)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return None
    text = data.decode("utf-8", errors="replace").strip()
    return InstructionDoc(source=label, text=text, folder=folder) if text else None


def _inside(real: str, root: str) -> bool:
    """Whether the real path `real` is `root` (a real path) or below it."""
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _read_below(root: str, real: str, label: str, folder: str | None) -> InstructionDoc | None:
    """`_read` of the file at the real path `real` inside `root`, opened one component at a
    time from `root` without following a link (ELOOP: one was swapped in since the check)."""
    parts = os.path.relpath(real, root).split(os.sep)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        file = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        if not stat.S_ISREG(os.fstat(file).st_mode):
            return None
        data = read_all(file, _MAX_DOC_BYTES)
    finally:
        os.close(file)
    text = data.decode("utf-8", errors="replace").strip()
    return InstructionDoc(source=label, text=text, folder=folder) if text else None


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
    """The branch ``.git/HEAD`` names (or the first 12 characters of its commit); None when it
    names neither. Read without following a link: a ``.git/HEAD`` made a link to a secret shows
    nothing of it in the prompt."""
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            git = os.open(".git", _DIR_FLAGS, dir_fd=top)
        finally:
            os.close(top)
        try:
            head = os.open("HEAD", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=git)
        finally:
            os.close(git)
        try:
            data = read_all(head, 1024)
        finally:
            os.close(head)
    except OSError:
        return None
    match = _HEAD.fullmatch(data.decode("utf-8", errors="replace").strip())
    if match is None:
        return None
    ref, commit = match.groups()
    return ref.removeprefix("refs/heads/") if ref else commit[:12]


class FileContextSource:
    """Instruction files of the user home and the project, and facts about the machine.

    `sensitive`: the `tools.sensitive_paths` entries (placeholders expanded) no project file
    may lead to; None: the default entries, for this home and project.
    """

    def __init__(
        self,
        *,
        home: Path,
        project: Path,
        today: dt.date | None = None,
        sensitive: Sequence[str] | None = None,
    ) -> None:
        self._home = home
        self._project = project
        self._today = today
        self._platform: str | None = None
        self._git: Path | None = None  # the repository root, looked for once (its branch is
        self._searched = False  # read every time: it changes between runs)
        home_dir, project_dir = str(home), str(project)
        self._root = os.path.realpath(project_dir)
        if sensitive is None:
            sensitive = [
                expand_placeholders(e, home=home_dir, project=self._root)
                for e in DEFAULT_SENSITIVE_PATHS
            ]
        self._sensitive = SensitivePaths(
            sensitive,
            project=self._root,
            home=os.path.expanduser("~"),
            resolve=os.path.realpath,
            fold_case=_FOLD_CASE,
        )
        self._home_files = [
            (os.path.join(home_dir, n), f"${{SOONG_AGENT_HOME}}/{n}") for n in _NAMES
        ]
        self._rules = os.path.join(home_dir, "rules")
        self._project_files = [(os.path.join(self._root, n), f"<project>/{n}") for n in _NAMES]
        self._repo_head = os.path.join(project_dir, ".git", "HEAD")
        self._docs: dict[str, tuple[tuple[int, int, int, int], str, InstructionDoc | None]] = {}
        """The files read, by path: their `os.stat` when read, their label, what they held."""
        self._skipped: dict[str | None, list[SkippedInstruction]] = {}
        """What the last read of each folder (None: the project's own files) left out."""

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
        skipped: list[SkippedInstruction] = []
        for path, label in self._project_files:
            doc = self._project_doc(path, label, None, skipped)
            if doc:
                docs.append(doc)
        self._skipped[None] = skipped
        return docs

    def skipped(self, folder: str | None = None) -> list[SkippedInstruction]:
        if folder is None:
            return list(self._skipped.get(None, ()))
        clean = _project_folder(folder)
        return list(self._skipped.get(clean, ())) if clean is not None else []

    def _project_doc(
        self, path: str, label: str, folder: str | None, skipped: list[SkippedInstruction]
    ) -> InstructionDoc | None:
        """The project file at `path` (as named, inside the project), when it leads neither out
        of the project nor to a sensitive path; else None, and why added to `skipped`."""
        real = os.path.realpath(path)
        if not os.path.exists(real):  # missing, or a link to nothing: nothing to read
            self._docs.pop(path, None)
            return None
        reason = self._refusal(path, real)
        if reason is not None:
            skipped.append(SkippedInstruction(label, reason, folder))
            self._docs.pop(path, None)
            return None
        try:
            return self._doc(path, label, folder, real=real)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            reason = "it was replaced by a symbolic link while it was being read"
            skipped.append(SkippedInstruction(label, reason, folder))
            return None

    def _refusal(self, path: str, real: str) -> str | None:
        """Why the project file at `path` (real path `real`) must not be read; None: it may."""
        rule = self._sensitive.rule_for(path, real)
        link = f"a symbolic link to {real}, " if real != path else ""
        if rule is not None:
            return (
                f"it is {link}a sensitive path (tools.sensitive_paths: {rule.pattern}), "
                "which is never read"
            )
        if not _inside(real, self._root):
            return f"it is {link}outside the project, which instruction files never leave"
        return None

    def _doc(
        self, path: str, label: str, folder: str | None = None, *, real: str | None = None
    ) -> InstructionDoc | None:
        """`_read` (`_read_below` for a project file at the real path `real`), or what it gave
        last time when the file's stat (inode, size, modification and change times) is the
        same and the file did not change in the last moments."""
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            self._docs.pop(path, None)
            return None
        except OSError:
            self._docs.pop(path, None)
            return self._load(path, label, folder, real)
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        hit = self._docs.get(path)
        if hit is not None and hit[0] == key and hit[1] == label:
            doc = hit[2]
            if doc is None or doc.folder == folder:
                return doc
        doc = self._load(path, label, folder, real)
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) >= _SETTLED_NS:
            self._docs[path] = (key, label, doc)
        else:
            self._docs.pop(path, None)
        return doc

    def _load(
        self, path: str, label: str, folder: str | None, real: str | None
    ) -> InstructionDoc | None:
        if real is None:
            return _read(path, label, folder)
        try:
            return _read_below(self._root, real, label, folder)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
            return None

    def folder_instructions(self, folder: str) -> list[InstructionDoc]:
        """The `CLAUDE.md` and `AGENTS.md` of a folder inside the project (PROMPT-2); none that
        leads out of the project or to a sensitive path (see `skipped`)."""
        clean = _project_folder(folder)
        if clean is None:
            return []
        root = self._root
        where = os.path.join(root, *clean.split("/"))
        skipped: list[SkippedInstruction] = []
        self._skipped[clean] = skipped
        if not os.path.isdir(where):
            return []
        docs: list[InstructionDoc] = []
        for name in _NAMES:
            path = os.path.join(where, name)
            doc = self._project_doc(path, f"<project>/{clean}/{name}", clean, skipped)
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
