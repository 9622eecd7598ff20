"""Skills: the file rules, the catalogue within its budget, and the load_skill tool (over the
fake source)."""

from __future__ import annotations

import pytest

from soong_agent.application.tools.base import ToolContext
from soong_agent.application.tools.skills import (
    LoadSkillArgs,
    skills_catalogue_text,
    skills_tool,
)
from soong_agent.domain.skills import (
    CATALOGUE_HEADER,
    SkillFileError,
    check_metadata,
    estimate_tokens,
    render_catalogue,
    split_frontmatter,
    unknown_skill_message,
)
from soong_agent.ports.events import ToolResultEvent
from soong_agent.ports.skills import Skill
from soong_agent.testing import (
    InMemoryFileSystem,
    InMemorySkillSource,
    ScriptedModel,
    ScriptedResponse,
)
from tests.support.harness import Harness

HOME = "/home/u/.soong-agent/skills"


def flat(name: str, description: str = "", body: str = "Do it well.") -> Skill:
    return Skill(name, description or f"Use for {name} work.", body, f"{HOME}/{name}.md")


def folder(name: str, *files: str, body: str = "Steps.") -> Skill:
    base = f"{HOME}/{name}"
    resources = tuple(sorted(f"{base}/{f}" for f in files))
    return Skill(name, f"Use for {name} work.", body, f"{base}/SKILL.md", resources)


def ctx() -> ToolContext:
    return ToolContext(fs=InMemoryFileSystem(), session_id="s1", run_id="r1")


# --- the file rules ---------------------------------------------------------------------------


def test_frontmatter_is_split_from_the_body() -> None:
    text = "\ufeff---\r\nname: a\r\ndescription: b\r\n---  \r\n\r\n# Body\r\n"
    assert split_frontmatter(text) == ("name: a\ndescription: b", "# Body")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("# no frontmatter\n", "must start with a '---' line"),
        ("\n---\nname: a\n---\nbody", "must start with a '---' line"),
        ("---\nname: a\ndescription: b\n", "not closed"),
    ],
)
def test_a_file_without_closed_frontmatter_is_refused(text: str, reason: str) -> None:
    with pytest.raises(SkillFileError, match=reason):
        split_frontmatter(text)


def test_metadata_gives_the_name_and_the_description_on_one_line() -> None:
    meta = {"name": "pdf-forms", "description": "Fill in\n  PDF forms.", "license": "MIT"}
    assert check_metadata(meta, expected_name="pdf-forms") == ("pdf-forms", "Fill in PDF forms.")


@pytest.mark.parametrize(
    ("meta", "expected", "reason"),
    [
        (None, "pdf", "found nothing"),
        (["a"], "pdf", "found list"),
        ({"description": "d"}, "pdf", "'name' is missing"),
        ({"name": 3, "description": "d"}, "pdf", "'name' must be a string"),
        ({"name": "Pdf", "description": "d"}, "Pdf", "is not a skill name"),
        ({"name": "-pdf", "description": "d"}, "-pdf", "is not a skill name"),
        ({"name": "x" * 65, "description": "d"}, "x" * 65, "is not a skill name"),
        ({"name": "other", "description": "d"}, "pdf", "differs from the file's name 'pdf'"),
        ({"name": "pdf"}, "pdf", "'description' is missing"),
        ({"name": "pdf", "description": True}, "pdf", "'description' must be a string"),
        ({"name": "pdf", "description": "  \n "}, "pdf", "'description' is empty"),
        ({"name": "pdf", "description": "d" * 1025}, "pdf", "1025 characters"),
    ],
)
def test_metadata_breaking_a_rule_is_refused_with_the_reason(
    meta: object, expected: str, reason: str
) -> None:
    with pytest.raises(SkillFileError, match=reason):
        check_metadata(meta, expected_name=expected)


def test_names_may_hold_digits_dashes_and_underscores() -> None:
    for name in ("a", "pdf2", "pdf-forms", "make_release", "x" * 64):
        assert check_metadata({"name": name, "description": "d"}, expected_name=name)[0] == name


# --- the catalogue ----------------------------------------------------------------------------


