"""`soong-agent config check` (CFG-8): validate and show the resolved config with sources."""

from __future__ import annotations

import sys

from soong_agent.entrypoints.cli.common import EXIT_OK, guarded


def check_config(*, path: str | None) -> int:
    def go() -> int:
        from soong_agent.domain.config.report import render_config_report
        from soong_agent.domain.config.resolve import resolve_all_profiles
        from soong_agent.entrypoints.sdk import load

        loaded = load(path, None)
        report = render_config_report(
            config_path=str(loaded.path),
            home=str(loaded.home),
            project=str(loaded.project),
            config=loaded.config,
            raw=loaded.raw,
            profiles=list(loaded.profiles) or resolve_all_profiles(loaded.config),
        )
        sys.stdout.write(report.rstrip("\n") + "\n")
        sys.stdout.write("config OK\n")
        return EXIT_OK

    return guarded(go)
