"""Permission modes and the no-callback default (PERM-1): what each mode may never let through.

- ``plan`` is read-only: writes, commands and exec tools are denied by the engine even though
  the approval callback would allow them (and it is not asked);
- ``accept_edits`` allows file edits only: a command still needs the user (who denies here);
- ``bypass`` skips the questions but not the sandbox;
- no callback at all: `write_without_callback` (deny) decides.
"""

from __future__ import annotations

import json

import pytest

from tests.security.conftest import ALLOW, DENY, Call, World

MARKER = "pwned-marker"


def declarative_touch(world: World, permission_class: str = "exec") -> None:
    tools = world.home / "tools"
    tools.mkdir(exist_ok=True)
    definition = {
        "name": "make_marker",
        "description": "Create the marker file.",
        "parameters": {"type": "object", "properties": {}},
        "command": ["touch", MARKER],
        "permission_class": permission_class,
    }
    (tools / "make_marker.json").write_text(json.dumps(definition), encoding="utf-8")


PLAN_CALLS: dict[str, Call] = {
    "write_file": ("write_file", {"path": MARKER, "content": "x"}),
    "edit_file": ("edit_file", {"path": "readme.txt", "old_string": "ordinary", "new_string": "X"}),
    "run_command": ("run_command", {"command": f"touch {MARKER}"}),
    "run_command_redirection": ("run_command", {"command": f"echo x > {MARKER}"}),
    "declarative_exec": ("make_marker", {}),
    "declarative_write": ("make_marker", {}),
}


@pytest.mark.parametrize("case", list(PLAN_CALLS))
async def test_plan_mode_changes_nothing(world: World, case: str) -> None:
    declarative_touch(world, "write" if case == "declarative_write" else "exec")
    readme = (world.project / "readme.txt").read_bytes()
    outcome = await world.run(PLAN_CALLS[case], approval=ALLOW, mode="plan")
    assert not (world.project / MARKER).exists()
    assert (world.project / "readme.txt").read_bytes() == readme
    assert not outcome.asked


async def test_plan_mode_from_the_config_file(world: World) -> None:
    outcome = await world.run(
        PLAN_CALLS["write_file"],
        PLAN_CALLS["run_command"],
        approval=ALLOW,
        config='[permissions]\nmode = "plan"\n',
    )
    assert not (world.project / MARKER).exists()
    assert not outcome.asked


async def test_control_the_same_calls_work_outside_plan_mode(world: World) -> None:
    declarative_touch(world)
    outcome = await world.run(PLAN_CALLS["declarative_exec"], approval=ALLOW)
    assert outcome.asked
    assert (world.project / MARKER).exists()


async def test_accept_edits_still_asks_before_a_command(world: World) -> None:
    outcome = await world.run(
        ("run_command", {"command": f"touch {MARKER}"}), approval=DENY, mode="accept_edits"
    )
    assert outcome.asked
    assert not (world.project / MARKER).exists()


@pytest.mark.parametrize(
    "call",
    [
        ("write_file", {"path": "../outside/outside.txt", "content": "PWNED"}),
        (
            "edit_file",
            {"path": "../outside/outside.txt", "old_string": "outside", "new_string": "X"},
        ),
        ("run_command", {"command": "echo PWNED > ../outside/outside.txt"}),
        ("run_command", {"command": "cat .env"}),
        ("read_file", {"path": ".env"}),
    ],
    ids=["write_file", "edit_file", "run_command_redirection", "run_command_read", "read_file"],
)
@pytest.mark.parametrize("mode", ["bypass", "accept_edits"])
async def test_modes_that_skip_questions_keep_the_sandbox(
    world: World, call: Call, mode: str
) -> None:
    before = world.snapshot()
    outcome = await world.run(call, approval=ALLOW, mode=mode)  # type: ignore[arg-type]
    assert world.snapshot() == before
    assert world.leaks(outcome) == []


@pytest.mark.parametrize(
    "call",
    [
        ("write_file", {"path": MARKER, "content": "x"}),
        ("run_command", {"command": f"touch {MARKER}"}),
        ("make_marker", {}),
    ],
    ids=["write_file", "run_command", "declarative_exec"],
)
async def test_without_a_callback_writes_and_commands_are_denied(world: World, call: Call) -> None:
    declarative_touch(world)
    await world.run(call, approval=None)
    assert not (world.project / MARKER).exists()
