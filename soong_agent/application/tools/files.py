"""The file tools (TOOL-1): read_file, list_dir, glob, grep, write_file, edit_file."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import AliasChoices, Field, field_validator

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput, no_nul
from soong_agent.domain.images import FORMATS, looks_like_image, sniff_image
from soong_agent.domain.permissions import directory_scope
from soong_agent.ports.messages import ImageBlock

READ_MAX_BYTES = 256 * 1024


def _aliased(name: str, *aliases: str, **kwargs: Any) -> Any:
    """A field that also accepts the names other agents' tools use (file_path, old_str, …)."""
    return Field(validation_alias=AliasChoices(name, *aliases), **kwargs)


READ_DEFAULT_LINES = 2000
LINE_MAX_CHARS = 2000


class ReadFileArgs(ToolArgs):
    path: str = _aliased("path", "file_path", description="File to read, relative to the project.")
    offset: int = Field(default=1, ge=1, description="First line to return (1-based).")
    limit: int = Field(
        default=READ_DEFAULT_LINES, ge=1, le=10_000, description="How many lines to return."
    )


@dataclass(frozen=True, slots=True)
class ImageReading:
    """How `read_file` treats a PNG, JPEG, GIF or WebP file (PROV-7): as an image shown to
    the model when the run's model profile takes images (`vision`, from `[model] vision` or
    the model's name), up to `max_bytes` (`tools.max_image_bytes`)."""

    vision: bool
    max_bytes: int


async def read_image(
    args: ReadFileArgs, ctx: ToolContext, images: ImageReading
) -> ToolOutput | None:
    """The result of reading an image file; None when the file is not one (by its bytes).
    Nothing here makes an image smaller (no image library is a dependency): one over the cap
    is refused with its size."""
    head = await ctx.fs.read_bytes(args.path, max_bytes=16)
    media_type = sniff_image(head)
    if media_type is None:
        return None
    shown = ctx.fs.display_path(args.path)
    size = await ctx.fs.file_size(args.path)
    if not images.vision:
        return ToolOutput(
            f"{shown} is an image ({media_type}, {size} bytes), and this model profile is not "
            "shown images (model.vision = false): it cannot be read. Set [model] vision = true "
            "if the model takes images.",
            is_error=True,
        )
    if size > images.max_bytes:
        return ToolOutput(
            f"{shown} is an image of {size} bytes, more than the {images.max_bytes} bytes "
            "(tools.max_image_bytes) an image may have to be shown; it is not shown.",
            is_error=True,
        )
    data = await ctx.fs.read_bytes(args.path, max_bytes=images.max_bytes + 1)
    if len(data) > images.max_bytes:  # it grew since its size was read
        return ToolOutput(f"{shown} changed while it was read; read it again.", is_error=True)
    image = ImageBlock(media_type=media_type, data=data, source=shown)
    return ToolOutput(f"{shown}: {media_type} image, {len(data)} bytes.", images=(image,))


async def read_file(
    args: ReadFileArgs, ctx: ToolContext, images: ImageReading | None = None
) -> ToolOutput:
    if images is not None and looks_like_image(args.path):
        image = await read_image(args, ctx, images)
        if image is not None:
            return image
    shown = ctx.fs.display_path(args.path)
    size = await ctx.fs.file_size(args.path)
    whole = args.offset == 1 and args.limit == READ_DEFAULT_LINES
    if size > READ_MAX_BYTES and whole:
        return ToolOutput(
            f"{shown} is {size} bytes, more than the {READ_MAX_BYTES} bytes read_file returns at "
            "once; read it in parts with offset and limit (line numbers).",
            is_error=True,
        )
    data = await ctx.fs.read_bytes(args.path)
    if b"\x00" in data[:8192]:
        return ToolOutput(f"{shown} is a binary file ({size} bytes); its content is not shown.")
    lines = data.decode("utf-8", errors="replace").splitlines()
    start = args.offset - 1
    chosen = lines[start : start + args.limit]
    if not lines:
        return ToolOutput(f"{shown} is empty.")
    if not chosen:
        return ToolOutput(f"{shown} has {len(lines)} lines; offset {args.offset} is past the end.")
    out = [
        f"{number:6}\t{line[:LINE_MAX_CHARS]}"
        for number, line in enumerate(chosen, start=args.offset)
    ]
    rest = len(lines) - (start + len(chosen))
    if rest > 0:
        out.append(f"[{rest} more lines; continue with offset={start + len(chosen) + 1}]")
    return ToolOutput("\n".join(out))


class ListDirArgs(ToolArgs):
    path: str = Field(default=".", description="Folder to list, relative to the project.")
    limit: int = Field(default=500, ge=1, le=5000)


async def list_dir(args: ListDirArgs, ctx: ToolContext) -> ToolOutput:
    entries, truncated = await ctx.fs.list_dir(args.path, limit=args.limit)
    if not entries:
        return ToolOutput(f"{ctx.fs.display_path(args.path)} is empty.")
    lines = [f"{e.path}/" if e.is_dir else f"{e.path} ({e.size} bytes)" for e in entries]
    if truncated:
        lines.append(f"[listing cut at {args.limit} entries]")
    return ToolOutput("\n".join(lines))


