"""The approval prompt of the installed CLI shows what is approved: the diff of an edit or a
write (cut when long, whole after ``d``), never with colour codes when stderr is a pipe; the
answers 1/2/3 keep their meaning, and a preview that cannot be made still asks."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e


def call(tool: str, **arguments: object) -> object:
    return tool_call_response([("c1", tool, json.dumps(arguments))])


def coloured_terminal_env(world: CliWorld) -> None:
    """What would colour the output if stderr were a terminal."""
    world.env.pop("NO_COLOR", None)
    world.env["TERM"] = "xterm-256color"


def test_the_edit_prompt_shows_the_removed_and_added_lines(world: CliWorld) -> None:
    (world.project / "app.py").write_text("def main():\n    return 1\n", encoding="utf-8")
    world.server.enqueue(
        call("edit_file", path="app.py", old_string="return 1", new_string="return 2"),
        text_response("edited"),
    )
    coloured_terminal_env(world)
    result = world.run("run", "change it", input="1\n")
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert "? edit_file wants to edit app.py" in err
    assert "    --- a/app.py\n    +++ b/app.py\n" in err
    assert "    -    return 1\n    +    return 2\n" in err
    assert err.index("-    return 1") < err.index("answer [1/2/3]: 1")
    assert "\x1b[" not in err + result.stdout  # stderr is a pipe: no colour codes
    assert (world.project / "app.py").read_text(encoding="utf-8") == "def main():\n    return 2\n"


def test_a_new_file_is_shown_as_its_first_lines_and_a_denial_still_denies(
    world: CliWorld,
) -> None:
    world.server.enqueue(
        call("write_file", path="hello.txt", content="hi\nthere\n"), text_response("ok")
    )
    result = world.run("run", "create it", input="3\n")
    assert result.returncode == 0, result.stderr
    assert "    --- /dev/null\n    +++ b/hello.txt\n    @@ -0,0 +1,2 @@\n    +hi\n" in result.stderr
    assert not (world.project / "hello.txt").exists()


def test_a_long_diff_is_cut_with_a_count_and_d_shows_it_whole(world: CliWorld) -> None:
    old = "".join(f"line {n}\n" for n in range(100))
    new = "".join(f"LINE {n}\n" for n in range(100))
    (world.project / "big.txt").write_text(old, encoding="utf-8")
    world.server.enqueue(call("write_file", path="big.txt", content=new), text_response("ok"))
    coloured_terminal_env(world)
    result = world.run("run", "rewrite it", input="d\n1\n")
    assert result.returncode == 0, result.stderr
    first, again = result.stderr.split("answer [1/2/3/d]: d\n")
    assert "    … 163 more lines; answer d to see the whole diff\n" in first
    assert "+LINE 99" not in first
    assert "    -line 99\n" in again and "    +LINE 99\n" in again
    assert "more lines" not in again and "answer [1/2/3/d]: 1\n" in again
    assert "\x1b[" not in result.stderr
    assert (world.project / "big.txt").read_text(encoding="utf-8") == new


def test_a_preview_that_cannot_be_made_still_asks(world: CliWorld) -> None:
    outside = world.home.parent / "outside"
    outside.mkdir()
    config = world.home / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8")
        + f'[tools]\nallowed_write_roots = ["<project>", "{outside}"]\n',
        encoding="utf-8",
    )
    target = outside / "notes.txt"
    world.server.enqueue(call("write_file", path=str(target), content="x\n"), text_response("ok"))
    result = world.run("run", "write outside", input="1\n")
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert "    (no preview: SandboxViolation: read of " in err  # reads stay in the project
    assert err.index("(no preview") < err.index("3) deny") < err.index("]: 1\n")
    assert target.read_text(encoding="utf-8") == "x\n"
