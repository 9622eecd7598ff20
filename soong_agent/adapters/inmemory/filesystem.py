"""A dict-backed project filesystem for fast tests (no sandbox subtleties: there is no disk)."""

from __future__ import annotations

import fnmatch
import posixpath
import re

from soong_agent.ports.errors import SandboxViolation, ToolInputError
from soong_agent.ports.filesystem import DirEntry, GrepMatch, Listing


class InMemoryFileSystem:
    """Files as a dict of project-relative posix paths to bytes."""

    def __init__(self, files: dict[str, str | bytes] | None = None, *, root: str = "/project"):
        self._root = root
        self.files: dict[str, bytes] = {
            k: v.encode() if isinstance(v, str) else v for k, v in (files or {}).items()
        }

    @property
    def root(self) -> str:
        return self._root

    def _rel(self, path: str) -> str:
        full = posixpath.normpath(posixpath.join(self._root, path))
        if full != self._root and not full.startswith(self._root + "/"):
            raise SandboxViolation(f"{path} is outside the project folder")
        return posixpath.relpath(full, self._root)

    def display_path(self, path: str) -> str:
        try:
            return self._rel(path)
        except SandboxViolation:
            return path

    def check_write(self, path: str) -> str:
        return posixpath.join(self._root, self._rel(path))

    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        rel = self._rel(path)
        if rel not in self.files:
            raise FileNotFoundError(2, "No such file", rel)
        data = self.files[rel]
        return data if max_bytes is None else data[:max_bytes]

    async def file_size(self, path: str) -> int:
        return len(await self.read_bytes(path))

    async def write_text(self, path: str, text: str) -> None:
        self.files[self._rel(path)] = text.encode("utf-8")

    async def exists(self, path: str) -> bool:
        rel = self._rel(path)
        return rel in self.files or any(k.startswith(rel + "/") for k in self.files)

    async def list_dir(self, path: str, *, limit: int) -> tuple[list[DirEntry], bool]:
        rel = self._rel(path)
        prefix = "" if rel == "." else rel + "/"
        names: dict[str, DirEntry] = {}
        for key, data in self.files.items():
            if not key.startswith(prefix):
                continue
            head, _, rest = key[len(prefix) :].partition("/")
            names[head] = DirEntry(prefix + head, is_dir=bool(rest), size=0 if rest else len(data))
        entries = [names[k] for k in sorted(names)]
        return entries[:limit], len(entries) > limit

    async def glob(self, pattern: str, *, base: str, limit: int) -> Listing:
        rel = self._rel(base)
        prefix = "" if rel == "." else rel + "/"
        hits = sorted(
            k
            for k in self.files
            if k.startswith(prefix)
            and (
                fnmatch.fnmatch(k[len(prefix) :], pattern)
                or fnmatch.fnmatch(k[len(prefix) :], pattern.replace("**/", ""))
            )
        )
        return Listing(hits[:limit], len(hits) > limit)

    async def grep(
        self, pattern: str, *, base: str, glob: str | None, limit: int, ignore_case: bool
    ) -> tuple[list[GrepMatch], bool]:
        try:
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise ToolInputError(f"invalid regular expression {pattern!r}: {exc}") from exc
        files = (await self.glob(glob or "*", base=base, limit=10**9)).items
        matches: list[GrepMatch] = []
        for key in files:
            for number, line in enumerate(self.files[key].decode(errors="replace").splitlines(), 1):
                if regex.search(line):
                    matches.append(GrepMatch(key, number, line))
        return matches[:limit], len(matches) > limit