class GlobArgs(ToolArgs):
    pattern: str = Field(description="Glob pattern such as '**/*.py'.")
    path: str = Field(default=".", description="Folder to search in.")
    limit: int = Field(default=500, ge=1, le=5000)

    _no_nul = field_validator("pattern", "path")(no_nul)


async def glob_files(args: GlobArgs, ctx: ToolContext) -> ToolOutput:
    found = await ctx.fs.glob(args.pattern, base=args.path, limit=args.limit)
    if not found.items:
        return ToolOutput(f"No files match {args.pattern!r}.")
    lines = list(found.items)
    if found.truncated:
        lines.append(f"[results cut at {args.limit} files]")
    return ToolOutput("\n".join(lines))


class GrepArgs(ToolArgs):
    pattern: str = Field(description="Regular expression (ripgrep / Rust regex syntax).")
    path: str = Field(default=".", description="Folder or file to search in.")
    glob: str | None = Field(default=None, description="Only files matching this glob.")
    ignore_case: bool = False
    limit: int = Field(default=200, ge=1, le=5000)

    _no_nul = field_validator("pattern", "path", "glob")(no_nul)


async def grep(args: GrepArgs, ctx: ToolContext) -> ToolOutput:
    matches, truncated = await ctx.fs.grep(
        args.pattern, base=args.path, glob=args.glob, limit=args.limit, ignore_case=args.ignore_case
    )
    if not matches:
        return ToolOutput(f"No matches for {args.pattern!r}.")
    lines = [f"{m.path}:{m.line_number}: {m.line[:LINE_MAX_CHARS]}" for m in matches]
    if truncated:
        lines.append(f"[matches cut at {args.limit}]")
    return ToolOutput("\n".join(lines))


class WriteFileArgs(ToolArgs):
    path: str = _aliased("path", "file_path", description="File to create or replace.")
    content: str = _aliased("content", "contents", description="The complete new content.")


def _describe_write(args: WriteFileArgs, ctx: ToolContext) -> tuple[str, str]:
    shown = ctx.fs.display_path(args.path)
    size = len(args.content.encode("utf-8"))
    return directory_scope(shown), f"write {size} bytes to {shown}"


DIFF_MAX_BYTES = 1024 * 1024
"""A file bigger than this (before or after the change) is not diffed for the approval prompt."""


def _diff_lines(text: str) -> list[str]:
    """`text` as lines split at ``\\n`` only (``str.splitlines`` also splits at form feeds and
    other separators a file may hold inside a line), each keeping its newline."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def unified_diff(before: str | None, after: str, shown: str) -> str:
    """The change from `before` to `after` of the file shown as `shown`, as a unified diff
    with three lines of context (`before` None: a new file, a diff from ``/dev/null``); a
    line without a final newline is marked as git marks it. A note in parentheses when there
    is nothing to diff."""
    if before == after:
        return f"(no change: {shown} already holds this content)"
    if before is None and not after:
        return f"(a new empty file {shown})"
    label = shown if shown.startswith(("/", "~")) else f"b/{shown}"
    old_label = "/dev/null" if before is None else label.replace("b/", "a/", 1)
    out: list[str] = []
    for line in difflib.unified_diff(
        _diff_lines(before or ""), _diff_lines(after), old_label, label, n=3
    ):
        if line.endswith("\n"):
            out.append(line[:-1].removesuffix("\r"))
        else:
            out += [line, "\\ No newline at end of file"]
    return "\n".join(out)


async def _current_text(path: str, ctx: ToolContext) -> str | bytes | None:
    """What the file at `path` holds now, for a diff: its text, its first bytes when it is
    not UTF-8 text or too big to diff, None when there is no file."""
    try:
        data = await ctx.fs.read_bytes(path, max_bytes=DIFF_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > DIFF_MAX_BYTES or b"\x00" in data[:8192]:
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


async def _preview_write(args: WriteFileArgs, ctx: ToolContext) -> str:
    """The approval prompt's view of a write: the diff against the current file, or a new
    file as a diff from nothing (whose first lines the prompt shows)."""
    shown = ctx.fs.display_path(args.path)
    before = await _current_text(args.path, ctx)
    size = len(args.content.encode("utf-8"))
    if isinstance(before, bytes):
        what = (
            "binary"
            if b"\x00" in before[:8192]
            else "large"
            if len(before) > DIFF_MAX_BYTES
            else "non-UTF-8"
        )
        return (
            f"(no diff: {shown} is a {what} file of {await ctx.fs.file_size(args.path)} bytes; "
            f"it would be replaced by {size} bytes of text)"
        )
    if before is not None and size > DIFF_MAX_BYTES:
        return f"(no diff: the new content of {shown} is {size} bytes, too big to compare)"
    return unified_diff(before, args.content, shown)


async def write_file(args: WriteFileArgs, ctx: ToolContext) -> ToolOutput:
    existed = await ctx.fs.exists(args.path)
    await ctx.fs.write_text(args.path, args.content)
    shown = ctx.fs.display_path(args.path)
    verb = "replaced" if existed else "created"
    return ToolOutput(f"{verb} {shown} ({len(args.content.encode('utf-8'))} bytes)")


class EditFileArgs(ToolArgs):
    path: str = _aliased("path", "file_path", description="File to edit, relative to the project.")
    old_string: str = _aliased(
        "old_string", "old_str", min_length=1, description="Exact text to replace."
    )
    new_string: str = _aliased("new_string", "new_str", description="Text to put in its place.")
    replace_all: bool = Field(default=False, description="Replace every occurrence.")


def _describe_edit(args: EditFileArgs, ctx: ToolContext) -> tuple[str, str]:
    shown = ctx.fs.display_path(args.path)
    return directory_scope(shown), f"edit {shown} (replace {len(args.old_string)} characters)"


def _line_numbers(text: str, needle: str, most: int = 10) -> list[int]:
    numbers: list[int] = []
    start = text.find(needle)
    while start != -1 and len(numbers) < most:
        numbers.append(text.count("\n", 0, start) + 1)
        start = text.find(needle, start + 1)
    return numbers


def _edited(data: bytes, args: EditFileArgs, shown: str) -> tuple[str, str, int] | ToolOutput:
    """The edit applied to the file's bytes: (text before, text after, replacements), or the
    error the model is told when it cannot be applied. The tool and its preview both use it,
    so the diff a person approves is the change the tool makes."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return ToolOutput(f"{shown} is not UTF-8 text; edit_file cannot change it.", is_error=True)
    count = text.count(args.old_string)
    if count == 0:
        return ToolOutput(f"old_string was not found in {shown}; nothing changed.", is_error=True)
    if count > 1 and not args.replace_all:
        lines = ", ".join(str(n) for n in _line_numbers(text, args.old_string))
        return ToolOutput(
            f"old_string occurs {count} times in {shown} (lines {lines}); nothing changed. "
            "Include more surrounding text to make it unique, or set replace_all.",
            is_error=True,
        )
    return text, text.replace(args.old_string, args.new_string), count


