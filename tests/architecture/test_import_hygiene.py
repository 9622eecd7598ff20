"""`import soong_agent` touches no file, env var or socket; the layer contracts hold.

The public API (names and signatures) is pinned in test_public_api.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import json, os, sys

    seen = []
    code_suffixes = (".py", ".pyc", ".so", ".pth")

    def hook(event, args):
        if event == "open":
            path = str(args[0])
            if not path.endswith(code_suffixes) and not os.path.isdir(path):
                seen.append(["open", path])
        elif event.startswith("socket."):
            seen.append([event, ""])

    class Env(dict):
        def __getitem__(self, key):
            seen.append(["env", key]); return super().__getitem__(key)
        def get(self, key, default=None):
            seen.append(["env", key]); return super().get(key, default)
        def __contains__(self, key):
            seen.append(["env", key]); return super().__contains__(key)

    os.environ = Env(os.environ)
    sys.addaudithook(hook)
    import importlib
    importlib.import_module(sys.argv[1])
    print(json.dumps(seen))
    """
)


def _io_during_import(module: str) -> list[list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, module], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_import_soong_agent_does_no_io() -> None:
    assert _io_during_import("soong_agent") == []


def test_importing_the_sdk_and_cli_reads_no_config_secret_or_socket() -> None:
    # third-party libraries (pydantic plugins, typer) do their own look-ups; ours must do none
    for module in ("soong_agent.entrypoints.sdk", "soong_agent.entrypoints.cli.main"):
        seen = _io_during_import(module)
        ours = [
            (kind, what)
            for kind, what in seen
            if kind.startswith("socket")
            or (kind == "env" and (what.startswith("SOONG") or "KEY" in what))
            or (kind == "open" and ("config.toml" in what or ".sqlite" in what))
        ]
        assert ours == [], module


def test_layer_contracts_hold() -> None:
    from pathlib import Path

    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
