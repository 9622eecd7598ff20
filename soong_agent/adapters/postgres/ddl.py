"""The pieces the versioned schema is assembled from (see `schema`).

Every table of the PostgreSQL stores lives in the database schema `SCHEMA` (a namespace of its
own, so a database shared with an application never mixes its tables with ours). Each module of
this family that needs tables declares them as `Step`s, numbered: step N turns a schema of
version N-1 into version N, and is never changed once released (a change is a new step).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

SCHEMA = "soong_agent"
"""The database schema (namespace) holding every table of the stores."""


@dataclass(frozen=True, slots=True)
class Step:
    """One migration: the statements that take the schema from `version - 1` to `version`."""

    version: int
    name: str
    statements: tuple[str, ...]


def assemble(*groups: Iterable[Step]) -> tuple[Step, ...]:
    """The steps of every group in version order; ValueError unless they are numbered 1, 2, …
    without a gap or a repeat (two modules claiming one version)."""
    steps = sorted((s for group in groups for s in group), key=lambda s: s.version)
    found = [s.version for s in steps]
    if found != list(range(1, len(steps) + 1)):
        raise ValueError(f"schema steps must be numbered 1..{len(steps)} once each, not {found}")
    return tuple(steps)