def test_the_catalogue_lists_every_skill_in_name_order_when_it_fits() -> None:
    source = InMemorySkillSource([flat("zeta"), flat("alpha", "Alpha things.")])
    assert skills_catalogue_text(source, 1000).splitlines() == [
        CATALOGUE_HEADER,
        "- alpha: Alpha things.",
        "- zeta: Use for zeta work.",
    ]
    loose = Skill("b", "Line one\n  line two.", "x", f"{HOME}/b.md")
    assert render_catalogue([loose], 1000).splitlines()[1] == "- b: Line one line two."


def test_no_skills_no_catalogue() -> None:
    assert skills_catalogue_text(InMemorySkillSource(), 1000) == ""
    assert render_catalogue([flat("a")], 0) == ""


@pytest.mark.parametrize("budget", [80, 300, 1000, 2000])
def test_two_hundred_skills_fit_the_budget_and_the_rest_are_counted(budget: int) -> None:
    skills = [flat(f"skill-{i:03d}", f"Does thing number {i} for the user.") for i in range(200)]
    source = InMemorySkillSource(reversed(skills))
    text = skills_catalogue_text(source, budget)
    assert estimate_tokens(text) <= budget
    lines = text.splitlines()
    assert lines[0] == CATALOGUE_HEADER
    listed = lines[1:-1]
    # the first ones in name order, then how many were left out
    assert listed == [
        f"- skill-{i:03d}: Does thing number {i} for the user." for i in range(len(listed))
    ]
    left = 200 - len(listed)
    assert lines[-1] == (
        f"… and {left} more skills: call load_skill with a name to see it "
        "(an unknown name lists them all)."
    )
    # as many as fit: with the next skill listed too, the text would be over the budget
    longer = render_catalogue(skills[: len(listed) + 1], 10**6).splitlines()[1:]
    one_more = "\n".join([CATALOGUE_HEADER, *longer, lines[-1].replace(str(left), str(left - 1))])
    assert estimate_tokens(one_more) > budget


def test_two_hundred_skills_within_a_large_budget_are_all_listed() -> None:
    skills = [flat(f"skill-{i:03d}") for i in range(200)]
    text = render_catalogue(skills, 10_000)
    assert estimate_tokens(text) <= 10_000
    assert len(text.splitlines()) == 201
    assert "more skill" not in text


def test_one_skill_left_out_is_counted_in_the_singular() -> None:
    skills = [flat(f"s{i}", "a long description " * 10) for i in range(3)]
    whole = render_catalogue(skills, 10_000)
    budget = estimate_tokens(whole) - 1
    text = render_catalogue(skills, budget)
    assert estimate_tokens(text) <= budget
    assert text.splitlines()[-1].startswith("… and 1 more skill: ")


def test_the_catalogue_is_deterministic_and_uses_the_given_counter() -> None:
    skills = [flat(f"s{i}") for i in range(50)]
    a = render_catalogue(skills, 200)
    b = render_catalogue(list(reversed(skills)), 200)
    assert a == b
    words = render_catalogue(skills, 200, count=lambda text: len(text.split()))
    assert len(words.split()) <= 200
    assert words != a


def test_a_budget_too_small_for_even_the_header_gives_nothing() -> None:
    skills = [flat(f"s{i}") for i in range(5)]
    assert render_catalogue(skills, 10) == ""


def test_one_long_description_is_cut_in_the_catalogue() -> None:
    text = render_catalogue([flat("long", "word " * 200)], 10_000)
    line = text.splitlines()[1]
    assert line.endswith("…")
    assert len(line) <= len("- long: ") + 250


# --- load_skill -------------------------------------------------------------------------------


async def test_load_skill_returns_the_body_with_a_header_naming_skill_and_resources() -> None:
    skill = folder("pdf", "forms.md", "scripts/fill.py", body="# Filling\nUse the script.")
    tool = skills_tool(InMemorySkillSource([skill, flat("other")]))
    assert tool.name == "load_skill"
    assert tool.permission_class == "read_only"
    out = await tool.handler(LoadSkillArgs(name="pdf"), ctx())
    assert not out.is_error
    head, body = out.content.split("\n\n", 1)
    assert body == "# Filling\nUse the script."
    assert head.splitlines()[0] == f"Skill 'pdf' (from {HOME}/pdf/SKILL.md): Use for pdf work."
    assert head.splitlines()[2:] == [f"- {HOME}/pdf/forms.md", f"- {HOME}/pdf/scripts/fill.py"]
    plain = await tool.handler(LoadSkillArgs(name="other"), ctx())
    assert (
        plain.content == f"Skill 'other' (from {HOME}/other.md): Use for other work.\n\nDo it well."
    )


