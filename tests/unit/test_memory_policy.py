"""The memory policy with fakes: categorisation, every rejection reason (and what is still
accepted), the index, and the save_memory / forget_memory tools over the fake store."""

from __future__ import annotations

from typing import Any

import pytest

from soong_agent.adapters.redaction import SecretScrubber
from soong_agent.application.tools.base import Tool, ToolContext, ToolOutput
from soong_agent.application.tools.memory import (
    ForgetMemoryArgs,
    SaveMemoryArgs,
    memory_rejected_fields,
    memory_tools,
)
from soong_agent.domain.memory import (
    MemoryEntry,
    MemoryPolicy,
    categorise,
    name_problem,
    render_index,
)
from soong_agent.ports.events import RUN_EVENT, MemoryRejected
from soong_agent.ports.memory import Memory
from soong_agent.testing import (
    DictSecretRedactor,
    DictSecretSource,
    InMemoryFileSystem,
    InMemoryMemoryStore,
)

KEY = "sk-canary-0123456789abcdef"


@pytest.fixture
def policy() -> MemoryPolicy:
    return MemoryPolicy(DictSecretRedactor({"OPENAI_API_KEY": KEY}))


def codes(policy: MemoryPolicy, body: str, *, category: str | None = "user") -> list[str]:
    return policy.review(name="m", description="d", body=body, category=category).codes


# --- categorisation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("The user is a data scientist who knows pandas well.", "user"),
        ("The user's name is Ada and they work in Berlin.", "user"),
        ("Don't add comments that restate the code.", "feedback"),
        ("Always run the linters before saying a change is done.", "feedback"),
        ("The user prefers small commits over large ones.", "feedback"),
        ("Latency dashboard: https://grafana.example.com/d/abc", "reference"),
        ("Bugs are tracked in the Linear project INGEST.", "reference"),
    ],
)
def test_categorise(text: str, category: str) -> None:
    assert categorise(text) == category


def test_a_missing_category_is_guessed(policy: MemoryPolicy) -> None:
    verdict = policy.review(name="no_mocks", description="d", body="Never mock the database.")
    assert verdict.accepted
    assert verdict.memory.category == "feedback"


def test_a_category_that_is_not_kept_is_refused() -> None:
    policy = MemoryPolicy(DictSecretRedactor(), categories=("user", "feedback"))
    verdict = policy.review(name="x", description="d", body="b", category="reference")
    assert verdict.codes == ["category"]
    assert (
        verdict.reason() == "category 'reference' is not kept (memory.categories: user, feedback)"
    )
    guessed = policy.review(name="x", description="d", body="See https://docs.example.com")
    assert guessed.codes == ["category"]


def test_an_unknown_category_is_refused(policy: MemoryPolicy) -> None:
    verdict = policy.review(name="x", description="d", body="b", category="project")
    assert verdict.codes == ["category"]
    assert "not one of user, feedback, reference" in verdict.reason()


# --- what is accepted -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "The user prefers tabs over spaces when editing source files.",
        "The user likes small pull requests that do one thing.",
        "Tests in this team's projects live next to the code they test.",
        "The default branch is `main`.",
        "Ask before running database migrations; the user was bitten by one in production.",
        "API docs are at https://docs.example.com/api (the password is in the team vault).",
        "The user reads Python fluently but is new to Rust.",
        "When a test fails, the user wants the failing output shown, not summarised.",
    ],
)
def test_lasting_facts_are_accepted(policy: MemoryPolicy, body: str) -> None:
    verdict = policy.review(name="fact", description="A lasting fact", body=body)
    assert verdict.accepted, verdict.reason()


def test_the_memory_is_trimmed(policy: MemoryPolicy) -> None:
    verdict = policy.review(name="x", description="  d ", body="\n body \n", category="user")
    assert verdict.memory == Memory("x", "d", "user", "body")


# --- every rejection reason -----------------------------------------------------------------


def test_a_known_secret_value_is_refused_without_being_quoted(policy: MemoryPolicy) -> None:
    verdict = policy.review(
        name="key", description="The API key", body=f"Use {KEY} for the API.", category="user"
    )
    assert verdict.codes == ["secret"]
    assert verdict.reason() == (
        "it holds a secret (OPENAI_API_KEY): secrets, passwords and credentials are never stored"
    )
    assert KEY not in verdict.reason()


def test_a_secret_in_the_description_or_name_is_refused_too(policy: MemoryPolicy) -> None:
    assert policy.review(name="k", description=KEY, body="b", category="user").codes == ["secret"]


def test_secret_patterns_of_the_real_redactor_are_refused() -> None:
    policy = MemoryPolicy(SecretScrubber(DictSecretSource({}), ()))
    verdict = policy.review(
        name="aws", description="AWS access", body="Key id AKIAIOSFODNN7EXAMPLE", category="user"
    )
    assert verdict.codes == ["secret"]
    assert "aws_access_key" in verdict.reason()


