"""The home's skills read from real files: both layouts, resources, files skipped with the
reason, a project's skills never read, load_skill over the real source, and `skills list`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from soong_agent.adapters.skills import HomeSkillSource, load_skills
from soong_agent.adapters.skills.loader import MAX_RESOURCE_BYTES, MAX_RESOURCES
from soong_agent.application.tools.base import ToolContext
from soong_agent.application.tools.skills import LoadSkillArgs, skills_tool
from soong_agent.entrypoints.cli.skills_cmd import report_skills, skills_list
from soong_agent.testing import InMemoryFileSystem, write_minimal_config


def skill_text(name: str, description: str = "", body: str = "Do the thing.") -> str:
    return f"---\nname: {name}\ndescription: {description or f'Use for {name}.'}\n---\n{body}\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def ctx() -> ToolContext:
    return ToolContext(fs=InMemoryFileSystem(), session_id="s1", run_id="r1")


def test_both_layouts_load_with_the_folder_skills_resources(home: Path) -> None:
    skills_dir = home / "skills"
    write(skills_dir / "review.md", skill_text("review", body="# Review\nRead the diff."))
    write(skills_dir / "pdf" / "SKILL.md", skill_text("pdf", "Fill PDF forms."))
    write(skills_dir / "pdf" / "forms.md", "fields")
    write(skills_dir / "pdf" / "scripts" / "fill.py", "print('x')")
    write(skills_dir / "pdf" / ".hidden", "not listed")
    write(skills_dir / "pdf" / ".git" / "config", "not listed")
    write(skills_dir / "notes.txt", "not a skill")
    source = HomeSkillSource(home)
    skills = source.skills()
    assert [s.name for s in skills] == ["pdf", "review"]
    pdf, review = skills
    assert pdf.description == "Fill PDF forms."
    assert pdf.body == "Do the thing."
    assert pdf.source == str(skills_dir / "pdf" / "SKILL.md")
    assert pdf.folder == str(skills_dir / "pdf")
    assert pdf.resources == (
        str(skills_dir / "pdf" / "forms.md"),
        str(skills_dir / "pdf" / "scripts" / "fill.py"),
    )
    assert all(os.path.isabs(p) for p in pdf.resources)
    assert review.body == "# Review\nRead the diff."
    assert review.source == str(skills_dir / "review.md")
    assert review.resources == ()
    assert review.folder is None
    assert source.warnings() == []
    assert source.read_resource(pdf.resources[1]) == "print('x')"


def test_a_relative_home_gives_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "h" / "skills" / "a" / "SKILL.md", skill_text("a"))
    write(tmp_path / "h" / "skills" / "a" / "r.txt", "r")
    monkeypatch.chdir(tmp_path)
    (skill,) = HomeSkillSource("h").skills()
    assert skill.source == str(tmp_path / "h" / "skills" / "a" / "SKILL.md")
    assert skill.resources == (str(tmp_path / "h" / "skills" / "a" / "r.txt"),)


@pytest.mark.parametrize(
    ("file", "text", "reason"),
    [
        ("plain.md", "# just markdown\n", "no frontmatter: the file must start with a '---' line"),
        ("open.md", "---\nname: open\ndescription: d\n", "frontmatter is not closed"),
        (
            "yaml.md",
            "---\nname: yaml\ndescription: [unclosed\n---\nbody\n",
            "frontmatter is not valid YAML: ",
        ),
        (
            "colon.md",
            "---\nname: colon\ndescription: a: b: c\n---\nbody\n",
            "frontmatter is not valid YAML: mapping values are not allowed here (line 3, column",
        ),
        ("scalar.md", "---\njust text\n---\nbody\n", "expected keys 'name' and 'description'"),
        ("noname.md", "---\ndescription: d\n---\nbody\n", "'name' is missing"),
        ("nodesc.md", "---\nname: nodesc\n---\nbody\n", "'description' is missing"),
        ("other.md", skill_text("different"), "name 'different' differs from the file's name"),
        ("Upper.md", skill_text("Upper"), "is not a skill name"),
        ("empty.md", skill_text("empty", body="  "), "no instructions after the frontmatter"),
    ],
)
def test_a_bad_skill_file_is_skipped_with_a_warning_naming_it_and_why(
    home: Path, file: str, text: str, reason: str
) -> None:
    write(home / "skills" / "good.md", skill_text("good"))
    bad = write(home / "skills" / file, text)
    source = HomeSkillSource(home)
    assert [s.name for s in source.skills()] == ["good"]
    (warning,) = source.warnings()
    assert warning.startswith(f"{bad}: skipped: ")
    assert reason in warning


def test_bad_bytes_huge_files_and_folders_without_skill_md_are_skipped(home: Path) -> None:
    folder = home / "skills"
    (folder / "binary.md").parent.mkdir(parents=True)
    (folder / "binary.md").write_bytes(b"---\nname: binary\ndescription: \xff\n---\nbody\n")
    (folder / "huge.md").write_bytes(b"x" * 1_000_001)
    (folder / "nofile").mkdir()
    _, warnings = load_skills(folder)
    assert warnings == [
        f"{folder / 'nofile'}: skipped: a skill folder needs a SKILL.md file",
        f"{folder / 'binary.md'}: skipped: not UTF-8 text (byte 30)",
        f"{folder / 'huge.md'}: skipped: the file has 1000001 bytes (at most 1000000)",
    ]


def test_a_folder_and_a_file_of_one_name_the_folder_wins(home: Path) -> None:
    write(home / "skills" / "pdf.md", skill_text("pdf", "the file"))
    write(home / "skills" / "pdf" / "SKILL.md", skill_text("pdf", "the folder"))
    source = HomeSkillSource(home)
    assert [s.description for s in source.skills()] == ["the folder"]
    assert source.warnings() == [
        f"{home / 'skills' / 'pdf.md'}: skipped: the folder skill "
        f"{home / 'skills' / 'pdf' / 'SKILL.md'} has the same name"
    ]


def test_a_project_skills_folder_is_never_read(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    write(project / ".soong-agent" / "skills" / "evil.md", skill_text("evil"))
    write(project / "skills" / "evil.md", skill_text("evil"))
    write(home / "skills" / "mine.md", skill_text("mine"))
    monkeypatch.chdir(project)
    source = HomeSkillSource(home)
    assert [s.name for s in source.skills()] == ["mine"]
    assert source.warnings() == []


def test_no_skills_folder_no_skills_and_no_warning(home: Path) -> None:
    source = HomeSkillSource(home)
    assert source.skills() == []
    assert source.warnings() == []
    write(home / "skills", "a file, not a folder")
    source.reload()
    assert source.skills() == []
    assert source.warnings() == [f"{home / 'skills'}: not a folder, so no skills are loaded"]


def test_skills_are_read_once_until_reload(home: Path) -> None:
    write(home / "skills" / "a.md", skill_text("a"))
    source = HomeSkillSource(home)
    assert [s.name for s in source.skills()] == ["a"]
    write(home / "skills" / "b.md", skill_text("b"))
    assert [s.name for s in source.skills()] == ["a"]
    source.reload()
    assert [s.name for s in source.skills()] == ["a", "b"]


def test_links_out_of_the_skill_folder_are_not_resources(tmp_path: Path, home: Path) -> None:
    secret = write(tmp_path / "secret.txt", "secret")
    folder = home / "skills" / "pdf"
    write(folder / "SKILL.md", skill_text("pdf"))
    write(folder / "inside.md", "inside")
    (folder / "out.txt").symlink_to(secret)
    (folder / "alias.md").symlink_to(folder / "inside.md")
    source = HomeSkillSource(home)
    (skill,) = source.skills()
    assert skill.resources == (str(folder / "alias.md"), str(folder / "inside.md"))
    assert source.warnings() == [
        f"{folder / 'out.txt'}: not listed as a resource: it leads to {secret}, outside the "
        "skill's folder"
    ]
    with pytest.raises(LookupError):
        source.read_resource(str(folder / "out.txt"))
    # a listed link that is pointed elsewhere afterwards is refused at read time
    (folder / "alias.md").unlink()
    (folder / "alias.md").symlink_to(secret)
    with pytest.raises(PermissionError):
        source.read_resource(str(folder / "alias.md"))


def test_at_most_max_resources_are_listed(home: Path) -> None:
    folder = home / "skills" / "many"
    write(folder / "SKILL.md", skill_text("many"))
    for i in range(MAX_RESOURCES + 5):
        write(folder / f"r{i:03d}.txt", "x")
    source = HomeSkillSource(home)
    (skill,) = source.skills()
    assert len(skill.resources) == MAX_RESOURCES
    assert skill.resources[0] == str(folder / "r000.txt")
    assert source.warnings() == [
        f"{folder}: more than {MAX_RESOURCES} resource files; only {MAX_RESOURCES} are listed"
    ]


def test_big_and_binary_resources(home: Path) -> None:
    folder = home / "skills" / "data"
    write(folder / "SKILL.md", skill_text("data"))
    write(folder / "big.txt", "y" * (MAX_RESOURCE_BYTES + 10))
    (folder / "blob.bin").write_bytes(b"\x00\x01\x02")
    source = HomeSkillSource(home)
    big = source.read_resource(str(folder / "big.txt"))
    assert big.startswith("y" * 100)
    assert big.endswith(
        f"\n[cut: the file has {MAX_RESOURCE_BYTES + 10} bytes; "
        f"the first {MAX_RESOURCE_BYTES} are shown]"
    )
    assert source.read_resource(str(folder / "blob.bin")) == (
        f"[{folder / 'blob.bin'} is a binary file of 3 bytes; not shown]"
    )


async def test_load_skill_over_the_real_source(home: Path) -> None:
    folder = home / "skills" / "pdf"
    write(folder / "SKILL.md", skill_text("pdf", body="Use scripts/fill.py."))
    write(folder / "scripts" / "fill.py", "print('fill')")
    tool = skills_tool(HomeSkillSource(home))
    loaded = await tool.handler(LoadSkillArgs(name="pdf"), ctx())
    assert not loaded.is_error
    assert f"- {folder / 'scripts' / 'fill.py'}" in loaded.content
    assert loaded.content.endswith("\n\nUse scripts/fill.py.")
    script = await tool.handler(LoadSkillArgs(name="pdf", resource="scripts/fill.py"), ctx())
    assert script.content.endswith("\nprint('fill')")
    (folder / "scripts" / "fill.py").unlink()
    gone = await tool.handler(LoadSkillArgs(name="pdf", resource="scripts/fill.py"), ctx())
    assert gone.is_error
    assert "No such file or directory" in gone.content


def test_skills_list_prints_skills_and_warnings(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(home / "skills" / "a.md", skill_text("a", "First skill."))
    write(home / "skills" / "b" / "SKILL.md", skill_text("b", "Second skill."))
    write(home / "skills" / "b" / "r.md", "r")
    write(home / "skills" / "bad.md", "no frontmatter")
    source = HomeSkillSource(home)
    assert report_skills(source, str(source.folder)) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"2 skills in {home / 'skills'}:",
        "a  First skill.",
        f"    {home / 'skills' / 'a.md'}",
        "b  Second skill.",
        f"    {home / 'skills' / 'b' / 'SKILL.md'}  (+1 resource file)",
    ]
    assert err == (
        f"soong-agent: warning: {home / 'skills' / 'bad.md'}: skipped: no frontmatter: "
        "the file must start with a '---' line\n"
    )


def test_skills_list_reads_the_configured_home(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_minimal_config(home)
    monkeypatch.setenv("SOONG_AGENT_HOME", str(home))
    project = tmp_path / "project"
    write(project / "skills" / "p.md", skill_text("p"))
    assert skills_list(str(project)) == 0
    assert capsys.readouterr().out == f"no skills in {home / 'skills'}\n"
    write(home / "skills" / "h.md", skill_text("h"))
    assert skills_list(str(project)) == 0
    assert "h  Use for h." in capsys.readouterr().out
    (home / "config.toml").unlink()
    assert skills_list(str(project)) == 2
    assert "config.toml" in capsys.readouterr().err
