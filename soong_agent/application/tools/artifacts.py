"""The read_artifact tool (CTX-5): a byte range of a tool result that was stored whole."""

from __future__ import annotations

from pydantic import AliasChoices, Field

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.ports.artifacts import ArtifactStore

READ_DEFAULT_BYTES = 20_000
READ_MAX_BYTES = 100_000


class ReadArtifactArgs(ToolArgs):
    artifact_id: str = Field(
        min_length=1,
        validation_alias=AliasChoices("artifact_id", "id"),
        description="The artifact id named in a tool result (art_…).",
    )
    offset: int = Field(default=0, ge=0, description="First byte to return.")
    length: int = Field(
        default=READ_DEFAULT_BYTES,
        ge=1,
        le=READ_MAX_BYTES,
        description=f"How many bytes to return (at most {READ_MAX_BYTES}).",
    )


def _incomplete_tail(data: bytes) -> int:
    """How many bytes at the end of `data` start a UTF-8 character that is cut off."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # a continuation byte: look further back for the lead
            continue
        if byte >= 0xF0:
            need = 4
        elif byte >= 0xE0:
            need = 3
        elif byte >= 0xC0:
            need = 2
        else:
            need = 1
        return back if need > back else 0
    return 0


def read_artifact_tool(*, store: ArtifactStore) -> Tool:
    """The read_artifact tool over `store`; a session sees only its own artifacts."""

    async def read_artifact(args: ReadArtifactArgs, ctx: ToolContext) -> ToolOutput:
        info = await store.get(ctx.session_id, args.artifact_id)
        if info is None:
            return ToolOutput(
                f"unknown artifact {args.artifact_id!r} (not stored in this session)",
                is_error=True,
            )
        if args.offset >= info.size:
            return ToolOutput(
                f"[artifact {info.id} is {info.size} bytes; offset {args.offset} is past the end]"
            )
        try:
            data = await store.read(
                ctx.session_id, args.artifact_id, offset=args.offset, length=args.length
            )
        except FileNotFoundError:
            return ToolOutput(
                f"the content of artifact {args.artifact_id!r} is missing", is_error=True
            )
        end = args.offset + len(data)
        if end < info.size:  # leave a character cut at the end for the next read
            cut = _incomplete_tail(data)
            if cut < len(data):
                data = data[: len(data) - cut]
                end -= cut
        text = data.decode("utf-8", errors="replace")
        if end < info.size:
            footer = (
                f"[artifact {info.id}: bytes {args.offset}-{end} of {info.size}; "
                f"{info.size - end} more bytes, continue with offset={end}]"
            )
        else:
            footer = f"[artifact {info.id}: bytes {args.offset}-{end} of {info.size}; the end]"
        return ToolOutput(f"{text}\n{footer}")

    return Tool(
        "read_artifact",
        "Read part of a stored tool result (an artifact named in an earlier result) by byte "
        f"offset and length (default {READ_DEFAULT_BYTES}, at most {READ_MAX_BYTES} bytes).",
        ReadArtifactArgs,
        read_artifact,
    )
