"""`[storage]` (STORE-1): one setting picks the store; a mistake is one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from soong_agent.adapters.config.toml_loader import load_config
from soong_agent.domain.config.storage_section import StorageConfig, storage_target
from soong_agent.ports.errors import ConfigError
from soong_agent.testing import write_minimal_config


def loaded(tmp_path: Path, extra: str) -> object:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir(exist_ok=True)
    write_minimal_config(home, extra)
    return load_config(home=home, project=project)


def refusal(tmp_path: Path, extra: str) -> str:
    with pytest.raises(ConfigError) as info:
        loaded(tmp_path, extra)
    return str(info.value)


def test_unset_is_the_sqlite_file_of_the_home(tmp_path: Path) -> None:
    config = loaded(tmp_path, "").config  # type: ignore[attr-defined]
    target = storage_target(config.storage, config.context.session_db_path)
    assert target.kind == "sqlite"
    assert target.sqlite_path == str(tmp_path / "home" / "sessions.sqlite")


def test_a_sqlite_url_becomes_the_session_database(tmp_path: Path) -> None:
    config = loaded(
        tmp_path, '[storage]\nurl = "sqlite:///${SOONG_AGENT_HOME}/other.sqlite"\n'
    ).config  # type: ignore[attr-defined]
    assert config.context.session_db_path == str(tmp_path / "home" / "other.sqlite")
    assert storage_target(config.storage, config.context.session_db_path).kind == "sqlite"


def test_a_postgresql_url_with_its_password_variable(tmp_path: Path) -> None:
    config = loaded(
        tmp_path,
        '[storage]\nurl = "postgresql://agents@db.internal:5432/soong?sslmode=require"\n'
        'password_env = "SOONG_DB_PASSWORD"\npool_size = 9\n',
    ).config  # type: ignore[attr-defined]
    target = storage_target(config.storage, config.context.session_db_path)
    assert (target.kind, target.password_env, target.pool_size) == (
        "postgresql",
        "SOONG_DB_PASSWORD",
        9,
    )
    assert target.label == "postgresql://agents@db.internal:5432/soong?sslmode=require"


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ('[storage]\nurl = "postgresql://agents:hunter2@db/soong"\n', "holds a password"),
        ('[storage]\nurl = "mysql://db/soong"\n', "expected a sqlite:///<path> or postgresql"),
        ('[storage]\nurl = "sqlite:///"\n', "names its file"),
        ('[storage]\npassword_env = "PW"\n', "only for a postgresql:// url"),
        (
            '[context]\nsession_db_path = "/tmp/x.sqlite"\n[storage]\nurl = "sqlite:////tmp/y"\n',
            "set only storage.url",
        ),
        ("[storage]\npool_size = 0\n", "storage.pool_size"),
    ],
)
def test_a_mistake_is_one_line_naming_the_key(tmp_path: Path, extra: str, says: str) -> None:
    message = refusal(tmp_path, extra)
    assert says in message and "\n" not in message
    assert "hunter2" not in message  # a password written in the file is never repeated


def test_the_section_alone_validates_like_the_file() -> None:
    assert StorageConfig().url is None
    with pytest.raises(ValueError, match="holds a password"):
        StorageConfig(url="postgresql://u:p@h/db")
