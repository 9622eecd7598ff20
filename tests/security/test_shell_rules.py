"""Permission rules against every shell construct (PERM-2, PERM-4): a line is allowed only if
every command in it is, and one denied command denies the whole line, however bash's quoting
spells it (line continuations, a quote next to an escape, `$'…'`, backticks).

Each construct would create the marker file ``pwned-marker`` in the project if it ran; a
control run with no rules and an allowing approval proves that it does.

- allow rule ``run_command(prefix:npm test)`` + an approval that DENIES: the line is not fully
  covered, so the user must be asked, and having said no, nothing runs;
- deny rules for ``touch`` (and the marker path) + an approval that ALLOWS: the engine denies on
  its own, without asking, whatever the construct (also in ``bypass`` mode).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.security.conftest import ALLOW, DENY, World

MARKER = "pwned-marker"
ALLOW_NPM_TEST = '[permissions]\nallow = ["run_command(prefix:npm test)"]\n'
DENY_TOUCH = f'[permissions]\ndeny = ["run_command(prefix:touch)", "run_command(/{MARKER})"]\n'

CONSTRUCTS: dict[str, str] = {
    "and": f"npm test && touch {MARKER}",
    "or": f"npm test --fail || touch {MARKER}",
    "semicolon": f"npm test; touch {MARKER}",
    "pipe": f"npm test | sh -c 'touch {MARKER}'",
    "newline": f"npm test\ntouch {MARKER}",
    "command_substitution": f"npm test $(touch {MARKER})",
    "quoted_command_substitution": f'npm test "$(touch {MARKER})"',
    "backticks": f"npm test `touch {MARKER}`",
    "process_substitution": f"npm test <(touch {MARKER})",
    "eval": f'eval "touch {MARKER}"',
    "sh_c": f'sh -c "touch {MARKER}"',
    "nested_shells": f"npm test && bash -c \"sh -c 'touch {MARKER}'\"",
    "xargs": f"echo {MARKER} | xargs touch",
    "find_exec": f"find . -maxdepth 0 -exec touch {MARKER} \\;",
    "redirection": f"npm test > {MARKER}",
    "append_redirection": f"npm test >> {MARKER}",
    "background": f"npm test & touch {MARKER}",
    "subshell": f"npm test && (touch {MARKER})",
    "group": f"npm test && {{ touch {MARKER}; }}",
    "function": f"f() {{ touch {MARKER}; }}; npm test && f",
    "heredoc_to_shell": f"npm test && sh <<'EOF'\ntouch {MARKER}\nEOF",
    "env_wrapper": f"npm test && env touch {MARKER}",
    "absolute_path": f"npm test && /usr/bin/touch {MARKER}",
    "quoted_name": f"npm test && 't'ouch {MARKER}",
    "glob_in_command_name": f"npm test && /usr/bin/tou?h {MARKER}",
    # bash's quoting, read the way bash reads it (PERM-4)
    "quote_then_escape_in_name": f'npm test && "tou"\\ch {MARKER}',
    "continuation_in_name": f"npm test && tou\\\nch {MARKER}",
    "continuation_in_double_quotes": f'npm test "$\\\n(touch {MARKER})"',
    "continuation_in_heredoc": f"npm test && cat <<EOF\n$\\\n(touch {MARKER})\nEOF",
    "ansi_c_name": f"npm test && $'\\x74ouch' {MARKER}",
    "unquoted_backticks_unescaped": f"npm test `echo \\`touch {MARKER}\\``",
}


@pytest.fixture
def npm(world: World, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake `npm` first on PATH: ``npm test`` leaves ``npm-ran`` and exits 0, or 1 with
    ``--fail``; it reads an argument that is a pipe (a process substitution) to its end, as a
    real program would, so what writes into it has finished when npm does."""
    bin_dir = world.root / "bin"
    bin_dir.mkdir()
    script = bin_dir / "npm"
    script.write_text(
        "#!/bin/sh\ntouch npm-ran\n"
        'for a in "$@"; do [ -p "$a" ] && cat "$a" >/dev/null; done\n'
        '[ "$2" = "--fail" ] && exit 1\nexit 0\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
    return world.project / "npm-ran"


@pytest.fixture(autouse=True)
def _tools_exist() -> None:
    for tool in ("sh", "bash", "touch", "find", "xargs", "env"):
        assert shutil.which(tool), tool
    assert os.access("/usr/bin/touch", os.X_OK)


@pytest.mark.parametrize("construct", list(CONSTRUCTS))
async def test_control_each_construct_runs_when_allowed(
    world: World, npm: Path, construct: str
) -> None:
    await world.run(("run_command", {"command": CONSTRUCTS[construct]}), approval=ALLOW)
    assert (world.project / MARKER).exists()


@pytest.mark.parametrize("construct", list(CONSTRUCTS))
async def test_allow_rule_does_not_cover_the_rest_of_the_line(
    world: World, npm: Path, construct: str
) -> None:
    outcome = await world.run(
        ("run_command", {"command": CONSTRUCTS[construct]}), approval=DENY, config=ALLOW_NPM_TEST
    )
    assert not (world.project / MARKER).exists()
    assert outcome.asked  # not fully covered by the rule: the user had to decide


@pytest.mark.parametrize("mode", [None, "bypass", "accept_edits"])
@pytest.mark.parametrize("construct", list(CONSTRUCTS))
async def test_deny_rule_sees_through_every_construct(
    world: World, npm: Path, construct: str, mode: str | None
) -> None:
    outcome = await world.run(
        ("run_command", {"command": CONSTRUCTS[construct]}),
        approval=ALLOW,
        config=DENY_TOUCH,
        mode=mode,  # type: ignore[arg-type]
    )
    assert not (world.project / MARKER).exists()
    assert not outcome.asked  # the engine denied; the (allowing) user was never consulted


async def test_control_the_allowed_command_runs_without_asking(world: World, npm: Path) -> None:
    outcome = await world.run(
        ("run_command", {"command": "npm test"}),
        ("run_command", {"command": "npm test --watch=false"}),
        approval=DENY,
        config=ALLOW_NPM_TEST,
    )
    assert npm.exists()
    assert not outcome.asked


async def test_a_session_grant_for_a_command_does_not_cover_what_is_chained_to_it(
    world: World, npm: Path
) -> None:
    """The user allows ``npm test`` for the session, then denies everything else."""
    outcome = await world.run(
        ("run_command", {"command": "npm test"}),
        ("run_command", {"command": CONSTRUCTS["and"]}),
        ("run_command", {"command": CONSTRUCTS["command_substitution"]}),
        ("run_command", {"command": CONSTRUCTS["redirection"]}),
        approval=["allow_for_session", DENY],
    )
    assert npm.exists()
    assert not (world.project / MARKER).exists()
    assert outcome.approval is not None and len(outcome.approval.requests) == 4


@pytest.mark.parametrize(
    "command",
    [
        "echo pwned > ../outside/outside.txt",
        "echo pwned >> ../outside/created.txt",
        "echo pwned > /proc/self/cwd/../outside/outside.txt",
        "npm test > ~/../outside/outside.txt",
        "tee ../outside/outside.txt < readme.txt",
        "cp readme.txt ../outside/created.txt",
    ],
)
async def test_redirections_and_copies_out_of_the_project_are_refused_by_the_sandbox(
    world: World, npm: Path, command: str
) -> None:
    before = world.snapshot()
    outcome = await world.run(("run_command", {"command": command}), approval=ALLOW)
    assert world.snapshot() == before
    assert not (world.outside / "created.txt").exists()
    assert not outcome.asked
