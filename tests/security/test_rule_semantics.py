"""Rules mean what they say (PERM-4), end to end: the real runtime, the tree-sitter analyser and
real subprocesses.

Each hole of issue 11 is a command a ``prefix:`` allow rule on a reader used to let run without
asking although it writes or executes: ``find -delete`` / ``-fprint``, ``rg --pre``, ``sed -n``
with a ``w`` command, and ``echo`` with a line continuation bash reads as a command
substitution. The approval callback DENIES, so the effect can only happen if the engine allowed
the call on its own. Deny rules are checked after global options are taken out: ``git -C .
commit`` is denied by ``prefix:git commit`` without asking an (allowing) user. Each hole has its
control: the legitimate use of the same rule still runs without asking.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.security.conftest import ALLOW, DENY, Outcome, World

MARKER = "pwned-marker"


def allow(*rules: str) -> str:
    listed = ", ".join(f'"run_command(prefix:{rule})"' for rule in rules)
    return f"[permissions]\nallow = [{listed}]\n"


def run(command: str) -> tuple[str, dict[str, str]]:
    return ("run_command", {"command": command})


def not_allowed_unasked(outcome: Outcome) -> bool:
    """The call was not allowed on the rule's word: the user was asked (and said no), or the
    sandbox refused it before the rules were looked at."""
    return outcome.asked or outcome.seen_by_model.startswith("Permission denied (sandbox:")


@pytest.fixture
def victim(world: World) -> Path:
    """A file in `work/` (the project's top folder holds `.env`, which the sandbox keeps any
    recursive reader of `.` away from, so the commands look in `work`)."""
    path = world.project / "work" / "victim.txt"
    path.parent.mkdir()
    path.write_text("keep me\n")
    return path


# --- find -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "find work -name victim.txt -delete",
        "find work -name victim.txt -fprint listing.txt -delete",
        "find work -name victim.txt -exec rm {} ;",
    ],
)
async def test_prefix_find_does_not_cover_its_writing_options(
    world: World, victim: Path, command: str
) -> None:
    outcome = await world.run(run(command), approval=DENY, config=allow("find"))
    assert victim.exists()
    assert not_allowed_unasked(outcome)


async def test_prefix_find_does_not_cover_fprint(world: World, victim: Path) -> None:
    outcome = await world.run(
        run("find work -fprint listing.txt"), approval=DENY, config=allow("find")
    )
    assert not (world.project / "listing.txt").exists()
    assert not_allowed_unasked(outcome)


async def test_a_rule_naming_the_writing_option_covers_it(world: World, victim: Path) -> None:
    outcome = await world.run(
        run("find work -name victim.txt -delete"),
        approval=DENY,
        config=allow("find work -name victim.txt -delete"),
    )
    assert not victim.exists()
    assert not outcome.asked


async def test_control_prefix_find_still_covers_reading(world: World) -> None:
    (world.project / "tool.py").write_text("print(1)\n")
    outcome = await world.run(run("find . -name '*.py'"), approval=DENY, config=allow("find"))
    assert not outcome.asked
    assert "tool.py" in outcome.seen_by_model


# --- rg --pre (a stand-in rg that runs its --pre program like the real one) ---------------------

FAKE_RG = """#!/bin/sh
for arg in "$@"; do
  case "$arg" in --pre=*) "${arg#--pre=}" readme.txt ;; esac
