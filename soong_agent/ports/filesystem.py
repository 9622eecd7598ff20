"""The filesystem port: file access confined to the project by the adapter behind it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class DirEntry:
    """One entry of a directory listing; `path` is relative to the project."""

    path: str
    is_dir: bool
    size: int


@dataclass(frozen=True, slots=True)
class GrepMatch:
    """One matching line."""

    path: str
    line_number: int
    line: str


@dataclass(frozen=True, slots=True)
class PathFacts:
    """What lies at a path, for the permission gate (nothing is read, nothing is checked).

    `lexical` is the path made absolute (relative ones from the project, ``~`` as the home) and
    normalised with symlinks untouched; `resolved` has every existing symlink followed (a
    missing tail stays as written). `exists` says whether anything (a dangling symlink too) is
    there; `is_dir` whether it is a folder (after links); `links` the hard-link count of a
    regular file (1 otherwise).
    """

    lexical: str
    resolved: str
    exists: bool
    is_dir: bool = False
    links: int = 1


@dataclass(frozen=True, slots=True)
class Listing:
    """A bounded list of results; `truncated` says that more existed than were returned."""

    items: list[str]
    truncated: bool


@runtime_checkable
class FileSystem(Protocol):
    """Project files. Paths are relative to the project, absolute, or ``~/…`` (the user's home);
    every method checks them.

    A path outside what the sandbox allows raises `SandboxViolation`; a missing file raises
    `FileNotFoundError`. The `check_*`, `sensitive_below`, `expand_shell_word`, `path_facts`
    and `sensitive_patterns` members let the permission gate hold a shell command line's paths
    to the same policy as the file tools.
    """

    @property
    def root(self) -> str:
        """The resolved project directory."""
        ...

    @property
    def home(self) -> str:
        """The user's home directory: what ``~`` stands for in paths and in ``~/`` rules."""
        ...

    def display_path(self, path: str) -> str:
        """`path` as the user should see it (relative to the project when inside it)."""
        ...

    def check_read(self, path: str) -> str:
        """The resolved absolute path if reading `path` is allowed; else raise SandboxViolation.

        Reads are confined to the project; sensitive paths are never read.
        """
        ...

    def check_write(self, path: str) -> str:
        """The resolved absolute path if a write there is allowed; else raise SandboxViolation.

        Writes are confined to the write roots; sensitive paths are never written.
        """
        ...

    def sensitive_below(self, folder: str) -> str | None:
        """A sensitive file or folder under `folder` (display form), or None.

        None as well when `folder` is not a readable folder, or holds too much to walk. Used to
        refuse commands that read folders recursively (``grep -r``, ``tar``), which would open
        what the file tools refuse.
        """
        ...

    def expand_shell_word(self, word: str, *, limit: int = 1000) -> list[str]:
        """The paths a shell would make of the argument `word`, at most `limit`.

        A leading ``~`` (``~user``) becomes that home. A glob pattern (``*``, ``?``, ``[``) is
        expanded against what exists, relative ones from the project, hidden files included:
        absolute paths, ``[]`` when nothing matches. Any other word is one path (relative
        ones stay relative to the project), whether it exists or not.
        """
        ...

    def path_facts(self, path: str) -> PathFacts:
        """What lies at `path` (see `PathFacts`), wherever it is: no sandbox check, no read.

        Lets the gate tell which words of a command name existing files, follow symlinks
        before matching protected paths, and see hard-linked files. Raises `ToolInputError`
        for a path holding a NUL character.
        """
        ...

    @property
    def sensitive_patterns(self) -> tuple[str, ...]:
        """The `tools.sensitive_paths` entries this sandbox refuses (``~`` and placeholders
        already expanded as configured), for what only the gate can apply: git pathspec
        exclusions."""
        ...

    async def read_bytes(
        self, path: str, *, max_bytes: int | None = None, sole_link: bool = False
    ) -> bytes:
        """The file's bytes (the first `max_bytes` of them when given). With `sole_link`, a
        file with more than one hard link (checked on the opened file) is refused with
        SandboxViolation: its other name may be outside the sandbox."""
        ...

    async def file_size(self, path: str) -> int:
        """The file's size in bytes."""
        ...

    async def write_text(self, path: str, text: str) -> None:
        """Create or replace a file (parent folders are created)."""
        ...

    async def write_bytes(self, path: str, data: bytes) -> None:
        """Create or replace a file with exactly `data` (parent folders are created): the
        checks of `write_text`. Used by a rewind to put a file's earlier bytes back."""
        ...

    async def remove_file(self, path: str) -> None:
        """Remove the file at `path` (never a folder): the checks of a write; FileNotFoundError
        when there is none. Used by a rewind to remove a file created since."""
        ...

    async def exists(self, path: str) -> bool:
        """Whether something exists at `path`."""
        ...

    async def list_dir(self, path: str, *, limit: int) -> tuple[list[DirEntry], bool]:
        """The entries of a directory, sorted, and whether the list was cut at `limit`."""
        ...

    async def glob(self, pattern: str, *, base: str, limit: int) -> Listing:
        """Files under `base` matching `pattern` (``**`` crosses folders)."""
        ...

    async def grep(
        self, pattern: str, *, base: str, glob: str | None, limit: int, ignore_case: bool
    ) -> tuple[list[GrepMatch], bool]:
        """Lines matching the regular expression `pattern` under `base`."""
        ...
