"""The `soong-agent` console script. `--version` is answered before anything else is imported
(the package's version is a constant of `soong_agent`); every other command goes to the CLI
(`cli.main`, which imports typer)."""

from __future__ import annotations

import os
import sys


def main() -> None:
    if sys.argv[1:] in (["--version"], ["-V"]):
        from soong_agent import __version__

        sys.stdout.write(f"soong-agent {__version__}\n")
        sys.stdout.flush()
        os._exit(0)  # nothing was opened: no interpreter teardown to wait for
    from soong_agent.entrypoints.cli.main import main as cli

    cli()


if __name__ == "__main__":
    main()
