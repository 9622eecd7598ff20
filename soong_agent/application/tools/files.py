"""The file tools (TOOL-1): read_file, list_dir, glob, grep, write_file, edit_file."""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, Field

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.domain.permissions import directory_scope

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


async def read_file(args: ReadFileArgs, ctx: ToolContext) -> ToolOutput:
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


async def edit_file(args: EditFileArgs, ctx: ToolContext) -> ToolOutput:
    shown = ctx.fs.display_path(args.path)
    data = await ctx.fs.read_bytes(args.path)
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
    await ctx.fs.write_text(args.path, text.replace(args.old_string, args.new_string))
    return ToolOutput(f"edited {shown}: {count} replacement{'s' if count > 1 else ''}")


def file_tools() -> list[Tool]:
    """The built-in file tools."""
    return [
        Tool(
            "read_file",
            "Read a text file with line numbers; use offset/limit for parts of big files.",
            ReadFileArgs,
            read_file,
        ),
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
        ),
        Tool(
            "edit_file",
            "Replace an exact piece of text in a file; it must match exactly once unless "
            "replace_all is set.",
            EditFileArgs,
            edit_file,
            permission_class="write",
            describe=_describe_edit,
        ),
    ]