async def test_an_unknown_name_is_an_error_listing_the_known_names() -> None:
    source = InMemorySkillSource([flat("pdf-forms"), flat("deploy"), flat("review")])
    out = await skills_tool(source).handler(LoadSkillArgs(name="pdf-form"), ctx())
    assert out.is_error
    assert out.content == (
        "unknown skill 'pdf-form'. Did you mean 'pdf-forms'? "
        "Known skills (3): deploy, pdf-forms, review"
    )
    none = await skills_tool(InMemorySkillSource()).handler(LoadSkillArgs(name="x"), ctx())
    assert none.is_error
    assert none.content == unknown_skill_message("x", [])


async def test_a_resource_is_read_by_absolute_or_relative_path() -> None:
    skill = folder("pdf", "forms.md", "scripts/fill.py")
    source = InMemorySkillSource([skill], resources={f"{HOME}/pdf/forms.md": "Form fields."})
    tool = skills_tool(source)
    for given in (f"{HOME}/pdf/forms.md", "forms.md"):
        out = await tool.handler(LoadSkillArgs(name="pdf", resource=given), ctx())
        assert not out.is_error
        assert out.content.endswith("\nForm fields.")
    assert source.reads == [f"{HOME}/pdf/forms.md"] * 2


@pytest.mark.parametrize("given", ["missing.md", "../pdf/forms.md", "/etc/passwd", "SKILL.md"])
async def test_a_path_the_skill_does_not_list_is_refused(given: str) -> None:
    source = InMemorySkillSource([folder("pdf", "forms.md")])
    out = await skills_tool(source).handler(LoadSkillArgs(name="pdf", resource=given), ctx())
    assert out.is_error
    assert f"has no resource file {given!r}" in out.content
    assert source.reads == []


async def test_a_listed_resource_that_cannot_be_read_is_an_error_result() -> None:
    source = InMemorySkillSource([folder("pdf", "gone.md")])
    out = await skills_tool(source).handler(LoadSkillArgs(name="pdf", resource="gone.md"), ctx())
    assert out.is_error
    assert out.content.startswith(f"cannot read {HOME}/pdf/gone.md:")


async def test_load_skill_in_a_run() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("load_skill", {"name": "deploy"})),
            ScriptedResponse.tool_calls(("load_skill", {"name": "nope"})),
            ScriptedResponse.text("done"),
        ]
    )
    tool = skills_tool(InMemorySkillSource([flat("deploy", body="Run make deploy.")]))
    run = await Harness(model, extra_tools=[tool]).service.start("deploy it")
    events = [e async for e in run.events()]
    assert (await run.wait()).status == "completed"
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert [r.is_error for r in results] == [False, True]
    assert results[0].content.endswith("Run make deploy.")
    assert "Known skills (1): deploy" in results[1].content


# --- the fake is as strict as the loader ------------------------------------------------------


@pytest.mark.parametrize(
    "skill",
    [
        Skill("pdf", "d", "b", "relative/pdf.md"),
        Skill("pdf", "d", "b", f"{HOME}/other.md"),
        Skill("pdf", "two\nlines", "b", f"{HOME}/pdf.md"),
        Skill("pdf", "d", "  ", f"{HOME}/pdf.md"),
        Skill("pdf", "d", "b", f"{HOME}/pdf.md", (f"{HOME}/x.txt",)),
        Skill("pdf", "d", "b", f"{HOME}/pdf/SKILL.md", (f"{HOME}/x.txt",)),
        Skill("pdf", "d", "b", f"{HOME}/pdf/SKILL.md", (f"{HOME}/pdf/b", f"{HOME}/pdf/a")),
    ],
)
def test_the_fake_refuses_a_skill_the_loader_could_not_give(skill: Skill) -> None:
    with pytest.raises(ValueError):
        InMemorySkillSource([skill])


def test_the_fake_refuses_two_skills_of_one_name() -> None:
    with pytest.raises(ValueError, match="two skills"):
        InMemorySkillSource([flat("pdf"), Skill("pdf", "d", "b", f"{HOME}/pdf/SKILL.md")])