@pytest.mark.parametrize(
    "body",
    ["The staging password is hunter22!", "db passwd: s3cr3t-value", "api_key = abc123xyz789"],
)
def test_a_credential_written_out_is_refused(policy: MemoryPolicy, body: str) -> None:
    assert codes(policy, body) == ["secret"]


@pytest.mark.parametrize(
    "body",
    [
        "src/\n├── main.py\n└── util.py",
        "- src/app.py\n- src/models.py\n- tests/test_app.py",
        "drwxr-xr-x  2 user user 4096 Jan  1 00:00 src",
        "The project structure: code in src, tests in tests.",
        "README.md - overview\nsetup.py - packaging\ndocs/ - the manual",
    ],
)
def test_file_structure_and_directory_listings_are_refused(policy: MemoryPolicy, body: str) -> None:
    verdict = policy.review(name="m", description="d", body=body, category="user")
    assert verdict.codes == ["file_structure"]
    assert verdict.reason().endswith("that can be read again from the project")


@pytest.mark.parametrize(
    "body",
    [
        "def load_config(path: str) -> Config:",
        "class SessionStore(Protocol):",
        "export async function fetchUser(id) {",
        "func (s *Server) Handle(w http.ResponseWriter) error",
        "pub fn parse<T>(input: &str) -> T",
        "public static void main(String[] args)",
        "The entry point is `run(message, path=None) -> RunResult`.",
    ],
)
def test_code_signatures_are_refused(policy: MemoryPolicy, body: str) -> None:
    assert codes(policy, body) == ["code_signature"]


@pytest.mark.parametrize(
    "body",
    [
        "Currently working on the login form.",
        "Next steps: wire the parser, then add tests.",
        "- [x] parser\n- [ ] tests",
        "We are halfway through the migration; step 3 of 5.",
        "TODO finish the retry logic",
    ],
)
def test_current_task_progress_is_refused(policy: MemoryPolicy, body: str) -> None:
    assert codes(policy, body) == ["task_progress"]


@pytest.mark.parametrize(
    "body",
    [
        "The work is on branch feature/login-form.",
        "Pushed to fix/retry-loop.",
        "Review is in PR #482.",
        "See https://github.com/acme/app/pull/482 for the discussion.",
        "Run git checkout -b spike-42 first.",
    ],
)
def test_branch_and_pull_request_names_are_refused(policy: MemoryPolicy, body: str) -> None:
    assert codes(policy, body) == ["branch_or_pr"]


@pytest.mark.parametrize(
    "body",
    [
        "Fixed the crash by adding a lock around the cache.",
        "The fix was to reset the counter before each retry.",
        "Root cause was a missing await in the writer.",
        "@@ -10,3 +10,4 @@\n-old\n+new",
        "To fix it, replace the tuple with a list in the loader.",
    ],
)
def test_fix_details_are_refused(policy: MemoryPolicy, body: str) -> None:
    assert codes(policy, body) == ["fix_details"]


def test_shape_rejections(policy: MemoryPolicy) -> None:
    assert policy.review(name="m", description="", body="b").codes == ["description"]
    assert policy.review(name="m", description="d", body="  ").codes == ["empty"]
    assert policy.review(name="m", description="d" * 201, body="b").codes == ["description"]
    long = policy.review(name="m", description="d", body="word " * 1000)
    assert long.codes == ["too_long"]
    assert policy.review(name="../m", description="d", body="b").codes == ["invalid_name"]


def test_every_broken_rule_is_one_reason(policy: MemoryPolicy) -> None:
    verdict = policy.review(
        name="m",
        description="d",
        body=f"Currently working on PR #12 with key {KEY}.",
        category="user",
    )
    assert verdict.codes == ["secret", "task_progress", "branch_or_pr"]
    assert len(verdict.reasons) == 3


# --- names and the index ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("prefer_tabs", None),
        ("a-1", None),
        ("a/b", "the name holds a path separator"),
        ("..", "the name starts with '.'"),
        ("x.md", "give the name without .md"),
        ("Tabs", "a name is 1-64 lowercase letters"),
    ],
)
def test_name_problems(name: str, problem: str | None) -> None:
    found = name_problem(name)
    assert found == problem if problem is None else (found or "").startswith(problem)


def test_the_index_lists_one_line_per_memory_by_category() -> None:
    import datetime as dt

    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    entries = [
        MemoryEntry("docs", "Docs\nsite", "reference", "reference/docs.md", when, when),
        MemoryEntry("tabs", "Tabs", "user", "user/tabs.md", when, when),
    ]
    assert render_index(entries).splitlines()[-2:] == [
        "- tabs: Tabs [user](user/tabs.md)",
        "- docs: Docs site [reference](reference/docs.md)",
    ]
    assert render_index([]).endswith("(no memories yet)\n")


# --- the tools ------------------------------------------------------------------------------


