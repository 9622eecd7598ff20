"""The SkillSource contract, over the fake (InMemorySkillSource) and the real HomeSkillSource
holding the same skills: sorted by name, each as the loader checks it, resources read only
when a skill lists them, a listed file that is gone is an OSError, copies handed out."""

from __future__ import annotations

from pathlib import Path

import pytest

from soong_agent.adapters.skills import HomeSkillSource
from soong_agent.domain.skills import check_metadata
from soong_agent.ports.skills import Skill, SkillSource
from soong_agent.testing import InMemorySkillSource

FILES = {
    "review.md": "---\nname: review\ndescription: Review a diff.\n---\nRead it all.\n",
    "pdf/SKILL.md": "---\nname: pdf\ndescription: Fill PDF forms.\n---\n# PDF\nUse forms.md.\n",
    "pdf/forms.md": "Form fields.",
    "pdf/gone.md": "deleted later",
    "alpha.md": "---\nname: alpha\ndescription: First.\n---\nA.\n",
}


def expected(skills_dir: Path) -> list[Skill]:
    pdf = skills_dir / "pdf"
    return [
        Skill("alpha", "First.", "A.", str(skills_dir / "alpha.md")),
        Skill(
            "pdf",
            "Fill PDF forms.",
            "# PDF\nUse forms.md.",
            str(pdf / "SKILL.md"),
            (str(pdf / "forms.md"), str(pdf / "gone.md")),
        ),
        Skill("review", "Review a diff.", "Read it all.", str(skills_dir / "review.md")),
    ]


@pytest.fixture(params=["fake", "real"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> SkillSource:
    skills_dir = tmp_path / "home" / "skills"
    if request.param == "fake":
        skills = expected(skills_dir)
        return InMemorySkillSource(
            reversed(skills), resources={str(skills_dir / "pdf" / "forms.md"): "Form fields."}
        )
    for name, text in FILES.items():
        path = skills_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    real = HomeSkillSource(tmp_path / "home")
    real.skills()
    (skills_dir / "pdf" / "gone.md").unlink()
    return real


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    return tmp_path / "home" / "skills"


def test_the_source_implements_the_port(source: SkillSource) -> None:
    assert isinstance(source, SkillSource)


def test_skills_come_sorted_by_name_as_the_loader_checks_them(
    source: SkillSource, skills_dir: Path
) -> None:
    skills = source.skills()
    assert skills == expected(skills_dir)
    for skill in skills:
        folder = Path(skill.source).parent
        name = folder.name if Path(skill.source).name == "SKILL.md" else Path(skill.source).stem
        assert check_metadata(
            {"name": skill.name, "description": skill.description}, expected_name=name
        ) == (skill.name, skill.description)
        assert skill.body.strip()
    assert source.warnings() == []


def test_what_is_handed_out_is_a_copy(source: SkillSource) -> None:
    source.skills().clear()
    source.warnings().append("x")
    assert len(source.skills()) == 3
    assert source.warnings() == []


def test_a_listed_resource_is_read(source: SkillSource, skills_dir: Path) -> None:
    assert source.read_resource(str(skills_dir / "pdf" / "forms.md")) == "Form fields."


@pytest.mark.parametrize(
    "path", ["pdf/SKILL.md", "review.md", "pdf/other.md", "forms.md", "/etc/hostname"]
)
def test_a_path_no_skill_lists_is_a_lookup_error(
    source: SkillSource, skills_dir: Path, path: str
) -> None:
    with pytest.raises(LookupError):
        source.read_resource(str(skills_dir / path))


def test_a_listed_resource_that_is_gone_is_an_os_error(
    source: SkillSource, skills_dir: Path
) -> None:
    with pytest.raises(FileNotFoundError):
        source.read_resource(str(skills_dir / "pdf" / "gone.md"))
