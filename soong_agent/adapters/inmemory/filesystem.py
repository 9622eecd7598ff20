"""A dict-backed project filesystem for fast tests, as strict as the local sandbox in memory.

It refuses what `LocalFileSystem` refuses where that means something without a disk: reads
outside the project, writes outside the write roots, sensitive paths (the same
`SensitivePaths` patterns: ``.env``, ``~/.ssh`` …) for every member, ``~`` as `home`. There are
no symlinks or hard links, so those checks have nothing to catch.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import posixpath
import re
from collections.abc import Iterator, Sequence

from soong_agent.domain.permissions.sensitive import SensitivePaths
from soong_agent.domain.permissions.targets import (
    GLOB_CHARS,
    expand_home,
    glob_regex,
    is_within,
    normalise,
)
from soong_agent.ports.errors import SandboxViolation, ToolInputError
from soong_agent.ports.filesystem import DirEntry, GrepMatch, Listing, PathFacts


def _error(kind: type[OSError], code: int, display: str) -> OSError:
    return kind(code, os.strerror(code), display)


class InMemoryFileSystem:
    """Files as a dict of paths to bytes: project-relative posix keys for files inside the
    project, absolute keys for files written to a write root outside it.

    `write_roots` (absolute, ``~/…`` or project-relative; default: the project), `sensitive`
    (`tools.sensitive_paths` entries) and `allow_tmp_write` (adds `tmp_dir`) mean what they
    mean for `LocalFileSystem`.
    """

    def __init__(
        self,
        files: dict[str, str | bytes] | None = None,
        *,
        root: str = "/project",
        home: str = "/home/user",
        write_roots: Sequence[str] | None = None,
        sensitive: Sequence[str] = (),
        allow_tmp_write: bool = False,
        tmp_dir: str = "/tmp",
    ) -> None:
        self._root = normalise(root)
        self._home = normalise(home)
        roots = [self._absolute(r) for r in (write_roots if write_roots is not None else ["."])]
        if allow_tmp_write:
            roots.append(normalise(tmp_dir))
        self._write_roots = tuple(dict.fromkeys(roots))
        self._sensitive = SensitivePaths(
            sensitive, project=self._root, home=self._home, roots=self._write_roots
        )
        self.files: dict[str, bytes] = {
            k: v.encode() if isinstance(v, str) else v for k, v in (files or {}).items()
        }

    # --- paths -----------------------------------------------------------------------------

    @property
    def root(self) -> str:
        return self._root

    @property
    def home(self) -> str:
        return self._home

    def _absolute(self, path: str) -> str:
        if "\x00" in path:
            raise ToolInputError(f"the path {path!r} contains a NUL character")
        if not path.strip():
            return self._root
        return normalise(posixpath.join(self._root, expand_home(path, self._home)))

    def _key(self, absolute: str) -> str:
        """The `files` key of an absolute path (``.`` for the project itself)."""
        if is_within(absolute, self._root):
            return posixpath.relpath(absolute, self._root)
        return absolute

    def _refuse_sensitive(self, path: str, absolute: str, action: str) -> None:
        rule = self._sensitive.rule_for(absolute)
        if rule is not None:
            raise SandboxViolation(
                f"{action} {self.display_path(path)!r} refused: it is a sensitive path "
                f"(matches {rule.pattern!r}) and is never read, written or listed"
            )

    def display_path(self, path: str) -> str:
        try:
            absolute = self._absolute(path)
        except ToolInputError:
            return path
        if is_within(absolute, self._root):
            return posixpath.relpath(absolute, self._root)
        return absolute

    def _check_read(self, path: str, action: str) -> str:
        absolute = self._absolute(path)
        self._refuse_sensitive(path, absolute, action)
        if not is_within(absolute, self._root):
            raise SandboxViolation(
                f"{action} {path!r} refused: {absolute} is outside the project {self._root}"
            )
        return absolute

    def check_read(self, path: str) -> str:
        return self._check_read(path, "read of")

    def check_write(self, path: str) -> str:
        absolute = self._absolute(path)
        self._refuse_sensitive(path, absolute, "write to")
        if any(is_within(absolute, root) for root in self._write_roots):
            return absolute
        allowed = ", ".join(self._write_roots) or "none"
        outside = "outside the project and " if not is_within(absolute, self._root) else ""
        raise SandboxViolation(
            f"write to {path!r} refused: {absolute} is {outside}outside the allowed write roots "
            f"({allowed})"
        )

    def _check_access(self, path: str) -> str:
        absolute = self._absolute(path)
        self._refuse_sensitive(path, absolute, "access to")
        if is_within(absolute, self._root) or any(
            is_within(absolute, root) for root in self._write_roots
        ):
            return absolute
        raise SandboxViolation(
            f"access to {path!r} refused: {absolute} is outside the project {self._root}"
        )

    # --- what exists -----------------------------------------------------------------------

    def _is_file(self, absolute: str) -> bool:
        return self._key(absolute) in self.files

    def _is_dir(self, absolute: str) -> bool:
        if absolute == self._root:
            return True
        head = self._key(absolute) + "/"
        return any(key.startswith(head) for key in self.files)

    def _absolute_files(self) -> Iterator[str]:
        for key in self.files:
            yield key if key.startswith("/") else posixpath.join(self._root, key)

    def _known_paths(self) -> set[str]:
        """Every file and folder that exists, as absolute paths."""
        known: set[str] = set()
        for file in self._absolute_files():
            path = file
            while path not in known and path != "/":
                known.add(path)
                path = posixpath.dirname(path)
        return known

    def _under(self, folder: str) -> list[tuple[str, str]]:
        """(project-relative key, path relative to `folder`) of the files below the absolute
        `folder` that a read would allow, sorted."""
        head = "" if folder == self._root else self._key(folder) + "/"
        found = []
        for key in sorted(self.files):
            if key.startswith("/") or not key.startswith(head):
                continue
            if self._sensitive.rule_for(posixpath.join(self._root, key)) is None:
                found.append((key, key[len(head) :]))
        return found

    # --- checks for the permission gate ----------------------------------------------------

    def sensitive_below(self, folder: str) -> str | None:
        absolute = self._absolute(folder)
        if not self._is_dir(absolute):
            return None
        for path in sorted(self._known_paths()):
            if path == absolute or not is_within(path, absolute):
                continue
            if self._sensitive.entry_is_sensitive(path, posixpath.basename(path)):
                return self.display_path(path)
        return None

    def expand_shell_word(self, word: str, *, limit: int = 1000) -> list[str]:
        if word.startswith("~") and not (word == "~" or word.startswith("~/")):
            user, _, rest = word[1:].partition("/")
            path = posixpath.join(posixpath.dirname(self._home), user, rest)
        else:
            path = expand_home(word, self._home)
        if not GLOB_CHARS & set(path):
            return [path]
        parts = normalise(posixpath.join(self._root, path)).split("/")
        hits = [
            known
            for known in sorted(self._known_paths())
            if len(known.split("/")) == len(parts)
            and all(fnmatch.fnmatchcase(k, p) for k, p in zip(known.split("/"), parts, strict=True))
        ]
        return hits[: max(limit, 0)]

    def path_facts(self, path: str) -> PathFacts:
        absolute = self._absolute(path)
        if self._is_file(absolute):
            return PathFacts(absolute, absolute, exists=True)
        is_dir = self._is_dir(absolute)
        return PathFacts(absolute, absolute, exists=is_dir, is_dir=is_dir)

    @property
    def sensitive_patterns(self) -> tuple[str, ...]:
        return tuple(rule.pattern for rule in self._sensitive.rules)

    # --- the port --------------------------------------------------------------------------

    async def read_bytes(
        self, path: str, *, max_bytes: int | None = None, sole_link: bool = False
    ) -> bytes:
        del sole_link  # no hard links in memory
        absolute = self._check_read(path, "read of")
        display = self.display_path(path)
        if self._is_dir(absolute):
            raise _error(IsADirectoryError, errno.EISDIR, display)
        data = self.files.get(self._key(absolute))
        if data is None:
            raise _error(FileNotFoundError, errno.ENOENT, display)
        return data if max_bytes is None else data[: max(max_bytes, 0)]

    async def file_size(self, path: str) -> int:
        return len(await self.read_bytes(path))

    async def write_text(self, path: str, text: str) -> None:
        await self.write_bytes(path, text.encode("utf-8"))

    async def write_bytes(self, path: str, data: bytes) -> None:
        absolute = self.check_write(path)
        display = self.display_path(path)
        if self._is_dir(absolute):
            raise _error(IsADirectoryError, errno.EISDIR, display)
        parent = posixpath.dirname(absolute)
        while parent != "/":
            if self._is_file(parent):
                raise _error(NotADirectoryError, errno.ENOTDIR, display)
            parent = posixpath.dirname(parent)
        self.files[self._key(absolute)] = bytes(data)

    async def remove_file(self, path: str) -> None:
        absolute = self.check_write(path)
        display = self.display_path(path)
        if self._is_dir(absolute):
            raise _error(IsADirectoryError, errno.EISDIR, display)
        if self.files.pop(self._key(absolute), None) is None:
            raise _error(FileNotFoundError, errno.ENOENT, display)

    async def exists(self, path: str) -> bool:
        absolute = self._check_access(path)
        return self._is_file(absolute) or self._is_dir(absolute)

    async def list_dir(self, path: str, *, limit: int) -> tuple[list[DirEntry], bool]:
        absolute = self._check_read(path, "listing of")
        display = self.display_path(path)
        if self._is_file(absolute):
            raise _error(NotADirectoryError, errno.ENOTDIR, display)
        if not self._is_dir(absolute):
            raise _error(FileNotFoundError, errno.ENOENT, display)
        rel = self._key(absolute)
        prefix = "" if rel == "." else rel + "/"
        names: dict[str, DirEntry] = {}
        for key, data in self.files.items():
            if key.startswith("/") or not key.startswith(prefix):
                continue
            head, _, rest = key[len(prefix) :].partition("/")
            full = posixpath.join(absolute, head)
            if self._sensitive.entry_is_sensitive(full, head):
                continue
            names[head] = DirEntry(prefix + head, is_dir=bool(rest), size=0 if rest else len(data))
        entries = [names[k] for k in sorted(names)]
        return entries[: max(limit, 0)], len(entries) > max(limit, 0)

    def _search_top(self, base: str) -> str:
        absolute = self._check_read(base, "search of")
        if not self._is_dir(absolute) and not self._is_file(absolute):
            raise _error(FileNotFoundError, errno.ENOENT, self.display_path(base))
        return absolute

    async def glob(self, pattern: str, *, base: str, limit: int) -> Listing:
        top = self._search_top(base)
        if self._is_file(top):
            raise _error(NotADirectoryError, errno.ENOTDIR, self.display_path(base))
        if not pattern.strip():
            raise ToolInputError("the glob pattern is empty")
        regex = glob_regex(pattern)
        hits = [key for key, rel in self._under(top) if regex.fullmatch(rel)]
        return Listing(hits[: max(limit, 0)], len(hits) > max(limit, 0))

    async def grep(
        self, pattern: str, *, base: str, glob: str | None, limit: int, ignore_case: bool
    ) -> tuple[list[GrepMatch], bool]:
        try:
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise ToolInputError(f"invalid regular expression {pattern!r}: {exc}") from exc
        top = self._search_top(base)
        if self._is_file(top):
            keys = [self._key(top)]  # one file, searched whatever the glob says
        else:
            wanted = glob_regex(glob) if glob else None
            on_name = glob is not None and "/" not in glob
            keys = [
                key
                for key, rel in self._under(top)
                if wanted is None or wanted.fullmatch(posixpath.basename(rel) if on_name else rel)
            ]
        matches: list[GrepMatch] = []
        for key in keys:
            for number, line in enumerate(self.files[key].decode(errors="replace").splitlines(), 1):
                if regex.search(line):
                    matches.append(GrepMatch(key, number, line))
        return matches[: max(limit, 0)], len(matches) > max(limit, 0)
