"""`soong-agent config check` (CFG-8): validate and show the resolved config with sources, and
reach the store `[storage]` names (STORE-1: the server's version and the schema's, or one line
saying why it cannot be used; nothing is created)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from soong_agent.entrypoints.cli.common import EXIT_OK, EXIT_USAGE, fail, guarded

if TYPE_CHECKING:
    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.domain.config.resolve import ResolvedProfile


def check_config(*, path: str | None) -> int:
    def go() -> int:
        from soong_agent.domain.config.report import render_config_report
        from soong_agent.domain.config.resolve import resolve_all_profiles
        from soong_agent.entrypoints.cli.storage_cmd import storage_line
        from soong_agent.entrypoints.sdk import load

        loaded = load(path, None)
        profiles = list(loaded.profiles) or resolve_all_profiles(loaded.config)
        report = render_config_report(
            config_path=str(loaded.path),
            home=str(loaded.home),
            project=str(loaded.project),
            config=loaded.config,
            raw=loaded.raw,
            profiles=profiles,
        )
        sys.stdout.write(report.rstrip("\n") + "\n")
        lines, problems = _budget_lines(loaded, profiles)
        storage, storage_problem = storage_line(loaded)
        lines += ["", storage]
        problems += [storage_problem] if storage_problem else []
        sys.stdout.write("\n".join(lines) + "\n")
        if problems:
            for problem in problems:
                fail(problem, EXIT_USAGE)
            return EXIT_USAGE
        sys.stdout.write("config OK\n")
        return EXIT_OK

    return guarded(go)


def _budget_lines(
    loaded: LoadedConfig, profiles: list[ResolvedProfile]
) -> tuple[list[str], list[str]]:
    """The effective context budget of each profile (CTX-4), and why a window cannot work.

    The main model's budget is fitted to the system prompt a run would send (tools and
    instruction chain, counted exactly); the other purposes send their own short prompts.
    """
    from soong_agent.domain.budget import compute_budget
    from soong_agent.entrypoints.containers import CliContainer
    from soong_agent.ports.errors import ConfigError

    config = loaded.config
    lines = ["", "# Context budgets, fitted to each profile's context_window (tokens)"]
    problems: list[str] = []
    for profile in profiles:
        window = profile.model.context_window
        try:
            if profile.purpose == "main":
                service = CliContainer(loaded=loaded).services.run_service()
                budget, system = service.fitted_budget()
                note = f"; system prompt measured at {system}"
            else:
                budget = compute_budget(
                    context_window=window, context=config.context, compact=config.compact
                )
                note = ""
        except (ConfigError, ValueError) as exc:
            message = str(exc).removeprefix("context budget of the model: ")
            lines.append(f"{profile.purpose}: {message}")
            problems.append(
                f"{loaded.path}: profile {profile.purpose} ({profile.source}): {message}"
            )
            continue
        lines.append(f"{profile.purpose}: {budget.describe()}{note}")
    return lines, problems
