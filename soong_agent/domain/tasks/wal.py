"""A task WAL's text as records, and a record as one line (TASK-1).

Every record is written as one whole line ending in a newline, so an unterminated last line is
a write a crash cut short: it is ignored and reported (`torn`). A line that is terminated but
is not a record is corruption: reading stops there, with its line number.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import TypeAdapter, ValidationError

from soong_agent.ports.tasks import TaskRecord

RECORD: TypeAdapter[TaskRecord] = TypeAdapter(TaskRecord)


@dataclass(frozen=True, slots=True)
class ParsedWal:
    """`records` up to the first bad line; `valid_bytes`: the length of the prefix they fill
    (where a writer truncates a torn tail before appending)."""

    records: list[TaskRecord]
    problems: list[str] = field(default_factory=list)
    torn: bool = False
    corrupt_line: int | None = None
    valid_bytes: int = 0


def encode(record: TaskRecord) -> bytes:
    """One record as one line (compact JSON; a newline inside a string is escaped)."""
    return record.model_dump_json().encode("utf-8") + b"\n"


def decode(line: bytes) -> TaskRecord:
    """One line as a record; ValueError saying why not."""
    try:
        return RECORD.validate_json(line)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        raise ValueError(f"{where}: {first['msg']}") from exc


def parse(data: bytes, *, first_line: int = 1) -> ParsedWal:
    """The records of a WAL's bytes, stopping at a corrupt line; a torn last line ignored.
    `first_line`: the line number of the first line of `data` (a tail read after a prefix)."""
    records: list[TaskRecord] = []
    offset = 0
    number = first_line - 1
    while offset < len(data):
        number += 1
        end = data.find(b"\n", offset)
        if end < 0:
            return ParsedWal(
                records,
                [f"line {number}: torn last line ignored ({len(data) - offset} bytes)"],
                torn=True,
                valid_bytes=offset,
            )
        line = data[offset:end]
        try:
            records.append(decode(line))
        except ValueError as exc:
            return ParsedWal(
                records,
                [f"line {number}: corrupt record, reading stopped: {exc}"],
                corrupt_line=number,
                valid_bytes=offset,
            )
        offset = end + 1
    return ParsedWal(records, valid_bytes=offset)