class Tools:
    def __init__(self, policy: MemoryPolicy) -> None:
        self.store = InMemoryMemoryStore()
        self.rejected: list[dict[str, Any]] = []
        tools = memory_tools(
            self.store, policy, on_rejected=lambda ctx, fields: self.rejected.append(fields)
        )
        self.by_name: dict[str, Tool] = {t.name: t for t in tools}
        self.ctx = ToolContext(fs=InMemoryFileSystem(), session_id="ses_1", run_id="run_1")

    async def save(self, **args: Any) -> ToolOutput:
        tool = self.by_name["save_memory"]
        return await tool.handler(SaveMemoryArgs.model_validate(args), self.ctx)

    async def forget(self, name: str) -> ToolOutput:
        tool = self.by_name["forget_memory"]
        return await tool.handler(ForgetMemoryArgs(name=name), self.ctx)


@pytest.fixture
def tools(policy: MemoryPolicy) -> Tools:
    return Tools(policy)


def test_the_tools_are_write_tools_with_summaries(tools: Tools) -> None:
    save, forget = tools.by_name["save_memory"], tools.by_name["forget_memory"]
    assert (save.permission_class, forget.permission_class) == ("write", "write")
    args = SaveMemoryArgs(name="t", description="Tabs", category="user", body="b")
    assert save.describe(args, tools.ctx) == ("*", "save memory 't' (user): Tabs")
    assert set(save.spec.parameters["required"]) == {"name", "description", "category", "body"}


async def test_save_creates_a_memory(tools: Tools) -> None:
    out = await tools.save(
        name="prefer_tabs", description="User prefers tabs", category="user", body="Tabs."
    )
    assert out == ToolOutput("memory 'prefer_tabs' created (user): User prefers tabs")
    assert tools.store.read("prefer_tabs").body == "Tabs."
    assert "- prefer_tabs: User prefers tabs [user]" in (tools.store.index_text or "")


async def test_save_under_the_same_name_updates_without_a_duplicate(tools: Tools) -> None:
    await tools.save(name="prefer_tabs", description="Tabs", category="user", body="Tabs.")
    out = await tools.save(
        name="prefer_tabs", description="Tabs, width 4", category="user", body="Tabs of 4."
    )
    assert out.content == "memory 'prefer_tabs' updated (user): Tabs, width 4"
    moved = await tools.save(
        name="prefer_tabs", description="Tabs", category="feedback", body="Always use tabs."
    )
    assert moved.content == (
        "memory 'prefer_tabs' updated (moved from user to feedback) (feedback): Tabs"
    )
    assert list(tools.store.files) == ["feedback/prefer_tabs.md"]
    assert tools.store.catalogue().names() == ["prefer_tabs"]


async def test_type_and_content_are_accepted_as_argument_names(tools: Tools) -> None:
    out = await tools.save(name="t", description="d", type="user", content="The user is Ada.")
    assert not out.is_error


async def test_forget_removes_the_memory(tools: Tools) -> None:
    await tools.save(name="prefer_tabs", description="Tabs", category="user", body="Tabs.")
    out = await tools.forget("prefer_tabs")
    assert out == ToolOutput("memory 'prefer_tabs' (user) forgotten")
    assert tools.store.files == {}
    assert "prefer_tabs" not in (tools.store.index_text or "")


async def test_forget_an_unknown_name_lists_the_known_ones(tools: Tools) -> None:
    await tools.save(name="prefer_tabs", description="Tabs", category="user", body="Tabs.")
    out = await tools.forget("prefer_spaces")
    assert out == ToolOutput(
        "no memory named 'prefer_spaces'; the memories are: prefer_tabs", is_error=True
    )
    bad = await tools.forget("../x")
    assert bad.is_error and "path separator" in bad.content


async def test_a_secret_value_is_rejected_and_reported(tools: Tools) -> None:
    out = await tools.save(
        name="api_key", description="The key", category="reference", body=f"The key is {KEY}"
    )
    assert out.is_error
    assert out.content == (
        "memory 'api_key' was not saved: it holds a secret (OPENAI_API_KEY): secrets, "
        "passwords and credentials are never stored"
    )
    assert tools.store.files == {}
    assert tools.rejected == [
        {
            "source": "save_memory",
            "name": "api_key",
            "category": "reference",
            "codes": ["secret"],
            "reasons": [out.content.removeprefix("memory 'api_key' was not saved: ")],
        }
    ]


async def test_a_directory_listing_is_rejected(tools: Tools) -> None:
    out = await tools.save(
        name="layout",
        description="Project layout",
        category="reference",
        body="- src/app.py\n- src/db.py\n- tests/test_app.py",
    )
    assert out.is_error
    assert out.content.startswith(
        "memory 'layout' was not saved: it describes file structure or lists a directory"
    )
    assert tools.store.files == {}
    assert [r["codes"] for r in tools.rejected] == [["file_structure"]]


def test_the_rejection_fields_make_a_memory_rejected_event(policy: MemoryPolicy) -> None:
    verdict = policy.review(name="m", description="d", body="PR #12", category="user")
    event = MemoryRejected(
        seq=1, run_id="r", session_id="s", at=0.0, **memory_rejected_fields(verdict, source="x")
    )
    assert RUN_EVENT.validate_python(event.model_dump()) == event
    assert event.type == "memory_rejected"
    assert event.codes == ["branch_or_pr"]
