"""`soong-agent sessions rewind` end to end (RWD-1): the installed CLI against the strict loopback
server, on a real project folder (a real git repository where it says so)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e

BYPASS = ("--permission-mode", "bypass")


def git(project: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=project, check=True, capture_output=True, text=True)
    return done.stdout


def make_repo(project: Path) -> None:
    git(project, "init", "-q")
    (project / "tracked.txt").write_text("tracked\n")
    (project / "data.bin").write_bytes(b"\x00\xff\xfe\x80 old")
    git(project, "add", "-A")
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")


def configure(world: CliWorld) -> None:
    world.write_config(
        "[model]\n"
        'provider = "openai"\n'
        f'base_url = "{world.server.base_url}"\n'
        'api_key_env = "SOONG_TEST_KEY"\n'
        'name = "fake-model"\n'
        "[sandbox]\n"
        'os = "off"\n'
    )


def call(call_id: str, name: str, **args: str) -> tuple[str, str, str]:
    return (call_id, name, json.dumps(args))


def session_of(output: str) -> str:
    found = re.search(r"session: (ses_\w+)", output)
    assert found, output
    return found.group(1)


def user_messages(world: CliWorld, session: str) -> list[str]:
    shown = world.run("sessions", "show", session, "--output", "json")
    assert shown.returncode == 0, shown.stderr
    messages = json.loads(shown.stdout)["messages"]
    return [m["id"] for m in messages if m["role"] == "user" and m["kind"] == "normal"]


def test_rewind_restores_file_and_command_changes_exactly_in_git(world: CliWorld) -> None:
    configure(world)
    project = world.project
    make_repo(project)
    world.server.enqueue(
        tool_call_response(
            [
                call("c1", "write_file", path="data.bin", content="now text"),
                call("c2", "write_file", path="made/new.txt", content="created"),
                call("c3", "run_command", command="rm tracked.txt && echo gen > gen.txt"),
            ]
        ),
        text_response("done"),
    )
    first = world.run("run", *BYPASS, "change things")
    assert first.returncode == 0, first.stderr
    assert not (project / "tracked.txt").exists() and (project / "gen.txt").exists()
    sid = session_of(first.stdout)
    (turn,) = user_messages(world, sid)
    index_before = (project / ".git" / "index").read_bytes()
    refs_before = git(project, "for-each-ref")

    rewound = world.run("sessions", "rewind", sid, "--to", turn)
    assert rewound.returncode == 0, rewound.stderr
    assert (project / "data.bin").read_bytes() == b"\x00\xff\xfe\x80 old"
    assert (project / "tracked.txt").read_text() == "tracked\n"  # a command's deletion undone
    assert not (project / "gen.txt").exists()  # a command's new file removed
    assert not (project / "made" / "new.txt").exists()  # a file tool's new file removed
    assert re.search(r"restored\s+data\.bin", rewound.stdout)
    assert re.search(r"removed\s+gen\.txt", rewound.stdout)
    assert "files git ignores" in rewound.stdout  # what no snapshot holds is said, not skipped
    # the user's index, branches and stash are untouched; the work tree is as committed
    assert (project / ".git" / "index").read_bytes() == index_before
    assert git(project, "for-each-ref") == refs_before
    assert git(project, "stash", "list") == ""
    assert git(project, "status", "--porcelain", "--untracked-files=all") == ""


def test_a_file_changed_outside_is_refused_by_name_and_force_overrides(world: CliWorld) -> None:
    configure(world)
    (world.project / "notes.txt").write_text("mine\n")
    world.server.enqueue(
        tool_call_response(
            [
                call("c1", "edit_file", path="notes.txt", old_string="mine", new_string="agent"),
                call("c2", "write_file", path="other.txt", content="x"),
            ]
        ),
        text_response("edited"),
    )
    first = world.run("run", *BYPASS, "edit notes")
    sid = session_of(first.stdout)
    (turn,) = user_messages(world, sid)
    (world.project / "notes.txt").write_text("edited by hand\n")

    refused = world.run("sessions", "rewind", sid, "--to", turn)
    assert refused.returncode == 1
    assert "rewind refused" in refused.stderr and "notes.txt" in refused.stderr
    assert "--force" in refused.stderr
    assert (world.project / "notes.txt").read_text() == "edited by hand\n"
    assert (world.project / "other.txt").exists()  # nothing at all was changed

    forced = world.run("sessions", "rewind", sid, "--to", turn, "--force")
    assert forced.returncode == 0, forced.stderr
    assert (world.project / "notes.txt").read_text() == "mine\n"
    assert not (world.project / "other.txt").exists()
    assert "overwritten" in forced.stdout and "notes.txt" in forced.stdout


def test_a_command_change_outside_git_is_listed_as_not_restored(world: CliWorld) -> None:
    configure(world)
    (world.project / "keep.txt").write_text("keep\n")
    world.server.enqueue(
        tool_call_response(
            [
                call("c1", "run_command", command="rm keep.txt"),
                call("c2", "write_file", path="a.txt", content="a"),
            ]
        ),
        text_response("ok"),
    )
    first = world.run("run", *BYPASS, "clean up")
    sid = session_of(first.stdout)
    (turn,) = user_messages(world, sid)
    rewound = world.run("sessions", "rewind", sid, "--to", turn, "--files-only")
    assert rewound.returncode == 0, rewound.stderr
    assert not (world.project / "a.txt").exists()
    assert not (world.project / "keep.txt").exists()  # cannot be restored...
    assert (  # ...and is named, with why
        "not restored  the changes of run_command (run: rm keep.txt): the project is not in a "
        "git work tree"
    ) in rewound.stdout
    assert "not in a git work tree" in rewound.stdout
    assert "conversation" not in rewound.stdout  # --files-only leaves it


def test_the_conversation_branches_at_the_message(world: CliWorld) -> None:
    configure(world)
    world.server.enqueue(
        text_response("one"),
        tool_call_response([call("c1", "write_file", path="two.txt", content="2")]),
        text_response("two"),
        text_response("again"),
    )
    first = world.run("run", "first question")
    sid = session_of(first.stdout)
    second = world.run("run", *BYPASS, "-s", sid, "second question")
    assert second.returncode == 0, second.stderr
    _, turn = user_messages(world, sid)
    rewound = world.run("sessions", "rewind", sid, "--to", turn)
    assert rewound.returncode == 0, rewound.stderr
    assert not (world.project / "two.txt").exists()
    assert "second question" in rewound.stdout
    again = world.run("run", "-s", sid, "another second")
    assert again.returncode == 0, again.stderr
    sent = world.server.requests[-1].json["messages"]
    texts = [m["content"] for m in sent if m["role"] == "user"]
    assert texts == ["first question", "another second"]
    shown = world.run("sessions", "show", sid)
    assert "another branch starts here" in shown.stdout  # the rewound turn is kept


def test_conversation_only_leaves_the_files_and_bad_targets_are_refused(
    world: CliWorld,
) -> None:
    configure(world)
    world.server.enqueue(
        tool_call_response([call("c1", "write_file", path="kept.txt", content="k")]),
        text_response("ok"),
    )
    first = world.run("run", *BYPASS, "write")
    sid = session_of(first.stdout)
    (turn,) = user_messages(world, sid)
    both = world.run("sessions", "rewind", sid, "--to", turn, "--files-only", "--conversation-only")
    assert both.returncode == 2 and "at most one" in both.stderr
    unknown = world.run("sessions", "rewind", sid, "--to", "msg_nope")
    assert unknown.returncode == 2 and "has no message 'msg_nope'" in unknown.stderr
    talk = world.run("sessions", "rewind", sid, "--to", turn, "--conversation-only")
    assert talk.returncode == 0, talk.stderr
    assert (world.project / "kept.txt").read_text() == "k"
    assert "continues from the start" in talk.stdout
