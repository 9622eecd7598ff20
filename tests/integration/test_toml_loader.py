"""The TOML loader, the home and the project folder, on real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from soong_agent.adapters.config import LoadedConfig, load_config, resolve_home, resolve_project
from soong_agent.ports.errors import ConfigError, UsageError

REPO = Path(__file__).resolve().parents[2]

MINIMAL = """\
[model]
provider = "openai"
name = "gpt-4.1-mini"
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def write_config(home: Path, text: str) -> Path:
    path = home / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def load_error(home: Path, project: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(home=home, project=project)
    message = str(info.value)
    assert "\n" not in message
    return message


class TestLoadConfig:
    def test_missing_file(self, home: Path, project: Path) -> None:
        message = load_error(home, project)
        assert message.startswith(f"{home / 'config.toml'}: config file not found; create it")
        assert "docs/configuration.md" in message
        assert not (home / "config.toml").exists()  # nothing is generated

    def test_config_path_is_a_directory(self, home: Path, project: Path) -> None:
        (home / "config.toml").mkdir()
        assert "cannot read the config file" in load_error(home, project)

    def test_not_utf8(self, home: Path, project: Path) -> None:
        (home / "config.toml").write_bytes(b'[model]\nname = "\xff"\n')
        assert "not valid UTF-8" in load_error(home, project)

    def test_syntax_error_names_line_and_column(self, home: Path, project: Path) -> None:
        path = write_config(home, '[model]\nprovider = "openai"\nname = \n')
        message = load_error(home, project)
        assert message.startswith(f"{path}: TOML syntax error at line 3, column 8: ")

    def test_syntax_error_never_shows_the_line_text(self, home: Path, project: Path) -> None:
        write_config(home, '[model]\napi_key = "sk-live-secret\n')
        message = load_error(home, project)
        assert "TOML syntax error at line 2" in message
        assert "sk-live" not in message

    def test_unknown_key(self, home: Path, project: Path) -> None:
        path = write_config(home, MINIMAL + "timeout = 5\n")
        message = load_error(home, project)
        assert message.startswith(
            f"{path}: model.timeout: unknown key (known keys of [model]: provider, base_url, "
        )

    def test_unknown_section(self, home: Path, project: Path) -> None:
        write_config(home, MINIMAL + "[sandboxes]\nx = 1\n")
        assert ": sandboxes: unknown key (known top-level sections: " in load_error(home, project)

    def test_wrong_type(self, home: Path, project: Path) -> None:
        path = write_config(home, MINIMAL + 'timeout_ms = "600000"\n')
        assert load_error(home, project) == (
            f"{path}: model.timeout_ms: expected an integer ≥ 1, found '600000' (string)"
        )

    def test_bad_worker_entry(self, home: Path, project: Path) -> None:
        write_config(
            home,
            MINIMAL
            + '[[agents.worker_pools]]\npool_id = "p"\n'
            + '[[agents.worker_pools.workers]]\nagent_definition_id = "a"\n'
            + "[[agents.worker_pools.workers]]\nagent_definition_id = 3\n",
        )
        message = load_error(home, project)
        assert "agents.worker_pools[0].workers[1].agent_definition_id: expected a string" in message

    def test_unknown_profile_reference_fails_at_load(self, home: Path, project: Path) -> None:
        path = write_config(
            home,
            MINIMAL + '[model_overrides.small]\nname = "s"\n[compact]\nmodel_profile = "tiny"\n',
        )
        message = load_error(home, project)
        assert message.startswith(f"{path}: compact.model_profile: unknown model profile 'tiny'")
        assert "small" in message

    def test_minimal_config_gets_defaults_and_expanded_paths(
        self, home: Path, project: Path
    ) -> None:
        path = write_config(home, MINIMAL)
        loaded = load_config(home=home, project=project)
        assert isinstance(loaded, LoadedConfig)
        assert loaded.path == path
        assert loaded.home == home
        assert loaded.project == project
        assert loaded.raw == {"model": {"provider": "openai", "name": "gpt-4.1-mini"}}
        config = loaded.config
        assert config.model.name == "gpt-4.1-mini"
        assert config.model.timeout_ms == 600_000
        assert config.runtime.cancel_timeout_ms == 10_000
        assert config.context.session_db_path == f"{home}/sessions.sqlite"
        assert config.memory.memory_dir == f"{home}/memory"
        assert config.plan.default_dir == f"{project}/.soong-agent/plans"
        assert config.task.wal_dir == f"{project}/.soong-agent/tasks"
        assert config.tools.allowed_write_roots == [str(project)]
        assert [p.purpose for p in loaded.profiles] == [
            "main",
            "compact",
            "memory_extract",
            "memory_recall",
            "mcp_sampling",
        ]

    def test_env_vars_are_never_expanded(
        self, home: Path, project: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("SOME_DIR", "/expanded")
        write_config(home, MINIMAL + '[plan]\ndefault_dir = "$SOME_DIR/plans"\n')
        loaded = load_config(home=home, project=project)
        assert loaded.config.plan.default_dir == "$SOME_DIR/plans"

    def test_project_config_is_never_read(self, home: Path, project: Path) -> None:
        write_config(home, MINIMAL)
        (project / ".soong-agent").mkdir()
        (project / ".soong-agent" / "config.toml").write_text('[model]\nname = "evil"\n')
        assert load_config(home=home, project=project).config.model.name == "gpt-4.1-mini"

    @pytest.mark.parametrize("name", ["config.toml", "config.minimal.toml"])
    def test_shipped_examples_load(self, home: Path, project: Path, name: str) -> None:
        example = REPO / "examples" / name
        write_config(home, example.read_text(encoding="utf-8"))
        loaded = load_config(home=home, project=project)
        assert loaded.config.model.name


class TestResolveHome:
    def test_soong_agent_home_wins(self, tmp_path: Path) -> None:
        env = {"SOONG_AGENT_HOME": str(tmp_path / "h")}
        assert resolve_home(env, user_home="/users/ann") == tmp_path / "h"

    def test_falls_back_to_dot_soong_agent_in_the_user_home(self) -> None:
        assert resolve_home({}, user_home="/users/ann") == Path("/users/ann/.soong-agent")

    def test_empty_value_means_unset(self) -> None:
        env = {"SOONG_AGENT_HOME": ""}
        assert resolve_home(env, user_home="/users/ann") == Path("/users/ann/.soong-agent")

    def test_value_is_not_expanded(self) -> None:
        env = {"SOONG_AGENT_HOME": "/x/$USER"}
        assert resolve_home(env, user_home="/users/ann") == Path("/x/$USER")


class TestResolveProject:
    def test_none_is_cwd(self, project: Path) -> None:
        assert resolve_project(None, cwd=project) == project.resolve()

    def test_directory(self, project: Path, tmp_path: Path) -> None:
        assert resolve_project(str(project), cwd=tmp_path) == project.resolve()

    def test_relative_to_cwd(self, project: Path, tmp_path: Path) -> None:
        assert resolve_project("project", cwd=tmp_path) == project.resolve()

    def test_file_means_its_parent(self, project: Path, tmp_path: Path) -> None:
        (project / "notes.md").write_text("not read")
        assert resolve_project(str(project / "notes.md"), cwd=tmp_path) == project.resolve()

    def test_missing_path_is_a_usage_error_naming_it(self, tmp_path: Path) -> None:
        missing = tmp_path / "nowhere"
        with pytest.raises(UsageError, match=r"nowhere.*does not exist"):
            resolve_project(str(missing), cwd=tmp_path)

    def test_symlink_is_resolved(self, project: Path, tmp_path: Path) -> None:
        link = tmp_path / "link"
        os.symlink(project, link)
        resolved = resolve_project(str(link), cwd=tmp_path)
        assert resolved == project.resolve()
        assert not resolved.is_symlink()

    def test_broken_symlink_is_missing(self, tmp_path: Path) -> None:
        link = tmp_path / "dangling"
        os.symlink(tmp_path / "gone", link)
        with pytest.raises(UsageError, match="dangling"):
            resolve_project(str(link), cwd=tmp_path)


class TestShippedDocs:
    """docs/configuration.md and examples/ must stay true to the schema."""

    @staticmethod
    def schema_keys() -> set[str]:
        from pydantic import BaseModel

        from soong_agent.domain.config.schema import SoongConfig

        keys: set[str] = set()
        todo: list[type[BaseModel]] = [SoongConfig]
        while todo:
            model = todo.pop()
            for name, field in model.model_fields.items():
                keys.add(name)
                annotation = field.annotation
                for candidate in (annotation, *getattr(annotation, "__args__", ())):
                    for inner in (candidate, *getattr(candidate, "__args__", ())):
                        if isinstance(inner, type) and issubclass(inner, BaseModel):
                            todo.append(inner)
        return keys

    def test_every_key_is_documented(self) -> None:
        text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
        missing = sorted(k for k in self.schema_keys() if f"`{k}`" not in text)
        assert missing == []

    def test_every_key_appears_in_the_full_example(self) -> None:
        text = (REPO / "examples" / "config.toml").read_text(encoding="utf-8")
        missing = sorted(k for k in self.schema_keys() if k not in text)
        assert missing == []

    def test_full_example_is_all_defaults(self) -> None:
        import tomllib

        from soong_agent.domain.config.schema import SoongConfig

        raw = tomllib.loads((REPO / "examples" / "config.toml").read_text(encoding="utf-8"))
        config = SoongConfig.model_validate(raw)
        assert config.model_dump(exclude={"model"}) == SoongConfig().model_dump(exclude={"model"})
        expected_model = SoongConfig().model.model_copy(update={"name": config.model.name})
        assert config.model == expected_model

    def test_toml_blocks_in_the_docs_load(self, home: Path, project: Path) -> None:
        import re

        text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
        blocks = re.findall(r"```toml\n(.*?)```", text, flags=re.DOTALL)
        assert len(blocks) >= 4
        for block in blocks:
            write_config(home, block)
            load_config(home=home, project=project)
