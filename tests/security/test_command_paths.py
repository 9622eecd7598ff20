"""Every path a command touches is a path (SBX-1, issue 11 item 2).

The holes: only words with a ``/`` or a leading ``.``/``~`` were checked, so ``cat key.txt`` (a
symlink into ``~/.ssh``) or ``cat credentials.json`` (a sensitive name) ran; git printed a
committed ``.env`` from its objects (``git show HEAD:.env``, ``git show HEAD``); and after
``cd DIR`` the words were judged as if the shell were still in the project.

Each attack runs through the engine with the real tree-sitter analyser, the real sandbox and a
real subprocess; the approval callback allows everything, so only the sandbox can stop it. The
controls show the ordinary use still runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.security.conftest import ALLOW, World

GIT_EXCLUSIONS = (
    "':(exclude,top,glob)**/.env' ':(exclude,top,glob)**/.env/**' "
    "':(exclude,top,glob)**/.env.*' ':(exclude,top,glob)**/.env.*/**'"
)


def run_command(command: str) -> tuple[str, dict[str, str]]:
    return ("run_command", {"command": command})


def git(world: World, *args: str) -> str:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(world.user_home),
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=world.project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(world: World) -> World:
    """The project is a git repository whose first commit holds `.env` and `.env.local` (the
    canaries); a second commit edits `readme.txt` and adds a line to `.env` (so its diff shows
    the canary as context)."""
    assert shutil.which("git")
    git(world, "init", "-q")
    git(world, "add", "-A")
    git(world, "commit", "-qm", "first, with the secrets")
    (world.project / "readme.txt").write_text("an ordinary project file, edited\n")
    with (world.project / ".env").open("a") as env:
        env.write("DEBUG=1\n")
    git(world, "commit", "-qam", "second")
    return world


# --- words without a slash ------------------------------------------------------------------


async def test_a_bare_name_that_is_a_symlink_into_ssh(world: World) -> None:
    (world.project / "key.txt").symlink_to(world.user_home / ".ssh" / "id_rsa")
    outcome = await world.run(run_command("cat key.txt"), approval=ALLOW)
    assert world.leaks(outcome, "ssh") == []
    assert "refused" in outcome.seen_by_model


async def test_a_bare_name_listed_as_sensitive(world: World) -> None:
    world.plant("credentials", world.project / "credentials.json", '{{"token": "{}"}}\n')
    config = '[tools]\nsensitive_paths = ["~/.ssh", ".env", ".env.*", "credentials.json"]\n'
    outcome = await world.run(run_command("cat credentials.json"), approval=ALLOW, config=config)
    assert world.leaks(outcome, "credentials") == []


async def test_a_glob_without_a_slash_names_the_symlink(world: World) -> None:
    (world.project / "key.txt").symlink_to(world.user_home / ".ssh" / "id_rsa")
    outcome = await world.run(run_command("cat *.txt"), approval=ALLOW)
    assert world.leaks(outcome, "ssh") == []


@pytest.mark.parametrize(
    "command", ["shopt -s dotglob; cat *", "bash -O dotglob -c 'cat *'", "cat * .[e]*"]
)
async def test_a_glob_that_reaches_dot_files(world: World, command: str) -> None:
    outcome = await world.run(run_command(command), approval=ALLOW)
    assert world.leaks(outcome, "env", "env_local") == []


async def test_control_a_glob_is_expanded_as_bash_does(world: World) -> None:
    """``*`` skips dot-files in bash: ``cat *`` next to ``.env`` reads only the others."""
    outcome = await world.run(run_command("cat * && wc -l *"), approval=ALLOW)
    assert outcome.seen_by_model.count("an ordinary project file") == 1
    assert "Permission denied" not in outcome.seen_by_model


async def test_control_ordinary_files_are_still_read(world: World) -> None:
    outcome = await world.run(run_command("cat readme.txt"), approval=ALLOW)
    assert "an ordinary project file" in outcome.seen_by_model
    assert outcome.asked


# --- git objects ----------------------------------------------------------------------------

GIT_LEAKS = {
    "show_object": "git show HEAD~1:.env",
    "show_index_object": "git show :.env",
    "cat_file_object": "git cat-file -p HEAD~1:.env.local",
    "show_commit": "git show HEAD~1",
    "show_head_after_a_change": "git show",
    "log_patch": "git log -p",
    "log_patch_all": "git log --all --patch --format=%H",
    "diff_revisions": "git diff HEAD~1 HEAD",
    "diff_against_empty_tree": "git diff 4b825dc642cb6eb9a060e54bf8d69288fbee4904^{tree} HEAD",
    "grep_history": "git grep CANARY HEAD~1",
    "archive": "git archive HEAD | tar -xO",
    "archive_to_file": "git archive -o out.tar HEAD && tar -xOf out.tar",
    "format_patch": "git format-patch --root --stdout HEAD",
    "bundle": "git bundle create all.bundle --all && git clone -q all.bundle c && git -C c log -p",
    "cat_file_batch": "git rev-parse HEAD~1:.env | git cat-file --batch",
    "pathspec_to_the_file": "git log -p -- .env",
    "literal_pathspecs": "git --literal-pathspecs show HEAD~1 -- . "
    "':(exclude,top,glob)**/.env' ':(exclude,top,glob)**/.env/**' "
    "':(exclude,top,glob)**/.env.*' ':(exclude,top,glob)**/.env.*/**'",
    "alias": "git -c alias.s=show s HEAD~1",
}


@pytest.mark.parametrize("case", list(GIT_LEAKS))
async def test_git_never_prints_a_committed_secret(repo: World, case: str) -> None:
    outcome = await repo.run(run_command(GIT_LEAKS[case]), approval=ALLOW)
    assert repo.leaks(outcome, "env", "env_local") == []
    assert not (repo.project / "c").exists()


async def test_git_diff_of_a_changed_secret_in_the_worktree(repo: World) -> None:
    with (repo.project / ".env").open("a") as env:
        env.write("MORE=1\n")
    outcome = await repo.run(run_command("git diff"), approval=ALLOW)
    assert repo.leaks(outcome, "env") == []


async def test_git_object_named_by_its_hash(repo: World) -> None:
    blob = git(repo, "rev-parse", "HEAD~1:.env")
    for command in (f"git show {blob}", f"git cat-file -p {blob[:10]}", f"git grep . {blob}"):
        outcome = await repo.run(run_command(command), approval=ALLOW)
        assert repo.leaks(outcome, "env") == [], command


async def test_the_refusal_says_which_pathspec_bounds_the_output(repo: World) -> None:
    outcome = await repo.run(run_command("git show HEAD~1"), approval=ALLOW)
    text = outcome.seen_by_model
    assert "Permission denied" in text
    assert ":(exclude,top,glob)**/.env" in text and ":(exclude,top,glob)**/.env.*/**" in text


GIT_CONTROLS = {
    "status": ("git status", "working tree clean"),
    "object": ("git show HEAD:readme.txt", "edited"),
    "log": ("git log --oneline", "second"),
    "stat": ("git show --stat HEAD~1", "readme.txt"),
    "file_pathspec": ("git log -p -- readme.txt", "+an ordinary project file, edited"),
    "diff_of_a_file": ("git diff HEAD~1 readme.txt", "+an ordinary project file, edited"),
    "with_exclusions": (f"git show HEAD~1 -- . {GIT_EXCLUSIONS}", "+an ordinary project file"),
    "log_with_exclusions": (f"git log -p {GIT_EXCLUSIONS}", "+an ordinary project file"),
}


@pytest.mark.parametrize("case", list(GIT_CONTROLS))
async def test_control_git_reads_that_stay_bounded_run(repo: World, case: str) -> None:
    command, expected = GIT_CONTROLS[case]
    outcome = await repo.run(run_command(command), approval=ALLOW)
    assert expected in outcome.seen_by_model, outcome.seen_by_model
    assert outcome.asked
    assert repo.leaks(outcome) == []


# --- cd, pushd, popd ------------------------------------------------------------------------


def vendor(world: World) -> Path:
    """`vendor`: a symlink from the project to the folder outside it."""
    link = world.project / "vendor"
    link.symlink_to(world.outside, target_is_directory=True)
    return link


async def test_cd_into_a_symlink_out_of_the_project_then_read(world: World) -> None:
    vendor(world)
    outcome = await world.run(run_command("cd vendor && cat outside.txt"), approval=ALLOW)
    assert world.leaks(outcome, "outside") == []


@pytest.mark.parametrize(
    "command",
    [
        "cd vendor && echo PWNED > created.txt",
        "pushd vendor && touch created.txt",
        "cd vendor; cp ../project/readme.txt created.txt",
    ],
)
async def test_cd_out_of_the_project_then_write(world: World, command: str) -> None:
    vendor(world)
    await world.run(run_command(command), approval=ALLOW)
    assert not (world.outside / "created.txt").exists()


async def test_cd_then_a_relative_path_into_a_sensitive_folder(world: World) -> None:
    world.plant("vault", world.project / "config" / "secrets" / "key.txt")
    config = '[tools]\nsensitive_paths = [".env", ".env.*", "~/.ssh", "config/secrets"]\n'
    outcome = await world.run(
        run_command("cd config && cat secrets/key.txt"), approval=ALLOW, config=config
    )
    assert world.leaks(outcome, "vault") == []


async def test_cd_to_the_home_folder(world: World) -> None:
    outcome = await world.run(run_command("cd && cat .ssh/id_rsa"), approval=ALLOW)
    assert world.leaks(outcome, "ssh") == []


async def test_popd_comes_back_to_the_project(world: World) -> None:
    (world.project / "sub").mkdir()
    (world.project / "key.txt").symlink_to(world.user_home / ".ssh" / "id_rsa")
    outcome = await world.run(
        run_command("pushd sub >/dev/null && popd >/dev/null && cat key.txt"), approval=ALLOW
    )
    assert world.leaks(outcome, "ssh") == []


async def test_cd_to_a_folder_that_is_not_literal_asks_even_when_allowed(world: World) -> None:
    config = '[permissions]\nallow = ["run_command"]\n'
    outcome = await world.run(run_command('cd "$(echo sub)" && ls'), approval="deny", config=config)
    assert outcome.asked


async def test_control_cd_into_a_subfolder_then_list(world: World) -> None:
    (world.project / "sub").mkdir()
    (world.project / "sub" / "notes.md").write_text("sub notes\n")
    outcome = await world.run(run_command("cd sub && ls && cat notes.md"), approval=ALLOW)
    assert "notes.md" in outcome.seen_by_model and "sub notes" in outcome.seen_by_model
