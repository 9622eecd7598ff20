"""Start-up imports only what a command needs (issue 10): each check runs in a fresh process
and looks at `sys.modules`, so it guards the saving without measuring time."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

IMPORTED_AFTER = textwrap.dedent(
    """
    import json, sys
    exec(sys.argv[1])
    print(json.dumps(sorted(sys.modules)))
    """
)

# Runs the console script's `main()` with `sys.argv[1:]`; its exit (`os._exit`) first prints
# the modules imported by then.
CLI_PROBE = textwrap.dedent(
    """
    import json, os, sys

    real_exit = os._exit

    def compiled(module, *getters):
        # how many of a module's patterns compiled at first use have been compiled
        found = sys.modules.get(module)
        return sum(getattr(found, g).cache_info().currsize for g in getters) if found else 0

    def report_and_exit(code):
        loader = sys.modules.get("pydantic.plugin._loader")
        print(json.dumps({
            "modules": sorted(sys.modules),
            "plugin_loader_file": getattr(loader, "__file__", None),
            "sensitive_rules_compiled": compiled(
                "soong_agent.domain.permissions.sensitive", "_below_rule"
            ),
            "memory_patterns_compiled": compiled(
                "soong_agent.domain.memory.rules",
                "_structure", "_path_line", "_signatures", "_progress", "_branches", "_fixes",
                "_credential",
            ) + compiled("soong_agent.domain.memory.policy", "_category_signs"),
        }))
        sys.stdout.flush()
        real_exit(code)

    os._exit = report_and_exit
    sys.argv = ["soong-agent", *sys.argv[1:]]
    from soong_agent.entrypoints.cli.main import main
    main()
    """
)


def _imported_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", IMPORTED_AFTER, code], capture_output=True, text=True, check=True
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _under(modules: set[str], *packages: str) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def _cli(args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", CLI_PROBE, *args],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_importing_the_cli_loads_typer_only() -> None:
    modules = _imported_after("import soong_agent.entrypoints.cli.main")
    heavy = ("pydantic", "rich", "httpx", "dependency_injector", "sqlalchemy", "sqlmodel")
    assert _under(modules, *heavy) == []
    assert _under(modules, "soong_agent.application", "soong_agent.adapters") == []


def test_the_sdk_import_loads_no_runtime_library() -> None:
    modules = _imported_after("from soong_agent import AgentRuntime")
    heavy = ("typer", "rich", "httpx", "dependency_injector", "sqlalchemy", "sqlmodel", "pydantic")
    assert _under(modules, *heavy) == []


def test_dependency_injector_loads_without_wiring_and_wiring_still_works() -> None:
    modules = _imported_after("import soong_agent.entrypoints.di")
    assert "dependency_injector.containers" in modules
    assert _under(modules, "dependency_injector.wiring", "fastapi", "starlette", "werkzeug") == []
    # Container.wire() imports the real wiring module at its first call and wires through it
    code = textwrap.dedent(
        """
        import sys, types
        from soong_agent.entrypoints.di import containers, providers
        from dependency_injector.wiring import Provide, inject

        class Box(containers.DeclarativeContainer):
            answer = providers.Object(42)

        module = types.ModuleType("wired_here")
        exec(
            "from dependency_injector.wiring import Provide, inject\\n"
            "@inject\\n"
            "def read(answer=Provide['answer']):\\n"
            "    return answer\\n",
            module.__dict__,
        )
        sys.modules["wired_here"] = module
        box = Box()
        box.wire(modules=["wired_here"])
        assert module.read() == 42, module.read()
        box.unwire()
        """
    )
    modules = _imported_after(code)
    assert "dependency_injector.wiring" in modules


def test_an_sdk_application_keeps_dependency_injectors_yaml_support(tmp_path: Path) -> None:
    # only the command line keeps PyYAML out of dependency-injector's providers
    config = tmp_path / "app.yml"
    config.write_text("answer: 42\n")
    code = textwrap.dedent(
        f"""
        from soong_agent import AgentRuntime
        from soong_agent.entrypoints.containers import SdkContainer
        from dependency_injector import providers

        settings = providers.Configuration()
        settings.from_yaml({str(config)!r})
        assert settings.answer() == 42, settings()
        """
    )
    assert "yaml" in _imported_after(code)


def test_run_imports_only_what_its_first_request_needs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]  # nobody listens there once closed: the call fails
    (home / "config.toml").write_text(
        f'[model]\nbase_url = "http://127.0.0.1:{port}/v1"\nname = "m"\napi_key_env = ""\n'
        "[model.retry]\nmax_attempts = 1\n"
    )
    env = {"SOONG_AGENT_HOME": str(home), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    seen = _cli(["run", "--path", str(tmp_path), "hello"], env)
    modules = set(seen["modules"])
    assert "httpcore" in modules  # the request was made
    assert (
        _under(
            modules,
            "dependency_injector.wiring",
            "soong_agent.adapters.web.fetcher",  # until the first web_fetch
            "httpx._main",
            "rich",
            "frontmatter",  # until a memory file is read or written
            "soong_agent.application.teams",  # until an orchestrator run (every team module)
            "soong_agent.application.tools.team",  # (the lead's tools: ditto)
            "soong_agent.ports.mailbox",
            "yaml",  # until a skill, agent or memory file is parsed (not by dependency-injector)
            "opentelemetry",  # only with [telemetry] enabled (OBS-1)
            "soong_agent.adapters.telemetry",
        )
        == []
    )
    # the sandbox's sensitive paths compile their patterns at the first path checked, the
    # memory rules at the first memory reviewed: a question that reads no file needs neither
    assert seen["sensitive_rules_compiled"] == 0
    assert seen["memory_patterns_compiled"] == 0
    from soong_agent.entrypoints.cli.pydantic_plugins import no_plugins_installed

    if no_plugins_installed():  # then pydantic was told so and did not search
        assert seen["plugin_loader_file"] is None


def test_help_does_not_import_rich_or_the_runtime() -> None:
    modules = set(_cli(["--help"])["modules"])
    assert _under(modules, "rich", "dependency_injector", "httpx", "soong_agent.application") == []


def test_file_adapters_load_no_yaml_or_package_metadata() -> None:
    """PyYAML and python-frontmatter load when a skill, agent or memory file is parsed, and
    `importlib.metadata` when `rg` is looked for in the ripgrep wheel's file record: not when
    these adapters are imported (a run that reads no such file never needs them)."""
    modules = _imported_after(
        "import soong_agent.adapters.sandbox, soong_agent.adapters.skills, "
        "soong_agent.adapters.agents, soong_agent.adapters.memory"
    )
    assert _under(modules, "yaml", "frontmatter", "importlib.metadata") == []


def test_front_matter_is_parsed_once_a_file_is_read(tmp_path: Path) -> None:
    """The deferred imports still parse: a skill, an agent and a memory file, each in a
    fresh process."""
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "greet.md").write_text("---\nname: greet\ndescription: Says hello.\n---\nHi.\n")
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "helper.md").write_text(
        "---\nid: helper\ndescription: Helps.\ntools: []\n---\nHelp.\n"
    )
    code = textwrap.dedent(
        f"""
        import datetime as dt
        from pathlib import Path
        from soong_agent.adapters.agents.loader import load_agent_files
        from soong_agent.adapters.memory import codec
        from soong_agent.adapters.skills.loader import load_skills
        from soong_agent.ports.memory import Memory

        skills, warnings = load_skills(Path({str(skills)!r}))
        assert [s.name for s in skills] == ["greet"] and not warnings, (skills, warnings)
        agents, warnings = load_agent_files(Path({str(agents)!r}))
        assert [a.id for a in agents] == ["helper"] and not warnings, (agents, warnings)
        when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        memory = Memory(name="tabs", description="Tabs.", category="user", body="Uses tabs.")
        text = codec.dump(memory, created=when, updated=when)
        again = codec.load(text, path="m.md", category="user", name="tabs", fallback=when)
        assert again.body == "Uses tabs.", again
        """
    )
    modules = _imported_after(code)
    assert "yaml" in modules
    assert "frontmatter" in modules


def test_a_run_with_its_database_made_needs_no_package_metadata(tmp_path: Path) -> None:
    """Once the session database exists (a first run made it), a run's start reads no
    distribution metadata: `importlib.metadata` (with csv and zipfile) stays unloaded."""
    home = tmp_path / "home"
    home.mkdir()
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    (home / "config.toml").write_text(
        f'[model]\nbase_url = "http://127.0.0.1:{port}/v1"\nname = "m"\napi_key_env = ""\n'
        "[model.retry]\nmax_attempts = 1\n"
    )
    env = {"SOONG_AGENT_HOME": str(home), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    _cli(["run", "--path", str(tmp_path), "hello"], env)  # makes the database
    seen = _cli(["run", "--path", str(tmp_path), "hello again"], env)
    modules = set(seen["modules"])
    assert "httpcore" in modules  # the request was made
    assert _under(modules, "importlib.metadata", "frontmatter") == []
