"""The base of every `config.toml` table (CFG-5) and the default factory of a table."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Base of every config table: unknown keys are errors, values are validated strictly."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# The default factories below are plain functions: pydantic reads each factory's signature
# when it builds a model, and for `list`, `dict` or a model class that costs ~0.5–1 ms apiece
# (a builtin's signature is parsed from text with the tokenizer; a model's is generated).
SectionT = TypeVar("SectionT", bound=Section)


def defaults(section: type[SectionT]) -> Callable[[], SectionT]:
    """A default factory: `section` with every key at its default."""

    def make() -> SectionT:
        return section()

    return make
