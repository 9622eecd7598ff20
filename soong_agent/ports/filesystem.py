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
class Listing:
    """A bounded list of results; `truncated` says that more existed than were returned."""

    items: list[str]
    truncated: bool


@runtime_checkable
class FileSystem(Protocol):
    """Project files. Paths are relative to the project or absolute; every method checks them.

    A path outside what the sandbox allows raises `SandboxViolation`; a missing file raises
    `FileNotFoundError`.
    """

    @property
    def root(self) -> str:
        """The resolved project directory."""
        ...

    def display_path(self, path: str) -> str:
        """`path` as the user should see it (relative to the project when inside it)."""
        ...

    async def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The file's bytes (the first `max_bytes` of them when given)."""
        ...

    async def file_size(self, path: str) -> int:
        """The file's size in bytes."""
        ...

    async def write_text(self, path: str, text: str) -> None:
        """Create or replace a file (parent folders are created)."""
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

    def check_write(self, path: str) -> str:
        """The resolved absolute path if a write there is allowed; else raise SandboxViolation."""
        ...