async def edit_file(args: EditFileArgs, ctx: ToolContext) -> ToolOutput:
    shown = ctx.fs.display_path(args.path)
    edited = _edited(await ctx.fs.read_bytes(args.path), args, shown)
    if isinstance(edited, ToolOutput):
        return edited
    _, after, count = edited
    await ctx.fs.write_text(args.path, after)
    return ToolOutput(f"edited {shown}: {count} replacement{'s' if count > 1 else ''}")


async def _preview_edit(args: EditFileArgs, ctx: ToolContext) -> str:
    """The approval prompt's view of an edit: the diff of the file as the tool would leave
    it, or why the tool would refuse it."""
    shown = ctx.fs.display_path(args.path)
    try:
        size = await ctx.fs.file_size(args.path)
    except FileNotFoundError:
        return f"(the edit would fail: {shown} does not exist)"
    if size > DIFF_MAX_BYTES:
        return f"(no diff: {shown} is {size} bytes, too big to compare)"
    edited = _edited(await ctx.fs.read_bytes(args.path), args, shown)
    if isinstance(edited, ToolOutput):
        return f"(the edit would fail: {edited.content})"
    before, after, _ = edited
    return unified_diff(before, after, shown)


@functools.cache
def _reader(images: ImageReading | None) -> Callable[[Any, ToolContext], Awaitable[ToolOutput]]:
    """read_file's handler with `images` (one per setting: the tools of runtimes with the same
    setting are the same)."""

    async def handler(args: ReadFileArgs, ctx: ToolContext) -> ToolOutput:
        return await read_file(args, ctx, images)

    return handler


def file_tools(*, images: ImageReading | None = None) -> list[Tool]:
    """The built-in file tools; with `images`, read_file shows image files to the model (see
    `ImageReading`; without it, an image reads as a binary file)."""
    what = (
        f"Read a text file with line numbers; use offset/limit for parts of big files. A "
        f"{FORMATS} image is shown to you as the image."
        if images is not None and images.vision
        else "Read a text file with line numbers; use offset/limit for parts of big files."
    )
    return [
        Tool("read_file", what, ReadFileArgs, _reader(images)),
        Tool("list_dir", "List a folder of the project.", ListDirArgs, list_dir),
        Tool("glob", "Find files by glob pattern ('**' crosses folders).", GlobArgs, glob_files),
        Tool("grep", "Search file contents with a regular expression.", GrepArgs, grep),
        Tool(
            "write_file",
            "Create or replace a file with the given content.",
            WriteFileArgs,
            write_file,
            permission_class="write",
            describe=_describe_write,
            preview=_preview_write,
        ),
        Tool(
            "edit_file",
            "Replace an exact piece of text in a file; it must match exactly once unless "
            "replace_all is set.",
            EditFileArgs,
            edit_file,
            permission_class="write",
            describe=_describe_edit,
            preview=_preview_edit,
        ),
    ]
