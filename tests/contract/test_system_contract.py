"""The small ports' contracts: Clock, IdGenerator, SecretSource, ContextSource; fake and real."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from soong_agent.adapters.system.clock import RandomIds, SystemClock
from soong_agent.adapters.system.context_source import FileContextSource
from soong_agent.adapters.system.secrets import EnvSecretSource
from soong_agent.ports.prompt import (
    ContextSource,
    EnvironmentInfo,
    InstructionDoc,
    SkippedInstruction,
)
from soong_agent.ports.system import Clock, IdGenerator, SecretSource
from soong_agent.testing import DictSecretSource, FixedClock, SequentialIds, StaticContextSource

# --- Clock -----------------------------------------------------------------------------------


@pytest.fixture(params=["fixed", "system"])
def clock(request: pytest.FixtureRequest) -> Clock:
    return FixedClock() if request.param == "fixed" else SystemClock()


def test_clock_implements_the_port(clock: Clock) -> None:
    assert isinstance(clock, Clock)


def test_now_is_seconds_since_the_epoch(clock: Clock) -> None:
    now = clock.now()
    assert isinstance(now, float)
    assert dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp() < now
    assert now < dt.datetime(2100, 1, 1, tzinfo=dt.UTC).timestamp()


def test_monotonic_never_goes_back(clock: Clock) -> None:
    readings = [clock.monotonic() for _ in range(1_000)]
    assert readings == sorted(readings)
    assert all(isinstance(r, float) for r in readings)


def test_the_fixed_clock_moves_only_forward() -> None:
    clock = FixedClock()
    before = (clock.now(), clock.monotonic())
    clock.advance(2.5)
    assert (clock.now(), clock.monotonic()) == (before[0] + 2.5, before[1] + 2.5)
    with pytest.raises(ValueError):
        clock.advance(-1)


# --- IdGenerator -----------------------------------------------------------------------------


@pytest.fixture(params=["sequential", "random"])
def ids(request: pytest.FixtureRequest) -> IdGenerator:
    return SequentialIds() if request.param == "sequential" else RandomIds()


def test_ids_implement_the_port(ids: IdGenerator) -> None:
    assert isinstance(ids, IdGenerator)


def test_ids_are_unique_and_start_with_their_prefix(ids: IdGenerator) -> None:
    made = [ids.new_id(prefix) for prefix in ("ses", "run", "msg") for _ in range(500)]
    assert len(set(made)) == len(made)
    for value in made:
        assert re.fullmatch(r"(ses|run|msg)_[0-9a-f]+", value), value


def test_ids_of_one_prefix_sort_in_creation_order_within_a_second() -> None:
    # only the fake promises a strict order; the real one orders by second, then randomly
    ids = SequentialIds()
    made = [ids.new_id("msg") for _ in range(20)]
    assert made == sorted(made)


# --- SecretSource ----------------------------------------------------------------------------


@dataclass
class SecretKit:
    source: SecretSource
    set: Callable[[str, str | None], None]  # change the world the source reads from


@pytest.fixture(params=["dict", "env"])
def secrets(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> SecretKit:
    if request.param == "dict":
        fake = DictSecretSource()
        return SecretKit(fake, fake.set)

    def set_env(name: str, value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)

    return SecretKit(EnvSecretSource(), set_env)


def test_secrets_implement_the_port(secrets: SecretKit) -> None:
    assert isinstance(secrets.source, SecretSource)


def test_a_set_variable_is_read(secrets: SecretKit) -> None:
    secrets.set("SOONG_CONTRACT_KEY", "sk-123")
    assert secrets.source.get("SOONG_CONTRACT_KEY") == "sk-123"


def test_unset_and_empty_variables_are_none(secrets: SecretKit) -> None:
    secrets.set("SOONG_CONTRACT_UNSET", None)
    secrets.set("SOONG_CONTRACT_EMPTY", "")
    assert secrets.source.get("SOONG_CONTRACT_UNSET") is None
    assert secrets.source.get("SOONG_CONTRACT_EMPTY") is None


def test_values_are_read_at_each_call_not_at_construction(secrets: SecretKit) -> None:
    assert secrets.source.get("SOONG_CONTRACT_LATE") is None
    secrets.set("SOONG_CONTRACT_LATE", "now")
    assert secrets.source.get("SOONG_CONTRACT_LATE") == "now"
    secrets.set("SOONG_CONTRACT_LATE", None)
    assert secrets.source.get("SOONG_CONTRACT_LATE") is None


# --- ContextSource ---------------------------------------------------------------------------

HOME_DOC = "Home rules: be brief."
PROJECT_DOC = "Project rules: run the tests."
PKG_CLAUDE = "pkg: keep the API stable."
PKG_AGENTS = "pkg: type everything."
SUB_AGENTS = "pkg/sub: no I/O here."
SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- contract-secret"
ENV_SECRET = "API_TOKEN=contract-env-secret"


def _static(_home: Path, project: Path) -> ContextSource:
    return StaticContextSource(
        [
            InstructionDoc("${SOONG_AGENT_HOME}/AGENTS.md", HOME_DOC),
            InstructionDoc("<project>/CLAUDE.md", PROJECT_DOC),
        ],
        EnvironmentInfo(cwd=str(project), platform="test", date="2026-01-01"),
        folders={
            "pkg": {"AGENTS.md": PKG_AGENTS, "CLAUDE.md": PKG_CLAUDE},
            "pkg/sub": {"AGENTS.md": SUB_AGENTS},
        },
        skipped=[
            SkippedInstruction("<project>/AGENTS.md", "it leads outside the project"),
            SkippedInstruction("<project>/pkg/sub/CLAUDE.md", "a sensitive path", "pkg/sub"),
        ],
    )


def _files(home: Path, project: Path) -> ContextSource:
    (home / "AGENTS.md").write_text(HOME_DOC + "\n", encoding="utf-8")
    (home / "CLAUDE.md").write_text("  \n", encoding="utf-8")  # empty: skipped
    (project / "CLAUDE.md").write_text(PROJECT_DOC, encoding="utf-8")
    (project / "pkg" / "sub").mkdir(parents=True)
    (project / "pkg" / "AGENTS.md").write_text(PKG_AGENTS, encoding="utf-8")
    (project / "pkg" / "CLAUDE.md").write_text(PKG_CLAUDE, encoding="utf-8")
    (project / "pkg" / "sub" / "AGENTS.md").write_text(SUB_AGENTS + "\n", encoding="utf-8")
    (project / "pkg" / "x.py").write_text("x = 1\n", encoding="utf-8")
    (project / "empty").mkdir()
    (project / "empty" / "AGENTS.md").write_text("\n", encoding="utf-8")  # empty: skipped
    (home / "outside").mkdir()
    (home / "outside" / "AGENTS.md").write_text("not the project's", encoding="utf-8")
    # what a repository may ship: instruction files linked to a key outside it and to .env
    (home / "outside" / "id_rsa").write_text(SECRET, encoding="utf-8")
    (project / "AGENTS.md").symlink_to(home / "outside" / "id_rsa")
    (project / ".env").write_text(ENV_SECRET, encoding="utf-8")
    (project / "pkg" / "sub" / "CLAUDE.md").symlink_to(project / ".env")
    return FileContextSource(home=home, project=project, today=dt.date(2026, 1, 1))


@pytest.fixture(params=["static", "files"])
def context(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ContextSource, Path]]:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    make = _static if request.param == "static" else _files
    yield make(home, project), project


def test_context_implements_the_port(context: tuple[ContextSource, Path]) -> None:
    assert isinstance(context[0], ContextSource)


def test_instructions_come_home_first_and_never_empty(context: tuple[ContextSource, Path]) -> None:
    source, _ = context
    docs = source.instructions()
    assert [d.text for d in docs] == [HOME_DOC, PROJECT_DOC]
    assert docs[0].source.startswith("${SOONG_AGENT_HOME}/")
    assert docs[1].source.startswith("<project>/")


def test_instructions_are_a_fresh_list(context: tuple[ContextSource, Path]) -> None:
    source, _ = context
    source.instructions().clear()
    assert len(source.instructions()) == 2


def test_environment_names_the_project_and_an_iso_date(context: tuple[ContextSource, Path]) -> None:
    source, project = context
    env = source.environment()
    assert env.cwd == str(project)
    assert dt.date.fromisoformat(env.date) == dt.date(2026, 1, 1)
    assert env.platform


def test_a_folder_gives_its_claude_then_agents_file_labelled(
    context: tuple[ContextSource, Path],
) -> None:
    source, _ = context
    assert source.folder_instructions("pkg") == [
        InstructionDoc("<project>/pkg/CLAUDE.md", PKG_CLAUDE, folder="pkg"),
        InstructionDoc("<project>/pkg/AGENTS.md", PKG_AGENTS, folder="pkg"),
    ]
    assert source.folder_instructions("pkg/sub") == [
        InstructionDoc("<project>/pkg/sub/AGENTS.md", SUB_AGENTS, folder="pkg/sub")
    ]


@pytest.mark.parametrize(
    "folder", ["empty", "missing", "pkg/x.py", "../home/outside", "/etc", "pkg/../../home/outside"]
)
def test_a_folder_without_files_or_outside_the_project_gives_none(
    context: tuple[ContextSource, Path], folder: str
) -> None:
    source, _ = context
    assert source.folder_instructions(folder) == []


def test_nothing_is_skipped_before_a_read(context: tuple[ContextSource, Path]) -> None:
    source, _ = context
    assert source.skipped() == []
    assert source.skipped("pkg/sub") == []


def test_a_project_file_leading_out_or_to_a_sensitive_path_is_skipped_and_named(
    context: tuple[ContextSource, Path],
) -> None:
    source, _ = context
    docs = source.instructions()
    assert [d.text for d in docs] == [HOME_DOC, PROJECT_DOC]
    (skip,) = source.skipped()
    assert (skip.source, skip.folder) == ("<project>/AGENTS.md", None)
    assert skip.reason.strip()
    assert skip.message.startswith("<project>/AGENTS.md ")
    assert source.skipped("pkg/sub") == []  # not read yet

    assert [d.text for d in source.folder_instructions("pkg/sub")] == [SUB_AGENTS]
    (sub,) = source.skipped("pkg/sub")
    assert (sub.source, sub.folder) == ("<project>/pkg/sub/CLAUDE.md", "pkg/sub")
    assert source.folder_instructions("pkg") and source.skipped("pkg") == []
    assert source.skipped("../elsewhere") == []
    everything = [*source.instructions(), *source.folder_instructions("pkg/sub")]
    assert not any(SECRET in d.text or ENV_SECRET in d.text for d in everything)


def test_the_static_source_refuses_a_skipped_file_that_is_also_a_doc() -> None:
    with pytest.raises(ValueError):
        StaticContextSource(
            [InstructionDoc("<project>/AGENTS.md", "x")],
            skipped=[SkippedInstruction("<project>/AGENTS.md", "a link")],
        )
    with pytest.raises(ValueError):
        StaticContextSource(skipped=[SkippedInstruction("<project>/AGENTS.md", " ")])


def test_the_files_source_does_not_follow_a_symlink_out_of_the_project(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    (home / "outside").mkdir(parents=True)
    (home / "outside" / "AGENTS.md").write_text("secret instructions", encoding="utf-8")
    (project / "real").mkdir(parents=True)
    (project / "link").symlink_to(home / "outside")
    (project / "real" / "AGENTS.md").symlink_to(home / "outside" / "AGENTS.md")
    source = FileContextSource(home=home, project=project)
    assert source.folder_instructions("link") == []
    assert source.folder_instructions("real") == []


def test_the_static_source_refuses_bad_folders_and_names() -> None:
    with pytest.raises(ValueError):
        StaticContextSource(folders={"../up": {"AGENTS.md": "x"}})
    with pytest.raises(ValueError):
        StaticContextSource(folders={"pkg": {"README.md": "x"}})
    with pytest.raises(ValueError):
        StaticContextSource(folders={"pkg": {"AGENTS.md": " "}})


def test_the_static_source_refuses_an_empty_doc() -> None:
    with pytest.raises(ValueError):
        StaticContextSource([InstructionDoc("<project>/AGENTS.md", "  ")])
