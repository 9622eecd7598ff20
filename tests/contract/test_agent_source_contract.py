"""The AgentSource contract (AGT-1), over the fake (InMemoryAgentSource) and the real
HomeAgentSource holding the same definitions: the built-ins and the files, sorted by id (no
file takes a built-in's id), each as the rules check it, `get` by id, copies handed out."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from soong_agent.adapters.agents import HomeAgentSource
from soong_agent.domain.agents import BUILTINS, check_definition, content_hash
from soong_agent.ports.agents import AgentDefinition, AgentSource
from soong_agent.testing import InMemoryAgentSource

FILES = {
    "reviewer.md": (
        "---\nid: reviewer\ndescription: Reviews a diff.\ntools: [read_file, grep]\n"
        "max_turns: 5\n---\nYou review.\n"
    ),
    "scout.md": (
        "---\nid: scout\ndescription: My scout.\ntools: [read_file]\n"
        "permission_mode: plan\nskills: [notes]\n---\n"
    ),
}


def expected(agents_dir: Path) -> list[AgentDefinition]:
    mine = [
        AgentDefinition(
            id="reviewer",
            description="Reviews a diff.",
            tools=("read_file", "grep"),
            prompt="You review.",
            source=str(agents_dir / "reviewer.md"),
            content_hash=content_hash(FILES["reviewer.md"]),
            max_turns=5,
        ),
        AgentDefinition(
            id="scout",
            description="My scout.",
            tools=("read_file",),
            prompt="",
            source=str(agents_dir / "scout.md"),
            content_hash=content_hash(FILES["scout.md"]),
            permission_mode="plan",
            skills=("notes",),
        ),
    ]
    return sorted([*BUILTINS, *mine], key=lambda d: d.id)


@pytest.fixture
def agents_dir(tmp_path: Path) -> Path:
    return tmp_path / "home" / "agents"


@pytest.fixture(params=["fake", "real"])
def source(request: pytest.FixtureRequest, agents_dir: Path) -> AgentSource:
    if request.param == "fake":
        return InMemoryAgentSource(d for d in reversed(expected(agents_dir)) if not d.builtin)
    agents_dir.mkdir(parents=True)
    for name, text in FILES.items():
        (agents_dir / name).write_text(text, encoding="utf-8")
    return HomeAgentSource(agents_dir.parent)


def test_the_source_implements_the_port(source: AgentSource) -> None:
    assert isinstance(source, AgentSource)


def test_definitions_are_the_builtins_and_the_files(source: AgentSource, agents_dir: Path) -> None:
    definitions = source.definitions()
    assert definitions == expected(agents_dir)
    for definition in definitions:
        check_definition(definition)
    assert source.warnings() == []


def test_get_by_id(source: AgentSource, agents_dir: Path) -> None:
    for definition in expected(agents_dir):
        assert source.get(definition.id) == definition
    assert source.get("nope") is None
    assert source.get("") is None


def test_copies_are_handed_out(source: AgentSource) -> None:
    source.definitions().clear()
    source.warnings().append("x")
    assert len(source.definitions()) == len(expected(Path("/x"))) and source.warnings() == []


def test_the_fake_refuses_what_the_loader_never_produces(agents_dir: Path) -> None:
    good = next(d for d in expected(agents_dir) if d.id == "reviewer")
    replace = dataclasses.replace
    bad = [
        replace(good, id="Bad"),
        replace(good, source="reviewer.md"),
        replace(good, source=str(agents_dir / "other.md")),
        replace(good, source="built-in"),
        replace(good, content_hash="abc"),
        replace(good, permission_mode="yolo"),
        replace(good, description="two\nlines"),
        replace(good, prompt="\nx"),
        replace(good, id="standard", source=str(agents_dir / "standard.md")),
    ]
    for definition in bad:
        with pytest.raises(ValueError):
            InMemoryAgentSource([definition])
    with pytest.raises(ValueError, match="two agent definitions"):
        InMemoryAgentSource([good, good])
    assert InMemoryAgentSource(builtins=False).definitions() == []