done
echo "rg ran"
"""


@pytest.fixture
def rg(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = world.root / "bin"
    bin_dir.mkdir()
    script = bin_dir / "rg"
    script.write_text(FAKE_RG)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
    pre = world.project / "pre.sh"
    pre.write_text(f'#!/bin/sh\ntouch {MARKER}\ncat "$1"\n')
    pre.chmod(0o755)


async def test_prefix_rg_does_not_cover_pre(world: World, rg: None) -> None:
    outcome = await world.run(run("rg --pre=./pre.sh ordinary"), approval=DENY, config=allow("rg"))
    assert not (world.project / MARKER).exists()
    assert not_allowed_unasked(outcome)


async def test_control_prefix_rg_covers_a_search(world: World, rg: None) -> None:
    outcome = await world.run(run("rg ordinary"), approval=DENY, config=allow("rg"))
    assert not outcome.asked
    assert "rg ran" in outcome.seen_by_model


# --- sed -n -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    ["sed -n 'w copy.txt' readme.txt", "sed -n -i s/ordinary/changed/ readme.txt"],
)
async def test_prefix_sed_n_does_not_cover_writing(world: World, command: str) -> None:
    before = (world.project / "readme.txt").read_text()
    outcome = await world.run(run(command), approval=DENY, config=allow("sed -n"))
    assert not (world.project / "copy.txt").exists()
    assert (world.project / "readme.txt").read_text() == before
    assert not_allowed_unasked(outcome)


async def test_control_prefix_sed_n_covers_printing_a_line(world: World) -> None:
    outcome = await world.run(run("sed -n 1p readme.txt"), approval=DENY, config=allow("sed -n"))
    assert not outcome.asked
    assert "an ordinary project file" in outcome.seen_by_model


# --- echo and bash quoting ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        f'echo "$\\\n(touch {MARKER})"',  # the continuation bash removes before `$(`
        f"echo $\\\n(touch {MARKER})",
        f'e\\\ncho x; "tou"\\ch {MARKER}',
        f"ec\\\nho x\n\\touch {MARKER}",
        f'echo "$ $(touch {MARKER})"',
        f"echo `touch {MARKER}`",
        f"cat <<EOF\n`touch {MARKER}`\nEOF",
        f"echo $'\\\\'\necho x; touch {MARKER}; echo '",
    ],
)
async def test_prefix_echo_does_not_cover_what_bash_runs_inside(world: World, command: str) -> None:
    outcome = await world.run(run(command), approval=DENY, config=allow("echo", "cat"))
    assert not (world.project / MARKER).exists()
    assert not_allowed_unasked(outcome)


@pytest.mark.parametrize("command", ['echo "a b"', "echo a\\\n  b", "echo 'a\\\nb'"])
async def test_control_prefix_echo_covers_plain_echoes(world: World, command: str) -> None:
    outcome = await world.run(run(command), approval=DENY, config=allow("echo"))
    assert not outcome.asked


# --- deny rules after global options ------------------------------------------------------------


@pytest.fixture
def repo(world: World) -> Path:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    for args in (
        ["init", "-q"],
        ["config", "user.email", "a@example.com"],
        ["config", "user.name", "a"],
        ["add", "readme.txt"],
    ):
        subprocess.run([git, *args], cwd=world.project, env=env, check=True)
    return world.project


def commits(project: Path) -> int:
    done = subprocess.run(
        ["git", "rev-list", "--all", "--count"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    return int(done.stdout.strip() or 0)


@pytest.mark.parametrize(
    "command",
    [
        "git commit -q -m x",
        "git -C . commit -q -m x",
        "git --no-pager commit -q -m x",
        "git -c user.name=b commit -q -m x",
        "git -C . --git-dir=.git -c k.x=1 -P commit -q -m x",
        "env git -C . commit -q -m x",
    ],
)
async def test_deny_prefix_git_commit_sees_through_global_options(
    world: World, repo: Path, command: str
) -> None:
    config = '[permissions]\nallow = ["run_command"]\ndeny = ["run_command(prefix:git commit)"]\n'
    outcome = await world.run(run(command), approval=ALLOW, config=config)
    assert commits(repo) == 0
    assert not outcome.asked


async def test_control_git_commit_runs_when_allowed(world: World, repo: Path) -> None:
    await world.run(run("git -C . commit -q -m x"), approval=ALLOW)
    assert commits(repo) == 1


@pytest.mark.parametrize("command", ["git status", "git -C . status", "git --no-pager status -s"])
async def test_control_prefix_git_status_covers_status_with_global_options(
    world: World, repo: Path, command: str
) -> None:
    outcome = await world.run(run(command), approval=DENY, config=allow("git status"))
    assert not outcome.asked


@pytest.mark.parametrize(
    "command", ["git -c core.pager=./pager.sh status", "git -C . -c alias.s=!./pager.sh s"]
)
async def test_prefix_git_status_does_not_cover_executing_global_options(
    world: World, repo: Path, command: str
) -> None:
    pager = world.project / "pager.sh"
    pager.write_text(f"#!/bin/sh\ntouch {MARKER}\n")
    pager.chmod(0o755)
    outcome = await world.run(run(command), approval=DENY, config=allow("git status", "git"))
    assert not (world.project / MARKER).exists()
    assert not_allowed_unasked(outcome)
