"""The shell analysis port: what simple commands a shell command line would run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One command a shell line runs: its words (literal text; `None` for a word that is not
    literal, e.g. `$VAR` or `$(…)`), the files it redirects output to, and the files it reads
    through input redirections (`< file`); `?` stands for a target that is not literal."""

    words: tuple[str | None, ...]
    writes_to: tuple[str, ...] = ()
    reads_from: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ShellAnalysis:
    """Every simple command of a command line, nested ones included.

    Commands run through `$(…)`, backticks, process substitution, `eval`, `sh -c`/`bash -c`,
    `xargs` and `find -exec` appear as simple commands of their own. `ok` is False when the line
    could not be fully understood (syntax error, a construct the analyser does not model, a
    non-literal command name); `problems` then says what.
    """

    commands: tuple[SimpleCommand, ...]
    ok: bool = True
    problems: tuple[str, ...] = field(default_factory=tuple)


@runtime_checkable
class ShellAnalyzer(Protocol):
    """Parses shell command lines (bash syntax)."""

    def analyze(self, command: str) -> ShellAnalysis:
        """The simple commands of `command`; never raises for bad input."""
        ...
