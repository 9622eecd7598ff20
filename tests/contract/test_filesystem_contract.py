"""The FileSystem contract, run against every implementation (in-memory fake and local disk).

Each case builds the same project through `Sandbox.put` (files on disk for the local adapter, in
the dict for the fake), with the same sensitive entries, home and write roots, and expects the
same answers from every member the port declares. Another name for a case: what the fake must
refuse because the local sandbox refuses it.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from soong_agent.adapters.inmemory.filesystem import InMemoryFileSystem
from soong_agent.adapters.sandbox import LocalFileSystem
from soong_agent.application.permissions.command_review import review_command
from soong_agent.application.permissions.gate import sandbox_problem
from soong_agent.domain.permissions.protected import ProtectedPaths
from soong_agent.ports.errors import SandboxViolation
from soong_agent.ports.filesystem import FileSystem
from soong_agent.ports.shell import ShellAnalysis, SimpleCommand

SENSITIVE = ("~/.ssh", ".env", ".env.*")


@dataclass
class Sandbox:
    """One filesystem under test and a way to put files where it looks for them."""

    fs: FileSystem
    put: Callable[[str, str], None]  # (absolute path, text)
    names: Callable[[str], list[str]]  # every name stored in a folder (absolute), sorted
    project: str
    home: str
    outside: str
    extra_root: str

    def inside(self, rel: str) -> str:
        return posixpath.join(self.fs.root, rel)


def _local(tmp_path: Path, *, write_roots: Sequence[str] | None) -> Sandbox:
    project, home = tmp_path / "project", tmp_path / "home"
    outside, extra = tmp_path / "outside", tmp_path / "extra"
    for folder in (project, home, outside, extra):
        folder.mkdir()

    def put(absolute: str, text: str) -> None:
        Path(absolute).parent.mkdir(parents=True, exist_ok=True)
        Path(absolute).write_text(text, encoding="utf-8")

    def names(folder: str) -> list[str]:
        return sorted(os.listdir(folder))

    fs = LocalFileSystem(
        project=project,
        home_dir=home,
        sensitive=SENSITIVE,
        write_roots=None if write_roots is None else [Path(r) for r in write_roots],
    )
    real = os.path.realpath(tmp_path)
    return Sandbox(fs, put, names, fs.root, fs.home, f"{real}/outside", f"{real}/extra")


def _memory(tmp_path: Path, *, write_roots: Sequence[str] | None) -> Sandbox:
    base = "/mem"
    fs = InMemoryFileSystem(
        root=f"{base}/project",
        home=f"{base}/home",
        sensitive=SENSITIVE,
        write_roots=write_roots,
    )

    def put(absolute: str, text: str) -> None:
        key = posixpath.relpath(absolute, fs.root)
        fs.files[absolute if key.startswith("..") else key] = text.encode("utf-8")

    def names(folder: str) -> list[str]:
        found = set()
        for key in fs.files:
            absolute = key if key.startswith("/") else posixpath.join(fs.root, key)
            if absolute.startswith(folder.rstrip("/") + "/"):
                found.add(absolute[len(folder.rstrip("/")) + 1 :].split("/")[0])
        return sorted(found)

    return Sandbox(fs, put, names, fs.root, fs.home, f"{base}/outside", f"{base}/extra")


MAKERS: dict[str, Callable[..., Sandbox]] = {"inmemory": _memory, "local": _local}


def _populate(box: Sandbox) -> Sandbox:
    for rel, text in {
        "README.md": "hello readme\n",
        "src/a.py": "import os\nprint('a')\n",
        "src/b.py": "print('b')\n",
        "src/deep/c.py": "print('c')\n",
        ".env": "TOKEN=secret\n",
        "conf/.env.local": "DB=secret\n",
        ".hidden": "hidden but fine\n",
    }.items():
        box.put(box.inside(rel), text)
    box.put(f"{box.home}/.ssh/id_rsa", "PRIVATE KEY\n")
    box.put(f"{box.outside}/outside.txt", "outside\n")
    return box


@pytest.fixture(params=sorted(MAKERS))
def box(request: pytest.FixtureRequest, tmp_path: Path) -> Sandbox:
    return _populate(MAKERS[request.param](tmp_path, write_roots=None))


@pytest.fixture(params=sorted(MAKERS))
def two_roots(request: pytest.FixtureRequest, tmp_path: Path) -> Sandbox:
    """A sandbox whose write roots are the project and the folder ``extra`` outside it."""
    base = "/mem" if request.param == "inmemory" else os.path.realpath(tmp_path)
    roots = [f"{base}/project", f"{base}/extra"]
    return _populate(MAKERS[request.param](tmp_path, write_roots=roots))


# --- the declared members ----------------------------------------------------------------------


def test_implements_the_port(box: Sandbox) -> None:
    assert isinstance(box.fs, FileSystem)
    assert box.fs.root == box.project
    assert box.fs.home == box.home


def test_display_path(box: Sandbox) -> None:
    fs = box.fs
    assert fs.display_path("src/a.py") == "src/a.py"
    assert fs.display_path(box.inside("src/a.py")) == "src/a.py"
    assert fs.display_path("src/../README.md") == "README.md"
    assert fs.display_path(".") == "."
    assert fs.display_path(f"{box.outside}/outside.txt") == f"{box.outside}/outside.txt"
    assert fs.display_path("../outside/outside.txt") == f"{box.outside}/outside.txt"
    assert fs.display_path("~/notes.txt") == f"{box.home}/notes.txt"


def test_check_read_allows_the_project(box: Sandbox) -> None:
    fs = box.fs
    assert fs.check_read("src/a.py") == box.inside("src/a.py")
    assert fs.check_read(box.inside("src")) == box.inside("src")
    assert fs.check_read(".") == box.project
    assert fs.check_read("not-yet/there.txt") == box.inside("not-yet/there.txt")


@pytest.mark.parametrize(
    "path",
    [".env", "conf/.env.local", "src/../.env", "~/.ssh/id_rsa", "~/.ssh", "new/.env.prod"],
)
def test_check_read_and_write_refuse_sensitive_paths(box: Sandbox, path: str) -> None:
    with pytest.raises(SandboxViolation, match="sensitive"):
        box.fs.check_read(path)
    with pytest.raises(SandboxViolation, match="sensitive"):
        box.fs.check_write(path)


@pytest.mark.parametrize("path", ["../outside/outside.txt", "~/notes.txt", "/etc/hostname"])
def test_check_read_and_write_refuse_outside_the_project(box: Sandbox, path: str) -> None:
    with pytest.raises(SandboxViolation, match="outside"):
        box.fs.check_read(path)
    with pytest.raises(SandboxViolation, match="outside"):
        box.fs.check_write(path)


def test_check_write_allows_the_write_roots_only(two_roots: Sandbox) -> None:
    fs = two_roots.fs
    assert fs.check_write("src/new.py") == two_roots.inside("src/new.py")
    extra = f"{two_roots.extra_root}/out.txt"
    assert fs.check_write(extra) == extra
    with pytest.raises(SandboxViolation, match="outside"):
        fs.check_read(extra)  # a write root outside the project is not readable
    with pytest.raises(SandboxViolation, match="outside"):
        fs.check_write(f"{two_roots.outside}/x.txt")


async def test_writes_land_in_an_outside_write_root(two_roots: Sandbox) -> None:
    extra = f"{two_roots.extra_root}/sub/out.txt"
    await two_roots.fs.write_text(extra, "written")
    assert await two_roots.fs.exists(extra)
    with pytest.raises(SandboxViolation):
        await two_roots.fs.read_bytes(extra)


def test_sensitive_below(box: Sandbox) -> None:
    fs = box.fs
    assert fs.sensitive_below("conf") == "conf/.env.local"
    assert fs.sensitive_below(".") in {".env", "conf/.env.local"}
    assert fs.sensitive_below("src") is None
    assert fs.sensitive_below("missing") is None
    assert fs.sensitive_below("README.md") is None  # not a folder
    assert fs.sensitive_below("~") == f"{box.home}/.ssh"


def test_expand_shell_word(box: Sandbox) -> None:
    fs = box.fs
    assert fs.expand_shell_word("src/a.py") == ["src/a.py"]
    assert fs.expand_shell_word("missing.txt") == ["missing.txt"]
    assert fs.expand_shell_word("~/x") == [f"{box.home}/x"]
    assert fs.expand_shell_word("~") == [box.home]
    assert sorted(fs.expand_shell_word("src/*.py")) == [
        box.inside("src/a.py"),
        box.inside("src/b.py"),
    ]
    assert sorted(fs.expand_shell_word(".e*")) == [box.inside(".env")]  # hidden files too
    assert sorted(fs.expand_shell_word("~/.ss?/*")) == [f"{box.home}/.ssh/id_rsa"]
    assert fs.expand_shell_word(box.inside("src/?.py"), limit=1) in (
        [box.inside("src/a.py")],
        [box.inside("src/b.py")],
    )
    assert fs.expand_shell_word("nothing*") == []


# --- reading and writing -----------------------------------------------------------------------


def test_path_facts(box: Sandbox) -> None:
    fs = box.fs
    file = fs.path_facts("src/a.py")
    assert (file.lexical, file.resolved) == (box.inside("src/a.py"), box.inside("src/a.py"))
    assert file.exists and not file.is_dir and file.links == 1
    folder = fs.path_facts("src/deep/..")
    assert folder.lexical == box.inside("src") and folder.exists and folder.is_dir
    missing = fs.path_facts("nothing/here.txt")
    assert missing.lexical == box.inside("nothing/here.txt") and not missing.exists
    assert fs.path_facts("~/.ssh/id_rsa").exists  # no sandbox check: facts only
    assert fs.path_facts(f"{box.outside}/outside.txt").lexical == f"{box.outside}/outside.txt"


def test_sensitive_patterns(box: Sandbox) -> None:
    assert box.fs.sensitive_patterns == SENSITIVE


async def test_read_write_round_trip(box: Sandbox) -> None:
    fs = box.fs
    assert await fs.read_bytes("README.md") == b"hello readme\n"
    assert await fs.read_bytes("README.md", max_bytes=5) == b"hello"
    assert await fs.file_size("src/a.py") == len("import os\nprint('a')\n")
    await fs.write_text("new/dir/f.txt", "fresh ✓")
    assert await fs.read_bytes("new/dir/f.txt") == "fresh ✓".encode()
    assert await fs.exists("new/dir/f.txt")
    assert await fs.exists("new/dir")
    assert not await fs.exists("new/other")
    await fs.write_text("new/dir/f.txt", "replaced")
    assert await fs.read_bytes(box.inside("new/dir/f.txt")) == b"replaced"


async def test_writes_leave_nothing_but_the_file(box: Sandbox) -> None:
    fs = box.fs
    before = box.names(box.inside("src"))
    await fs.write_text("src/a.py", "print('replaced')\n")
    await fs.write_text("src/new.py", "print('new')\n")
    await fs.write_text("src/new.py", "print('new again')\n")
    await fs.write_text("made/here.txt", "x")
    assert box.names(box.inside("src")) == sorted([*before, "new.py"])
    assert box.names(box.inside("made")) == ["here.txt"]
    assert await fs.read_bytes("src/new.py") == b"print('new again')\n"
    entries, _ = await fs.list_dir("src", limit=50)
    assert [e.path for e in entries] == ["src/a.py", "src/b.py", "src/deep", "src/new.py"]


async def test_missing_files_and_folders(box: Sandbox) -> None:
    fs = box.fs
    with pytest.raises(FileNotFoundError):
        await fs.read_bytes("missing.txt")
    with pytest.raises(IsADirectoryError):
        await fs.read_bytes("src")
    with pytest.raises(FileNotFoundError):
        await fs.list_dir("missing", limit=10)
    with pytest.raises(NotADirectoryError):
        await fs.list_dir("README.md", limit=10)
    with pytest.raises(IsADirectoryError):
        await fs.write_text("src", "x")


async def test_every_member_refuses_sensitive_and_outside_paths(box: Sandbox) -> None:
    fs = box.fs
    for path in [".env", "conf/.env.local", "~/.ssh/id_rsa", "../outside/outside.txt"]:
        with pytest.raises(SandboxViolation):
            await fs.read_bytes(path)
        with pytest.raises(SandboxViolation):
            await fs.file_size(path)
        with pytest.raises(SandboxViolation):
            await fs.write_text(path, "pwned")
        with pytest.raises(SandboxViolation):
            await fs.exists(path)
    for folder in ["~/.ssh", "../outside"]:
        with pytest.raises(SandboxViolation):
            await fs.list_dir(folder, limit=10)
        with pytest.raises(SandboxViolation):
            await fs.glob("*", base=folder, limit=10)
        with pytest.raises(SandboxViolation):
            await fs.grep("x", base=folder, glob=None, limit=10, ignore_case=False)
    assert await fs.read_bytes("README.md") == b"hello readme\n"


async def test_list_dir_leaves_sensitive_entries_out(box: Sandbox) -> None:
    entries, truncated = await box.fs.list_dir(".", limit=50)
    assert [(e.path, e.is_dir) for e in entries] == [
        (".hidden", False),
        ("README.md", False),
        ("conf", True),
        ("src", True),
    ]
    assert not truncated
    assert [e.size for e in entries if e.path == "README.md"] == [len("hello readme\n")]
    cut, truncated = await box.fs.list_dir("src", limit=1)
    assert len(cut) == 1 and truncated
    conf, _ = await box.fs.list_dir("conf", limit=10)
    assert conf == []


async def test_glob_finds_files_and_never_sensitive_ones(box: Sandbox) -> None:
    fs = box.fs
    found = await fs.glob("**/*.py", base=".", limit=50)
    assert sorted(found.items) == ["src/a.py", "src/b.py", "src/deep/c.py"]
    assert not found.truncated
    assert sorted((await fs.glob("*.py", base="src", limit=50)).items) == ["src/a.py", "src/b.py"]
    assert (await fs.glob("**/.env*", base=".", limit=50)).items == []
    cut = await fs.glob("**/*.py", base=".", limit=2)
    assert len(cut.items) == 2 and cut.truncated


async def test_grep_finds_lines_and_never_sensitive_ones(box: Sandbox) -> None:
    fs = box.fs
    matches, truncated = await fs.grep("print", base="src", glob=None, limit=50, ignore_case=False)
    assert sorted((m.path, m.line_number, m.line) for m in matches) == [
        ("src/a.py", 2, "print('a')"),
        ("src/b.py", 1, "print('b')"),
        ("src/deep/c.py", 1, "print('c')"),
    ]
    assert not truncated
    one, _ = await fs.grep("IMPORT", base="src/a.py", glob=None, limit=50, ignore_case=True)
    assert [(m.path, m.line) for m in one] == [("src/a.py", "import os")]
    secrets, _ = await fs.grep("secret", base=".", glob=None, limit=50, ignore_case=True)
    assert secrets == []


# --- the permission gate's command checks hold for both ----------------------------------------


def _line(*commands: SimpleCommand) -> ShellAnalysis:
    return ShellAnalysis(commands)


@pytest.mark.parametrize(
    ("analysis", "refused"),
    [
        (_line(SimpleCommand(("cat", "src/a.py"))), False),
        (_line(SimpleCommand(("cat", ".env"))), True),
        (_line(SimpleCommand(("cat", "./.e*"))), True),  # the glob names .env
        (_line(SimpleCommand(("cat", "~/.ssh/id_rsa"))), True),
        (_line(SimpleCommand(("cat", "../outside/outside.txt"))), True),
        (_line(SimpleCommand(("wc",), reads_from=("conf/.env.local",))), True),
        (_line(SimpleCommand(("echo", "x"), writes_to=("out.txt",))), False),
        (_line(SimpleCommand(("echo", "x"), writes_to=("../outside/x",))), True),
        (_line(SimpleCommand(("echo", "x"), writes_to=("/dev/null",))), False),
        (_line(SimpleCommand(("grep", "-r", "TOKEN", "."))), True),
        (_line(SimpleCommand(("grep", "-r", "print", "src"))), False),
        (_line(SimpleCommand(("tar", "czf", "/dev/null", "conf"))), True),
        (_line(SimpleCommand(("cat", "README.md"))), False),
        (_line(SimpleCommand(("cd", "conf")), SimpleCommand(("cat", ".env.local"))), True),
        (_line(SimpleCommand(("cd", "src")), SimpleCommand(("cat", "a.py"))), False),
        (_line(SimpleCommand(("cd",)), SimpleCommand(("ls",))), True),  # the home
        (_line(SimpleCommand(("git", "show", "HEAD:.env"))), True),
        (_line(SimpleCommand(("git", "show", "HEAD:README.md"))), False),
        (_line(SimpleCommand(("git", "show", "HEAD"))), True),
        (_line(SimpleCommand(("git", "show", "HEAD", "--", "README.md"))), False),
        (_line(SimpleCommand(("git", "diff", "--", "src"))), True),  # a folder
    ],
)
def test_command_paths_are_held_to_the_same_policy(
    box: Sandbox, analysis: ShellAnalysis, refused: bool
) -> None:
    problem = sandbox_problem(analysis, box.fs)
    assert (problem is not None) is refused, problem


def test_a_bare_name_is_checked_when_it_exists(box: Sandbox) -> None:
    box.put(box.inside("conf/key.txt"), "k\n")
    config = sandbox_problem(_line(SimpleCommand(("cat", "key.txt"))), box.fs)
    assert config is None  # no such file in the project folder: a word, not a path
    sensitive = _line(SimpleCommand(("cd", "conf")), SimpleCommand(("cat", ".env.local")))
    assert sandbox_problem(sensitive, box.fs) is not None


def test_protected_paths_make_a_command_ask(box: Sandbox) -> None:
    protected = ProtectedPaths([".git", ".vscode"], project=box.project, home=box.home)
    asks = [
        SimpleCommand(("echo", "x"), writes_to=(".git/hooks/pre-commit",)),
        SimpleCommand(("cp", "README.md", ".vscode/settings.json")),
        SimpleCommand(("git", "config", "core.hooksPath", ".")),
    ]
    for command in asks:
        review = review_command(_line(command), box.fs, protected=protected)
        assert review.problem is None and review.protected, command
    moved = _line(SimpleCommand(("cd", ".git")), SimpleCommand(("touch", "config")))
    assert review_command(moved, box.fs, protected=protected).protected
    reads = _line(SimpleCommand(("cat", ".git/config")), SimpleCommand(("ls", ".vscode")))
    assert review_command(reads, box.fs, protected=protected).protected == ()
