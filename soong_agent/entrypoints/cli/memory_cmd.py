"""`soong-agent memory list|show|rm`: the memories in `memory.memory_dir`, read and removed
through the same writer the agent uses (the index is kept in step with the files).

What is printed goes through the runtime's secret redactor: a memory file edited by hand may
hold what the memory policy would have refused.
"""

from __future__ import annotations

import datetime as dt
import sys
from typing import TYPE_CHECKING

from soong_agent.entrypoints.cli.common import EXIT_OK, guarded

if TYPE_CHECKING:
    from soong_agent.ports.memory import MemoryStore
    from soong_agent.ports.secrets import SecretRedactor


def _when(when: dt.datetime) -> str:
    return when.astimezone().strftime("%Y-%m-%d %H:%M")


def _open(path: str | None) -> tuple[MemoryStore, SecretRedactor, str]:
    """The memory store of the config (`memory.memory_dir`), the redactor and the folder."""
    from soong_agent.adapters.memory import FileMemoryStore
    from soong_agent.entrypoints.containers import CliContainer
    from soong_agent.entrypoints.sdk import load

    loaded = load(path, None)
    folder = loaded.config.memory.memory_dir
    redactor: SecretRedactor = CliContainer(loaded=loaded).adapters.redactor()
    return FileMemoryStore(folder), redactor, folder


def _warn(problems: tuple[str, ...], redactor: SecretRedactor) -> None:
    for problem in problems:
        sys.stderr.write(f"soong-agent: warning: {redactor.redact(problem)}\n")


def memory_list(path: str | None) -> int:
    """One line per memory (category, name, updated, description); skipped files on stderr."""

    def go() -> int:
        store, redactor, folder = _open(path)
        catalogue = store.catalogue()
        _warn(catalogue.problems, redactor)
        if not catalogue.entries:
            sys.stdout.write(f"no memories yet ({folder})\n")
            return EXIT_OK
        width = max(len(e.name) for e in catalogue.entries)
        lines = [f"{len(catalogue.entries)} memories in {folder}:\n"]
        for e in catalogue.entries:
            description = redactor.redact(e.description)
            lines.append(f"{e.category:<9} {e.name:<{width}}  {_when(e.updated)}  {description}\n")
        sys.stdout.write("".join(lines))
        return EXIT_OK

    return guarded(go)


def memory_show(name: str, path: str | None) -> int:
    """A memory's fields and body; exit 2 when there is no memory of that name."""

    def go() -> int:
        store, redactor, folder = _open(path)
        memory = store.read(name)
        assert memory.created is not None and memory.updated is not None
        lines = [
            f"name:        {memory.name}",
            f"category:    {memory.category}",
            f"description: {memory.description}",
            f"created:     {_when(memory.created)}",
            f"updated:     {_when(memory.updated)}",
            f"file:        {folder}/{memory.category}/{memory.name}.md",
            "",
            memory.body,
        ]
        sys.stdout.write(redactor.redact("\n".join(lines)) + "\n")
        return EXIT_OK

    return guarded(go)


def memory_rm(name: str, path: str | None) -> int:
    """Remove a memory and update the index; exit 2 when there is no memory of that name."""

    def go() -> int:
        store, _, folder = _open(path)
        removed = store.delete(name)
        sys.stdout.write(f"removed memory {removed.name!r} ({folder}/{removed.path})\n")
        return EXIT_OK

    return guarded(go)


def memory_consolidate(path: str | None, dry_run: bool) -> int:
    """Consolidate the memories now (seed 002 "Dream"; the time and session gates do not apply,
    the lock does): print the plan (`dry_run`: nothing written) or what was applied."""

    def go() -> int:
        import asyncio

        from soong_agent.application.memory.consolidation import (
            ConsolidationSettings,
            MemoryConsolidation,
        )
        from soong_agent.entrypoints.containers import CliContainer
        from soong_agent.entrypoints.sdk import load
        from soong_agent.ports.errors import RunError

        loaded = load(path, None)
        adapters = CliContainer(loaded=loaded).adapters
        redactor: SecretRedactor = adapters.redactor()
        known = adapters.knowledge()
        folder = loaded.config.memory.memory_dir  # (shown in what is printed)
        if known.memory is None or known.policy is None:
            sys.stdout.write("memory is disabled (memory.enabled = false)\n")
            return EXIT_OK
        job = MemoryConsolidation(
            memory=known.memory,
            policy=known.policy,
            provider=adapters.extract_provider(),
            clock=adapters.clock(),
            settings=ConsolidationSettings(
                min_hours=loaded.config.memory.consolidate_min_hours,
                min_sessions=loaded.config.memory.consolidate_min_sessions,
            ),
            redactor=redactor,
        )

        async def work() -> list[str]:
            try:
                if dry_run:
                    plan = await job.plan()
                    head = f"plan for {folder} (dry run, nothing written):"
                    lines = plan.lines() or ["nothing to change"]
                    size = f"MEMORY.md: {plan.index_before[0]} -> {plan.index_after[0]} lines"
                    return [head, *(f"  {line}" for line in lines), size]
                report = await job.run(force=True)
                if report.skipped is not None:
                    return [f"not consolidated: {report.skipped}"]
                if report.failed is not None:
                    raise RunError(f"memory consolidation failed: {report.failed}")
                done = [f"  {step.line()}" for step in report.applied] or ["  nothing to change"]
                problems = [f"  warning: {p}" for p in report.problems]
                return [f"consolidated {folder}:", *done, *problems]
            finally:
                from soong_agent.entrypoints.closing import close_all

                await close_all(adapters.closables())

        lines = asyncio.run(work())
        sys.stdout.write(redactor.redact("\n".join(lines)) + "\n")
        return EXIT_OK

    return guarded(go)
