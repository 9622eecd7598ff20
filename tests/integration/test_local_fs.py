"""LocalFileSystem against real files: confinement, symlinks, hard links, sensitive paths, walks."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from soong_agent.adapters.sandbox import LocalFileSystem, safe_io
from soong_agent.ports.errors import SandboxViolation, ToolInputError
from soong_agent.ports.filesystem import FileSystem

OUTSIDE_TEXT = "outside: must never change"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text(OUTSIDE_TEXT)
    return path


@pytest.fixture
def fs(project: Path) -> LocalFileSystem:
    return LocalFileSystem(project=project)


def test_implements_the_port(fs: LocalFileSystem, project: Path) -> None:
    assert isinstance(fs, FileSystem)
    assert fs.root == os.path.realpath(project)


# --- inside the project ----------------------------------------------------------------------


async def test_relative_and_absolute_paths_inside_work(fs: LocalFileSystem, project: Path) -> None:
    await fs.write_text("notes.txt", "héllo\n")
    assert (project / "notes.txt").read_text(encoding="utf-8") == "héllo\n"
    absolute = str(project / "notes.txt")
    assert await fs.read_bytes(absolute) == "héllo\n".encode()
    assert await fs.read_bytes("notes.txt", max_bytes=2) == b"h\xc3"
    assert await fs.file_size("./notes.txt") == len("héllo\n".encode())
    assert await fs.exists("notes.txt")
    assert not await fs.exists("missing.txt")
    await fs.write_text(str(project / "abs.txt"), "x")
    assert (project / "abs.txt").read_text() == "x"
    assert fs.display_path(absolute) == "notes.txt"
    assert fs.display_path("sub/../notes.txt") == "notes.txt"
    assert fs.check_write("notes.txt") == os.path.realpath(project / "notes.txt")


async def test_write_replaces_content_and_creates_parents(
    fs: LocalFileSystem, project: Path
) -> None:
    (project / "a.txt").write_text("a long original content")
    await fs.write_text("a.txt", "short")
    assert (project / "a.txt").read_text() == "short"
    await fs.write_text("deep/er/still/new.txt", "new")
    assert (project / "deep/er/still/new.txt").read_text() == "new"


async def test_missing_file_and_directory_errors(fs: LocalFileSystem, project: Path) -> None:
    (project / "folder").mkdir()
    with pytest.raises(FileNotFoundError) as info:
        await fs.read_bytes("nope/missing.txt")
    assert info.value.filename == "nope/missing.txt"
    with pytest.raises(FileNotFoundError):
        await fs.file_size("missing.txt")
    with pytest.raises(IsADirectoryError):
        await fs.read_bytes("folder")
    with pytest.raises(IsADirectoryError):
        await fs.read_bytes(".")
    with pytest.raises(IsADirectoryError):
        await fs.write_text("folder", "x")
    assert (project / "folder").is_dir()


# --- outside the project ---------------------------------------------------------------------


async def test_dotdot_outside_is_refused(fs: LocalFileSystem, outside: Path) -> None:
    with pytest.raises(SandboxViolation) as info:
        await fs.read_bytes("../outside/secret.txt")
    assert "outside the project" in str(info.value)
    assert "../outside/secret.txt" in str(info.value)
    with pytest.raises(SandboxViolation):
        await fs.write_text("../outside/secret.txt", "pwned")
    with pytest.raises(SandboxViolation):
        await fs.write_text("../outside/new.txt", "pwned")
    with pytest.raises(SandboxViolation):
        await fs.write_text("sub/../../outside/new2.txt", "pwned")
    with pytest.raises(SandboxViolation):
        await fs.exists("../outside/secret.txt")
    with pytest.raises(SandboxViolation):
        await fs.list_dir("..", limit=10)
    with pytest.raises(SandboxViolation):
        await fs.glob("*", base="..", limit=10)
    with pytest.raises(SandboxViolation):
        await fs.grep("secret", base="../outside", glob=None, limit=10, ignore_case=False)
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT
    assert not (outside / "new.txt").exists()
    assert not (outside / "new2.txt").exists()


async def test_absolute_path_outside_is_refused(fs: LocalFileSystem, outside: Path) -> None:
    with pytest.raises(SandboxViolation):
        await fs.read_bytes(str(outside / "secret.txt"))
    with pytest.raises(SandboxViolation):
        await fs.file_size(str(outside / "secret.txt"))
    with pytest.raises(SandboxViolation):
        await fs.write_text(str(outside / "secret.txt"), "pwned")
    with pytest.raises(SandboxViolation):
        fs.check_write(str(outside / "other.txt"))
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT
    assert not (outside / "other.txt").exists()
    assert fs.display_path(str(outside / "secret.txt")) == str(outside / "secret.txt")


async def test_symlink_to_outside_file_is_refused(
    fs: LocalFileSystem, project: Path, outside: Path
) -> None:
    (project / "link.txt").symlink_to(outside / "secret.txt")
    (project / "dangling.txt").symlink_to(outside / "not-yet.txt")
    with pytest.raises(SandboxViolation):
        await fs.read_bytes("link.txt")
    with pytest.raises(SandboxViolation):
        await fs.write_text("link.txt", "pwned")
    with pytest.raises(SandboxViolation):
        await fs.write_text("dangling.txt", "pwned")
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT
    assert not (outside / "not-yet.txt").exists()
    # Walks neither report nor search it.
    assert (await fs.glob("*", base=".", limit=10)).items == []
    matches, _ = await fs.grep("outside", base=".", glob=None, limit=10, ignore_case=False)
    assert matches == []


async def test_symlink_inside_the_project_is_followed(fs: LocalFileSystem, project: Path) -> None:
    (project / "real.txt").write_text("real")
    (project / "alias.txt").symlink_to(project / "real.txt")
    assert await fs.read_bytes("alias.txt") == b"real"
    await fs.write_text("alias.txt", "changed")
    assert (project / "real.txt").read_text() == "changed"
    # ripgrep never follows symlinks: glob lists the real file only, grep searches it once.
    assert (await fs.glob("*.txt", base=".", limit=10)).items == ["real.txt"]
    matches, _ = await fs.grep("changed", base=".", glob=None, limit=10, ignore_case=False)
    assert [m.path for m in matches] == ["real.txt"]


async def test_symlinked_parent_directory_is_refused(
    fs: LocalFileSystem, project: Path, outside: Path
) -> None:
    (project / "linkdir").symlink_to(outside, target_is_directory=True)
    with pytest.raises(SandboxViolation):
        await fs.write_text("linkdir/new.txt", "pwned")
    with pytest.raises(SandboxViolation):
        await fs.write_text("linkdir/secret.txt", "pwned")
    with pytest.raises(SandboxViolation):
        await fs.write_text("linkdir/deeper/new.txt", "pwned")
    with pytest.raises(SandboxViolation):
        await fs.read_bytes("linkdir/secret.txt")
    with pytest.raises(SandboxViolation):
        await fs.list_dir("linkdir", limit=10)
    assert not (outside / "new.txt").exists()
    assert not (outside / "deeper").exists()
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT
    assert (await fs.glob("**/*", base=".", limit=10)).items == []


async def test_hard_link_to_outside_file_is_refused(
    fs: LocalFileSystem, project: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", project / "hard.txt")
    with pytest.raises(SandboxViolation):
        fs.check_write("hard.txt")
    with pytest.raises(SandboxViolation):
        await fs.write_text("hard.txt", "pwned")
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT


# --- sensitive paths -------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A fake home that is also the project, holding secrets."""
    path = tmp_path / "home"
    (path / ".ssh").mkdir(parents=True)
    (path / ".ssh" / "id_rsa").write_text("PRIVATE KEY token")
    (path / ".env").write_text("API_KEY=token")
    (path / ".env.local").write_text("LOCAL_KEY=token")
    (path / "app").mkdir()
    (path / "app" / ".env").write_text("NESTED=token")
    (path / "app" / "main.py").write_text("print('token')\n")
    return path


@pytest.fixture
def home_fs(home: Path) -> LocalFileSystem:
    return LocalFileSystem(project=home, home_dir=home, sensitive=["~/.ssh", ".env", ".env.*"])


@pytest.mark.parametrize(
    "path", [".env", ".env.local", "app/.env", ".ssh/id_rsa", "~/.ssh/id_rsa", ".ssh"]
)
async def test_sensitive_paths_are_not_read_or_written(
    home_fs: LocalFileSystem, home: Path, path: str
) -> None:
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    with pytest.raises(SandboxViolation):
        await home_fs.read_bytes(path)
    with pytest.raises(SandboxViolation):
        await home_fs.write_text(path, "pwned")
    with pytest.raises(SandboxViolation):
        home_fs.check_write(path)
    with pytest.raises(SandboxViolation):
        await home_fs.exists(path)
    after = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    assert after == before


async def test_sensitive_paths_are_not_created(home_fs: LocalFileSystem, home: Path) -> None:
    for path in [".env.production", "app/sub/.env", "~/.ssh/new_key", ".ssh/config"]:
        with pytest.raises(SandboxViolation):
            await home_fs.write_text(path, "x")
    assert not (home / ".env.production").exists()
    assert not (home / "app" / "sub").exists()
    assert sorted(p.name for p in (home / ".ssh").iterdir()) == ["id_rsa"]


async def test_symlink_to_a_sensitive_file_is_refused(home_fs: LocalFileSystem, home: Path) -> None:
    (home / "innocent.txt").symlink_to(home / ".env")
    with pytest.raises(SandboxViolation):
        await home_fs.read_bytes("innocent.txt")
    with pytest.raises(SandboxViolation):
        await home_fs.write_text("innocent.txt", "x")
    assert (home / ".env").read_text() == "API_KEY=token"


async def test_sensitive_paths_are_not_listed_globbed_or_grepped(
    home_fs: LocalFileSystem,
) -> None:
    entries, truncated = await home_fs.list_dir(".", limit=50)
    assert [entry.path for entry in entries] == ["app"]
    assert not truncated
    app_entries, _ = await home_fs.list_dir("app", limit=50)
    assert [entry.path for entry in app_entries] == ["app/main.py"]
    listing = await home_fs.glob("**/*", base=".", limit=50)
    assert listing.items == ["app/main.py"]
    assert (await home_fs.glob(".env*", base=".", limit=50)).items == []
    matches, _ = await home_fs.grep("token", base=".", glob=None, limit=50, ignore_case=False)
    assert [(m.path, m.line_number) for m in matches] == [("app/main.py", 1)]
    with pytest.raises(SandboxViolation):
        await home_fs.glob("*", base=".ssh", limit=50)
    with pytest.raises(SandboxViolation):
        await home_fs.grep("KEY", base=".ssh", glob=None, limit=50, ignore_case=False)


async def test_absolute_sensitive_path(project: Path) -> None:
    (project / "private").mkdir()
    (project / "private" / "data.txt").write_text("keep")
    fs = LocalFileSystem(project=project, sensitive=[str(project / "private")])
    with pytest.raises(SandboxViolation):
        await fs.read_bytes("private/data.txt")
    with pytest.raises(SandboxViolation):
        await fs.write_text("private/data.txt", "x")
    assert (project / "private" / "data.txt").read_text() == "keep"
    assert (await fs.list_dir(".", limit=10))[0] == []


# --- listing and walks -----------------------------------------------------------------------


@pytest.fixture
def tree(project: Path) -> Path:
    files = {
        "README.md": "# Title\nTODO: write\n",
        "setup.py": "import os\n",
        "src/app.py": "def main():\n    return 'Hello'\n",
        "src/util.py": "# todo later\nHELLO = 1\n",
        "src/pkg/deep.py": "x = 'hello world'\n",
        "src/pkg/data.json": '{"hello": 1}\n',
        "src/blob.bin": "hello\x00binary\n",
        ".git/config.py": "hello\n",
        "node_modules/lib/index.py": "hello\n",
        ".venv/lib/site.py": "hello\n",
        "src/__pycache__/app.cpython.py": "hello\n",
        "docs/guide.txt": "Hello again\n",
    }
    for name, text in files.items():
        target = project / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return project


async def test_list_dir_is_sorted_marks_dirs_and_truncates(fs: LocalFileSystem, tree: Path) -> None:
    entries, truncated = await fs.list_dir(".", limit=100)
    names = [entry.path for entry in entries]
    assert names == sorted(names)
    assert "src" in names
    assert "README.md" in names
    by_name = {entry.path: entry for entry in entries}
    assert by_name["src"].is_dir
    assert not by_name["README.md"].is_dir
    assert by_name["README.md"].size == len("# Title\nTODO: write\n")
    assert not truncated
    first, truncated = await fs.list_dir(".", limit=2)
    assert [entry.path for entry in first] == names[:2]
    assert truncated
    sub, _ = await fs.list_dir("src/pkg", limit=10)
    assert [entry.path for entry in sub] == ["src/pkg/data.json", "src/pkg/deep.py"]
    with pytest.raises(NotADirectoryError):
        await fs.list_dir("setup.py", limit=10)
    with pytest.raises(FileNotFoundError):
        await fs.list_dir("nothing", limit=10)


async def test_glob_recursive_sorted_and_skips_tool_dirs(fs: LocalFileSystem, tree: Path) -> None:
    listing = await fs.glob("**/*.py", base=".", limit=100)
    assert listing.items == ["setup.py", "src/app.py", "src/pkg/deep.py", "src/util.py"]
    assert not listing.truncated
    assert (await fs.glob("*.py", base=".", limit=100)).items == ["setup.py"]
    assert (await fs.glob("src/*.py", base=".", limit=100)).items == ["src/app.py", "src/util.py"]
    assert (await fs.glob("**/*.py", base="src/pkg", limit=100)).items == ["src/pkg/deep.py"]
    assert (await fs.glob("src/**", base=".", limit=100)).items == [
        "src/app.py",
        "src/blob.bin",
        "src/pkg/data.json",
        "src/pkg/deep.py",
        "src/util.py",
    ]
    braces = await fs.glob("**/*.{json,md}", base=".", limit=100)
    assert braces.items == ["README.md", "src/pkg/data.json"]
    absolute = await fs.glob(str(tree / "src" / "*.py"), base=".", limit=100)
    assert absolute.items == ["src/app.py", "src/util.py"]


async def test_glob_limit_truncates(fs: LocalFileSystem, tree: Path) -> None:
    listing = await fs.glob("**/*.py", base=".", limit=2)
    assert listing.items == ["setup.py", "src/app.py"]
    assert listing.truncated
    exact = await fs.glob("**/*.py", base=".", limit=4)
    assert len(exact.items) == 4
    assert not exact.truncated


async def test_glob_errors(fs: LocalFileSystem, tree: Path) -> None:
    with pytest.raises(ToolInputError):
        await fs.glob("", base=".", limit=10)
    with pytest.raises(ToolInputError):
        await fs.glob("/elsewhere/*.py", base=".", limit=10)
    with pytest.raises(NotADirectoryError):
        await fs.glob("*", base="setup.py", limit=10)
    assert (await fs.glob("missing/*.py", base=".", limit=10)).items == []


async def test_grep_basics(fs: LocalFileSystem, tree: Path) -> None:
    matches, truncated = await fs.grep("hello", base=".", glob=None, limit=100, ignore_case=False)
    assert [(m.path, m.line_number, m.line) for m in matches] == [
        ("src/pkg/data.json", 1, '{"hello": 1}'),
        ("src/pkg/deep.py", 1, "x = 'hello world'"),
    ]
    assert not truncated  # the binary file and the skipped folders are not searched


async def test_grep_ignore_case_and_glob_filter(fs: LocalFileSystem, tree: Path) -> None:
    matches, _ = await fs.grep("hello", base=".", glob="*.py", limit=100, ignore_case=True)
    assert [(m.path, m.line_number) for m in matches] == [
        ("src/app.py", 2),
        ("src/pkg/deep.py", 1),
        ("src/util.py", 2),
    ]
    in_src, _ = await fs.grep("todo", base="src", glob=None, limit=100, ignore_case=True)
    assert [m.path for m in in_src] == ["src/util.py"]
    path_glob, _ = await fs.grep("hello", base=".", glob="src/*.py", limit=100, ignore_case=True)
    assert [m.path for m in path_glob] == ["src/app.py", "src/util.py"]
    one_file, _ = await fs.grep("TODO", base="README.md", glob="*.py", limit=10, ignore_case=False)
    assert [(m.path, m.line_number) for m in one_file] == [("README.md", 2)]


async def test_grep_limit_and_invalid_regex(fs: LocalFileSystem, tree: Path) -> None:
    matches, truncated = await fs.grep("o", base=".", glob=None, limit=2, ignore_case=True)
    assert len(matches) == 2
    assert truncated
    with pytest.raises(ToolInputError) as info:
        await fs.grep("(unclosed", base=".", glob=None, limit=10, ignore_case=False)
    assert "(unclosed" in str(info.value)


async def test_grep_skips_binary_and_huge_files(fs: LocalFileSystem, project: Path) -> None:
    (project / "bin.dat").write_bytes(b"needle\x00" + b"needle\n" * 10)
    (project / "huge.txt").write_bytes(b"needle\n" + b"x" * (2 * 1024 * 1024 + 10))
    (project / "ok.txt").write_text("a\r\nneedle here\r\n")
    matches, truncated = await fs.grep("needle", base=".", glob=None, limit=10, ignore_case=False)
    assert [(m.path, m.line_number, m.line) for m in matches] == [("ok.txt", 2, "needle here")]
    assert not truncated


# --- write roots and the temp directory ------------------------------------------------------


async def test_extra_write_root_outside_the_project(
    project: Path, outside: Path, tmp_path: Path
) -> None:
    fs = LocalFileSystem(project=project, write_roots=[project, outside])
    await fs.write_text(str(outside / "out.txt"), "ok")
    assert (outside / "out.txt").read_text() == "ok"
    assert await fs.exists(str(outside / "out.txt"))
    with pytest.raises(SandboxViolation):  # reads stay inside the project
        await fs.read_bytes(str(outside / "out.txt"))
    with pytest.raises(SandboxViolation):
        await fs.write_text(str(tmp_path / "elsewhere.txt"), "no")
    assert not (tmp_path / "elsewhere.txt").exists()


async def test_write_roots_exclude_the_project_when_not_listed(
    project: Path, outside: Path
) -> None:
    fs = LocalFileSystem(project=project, write_roots=[outside])
    with pytest.raises(SandboxViolation):
        await fs.write_text("inside.txt", "no")
    assert not (project / "inside.txt").exists()


@pytest.mark.parametrize("allowed", [False, True])
async def test_temp_dir_write_follows_allow_tmp_write(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, allowed: bool
) -> None:
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    fs = LocalFileSystem(project=project, allow_tmp_write=allowed)
    target = system_tmp / "scratch" / "out.txt"
    if allowed:
        await fs.write_text(str(target), "scratch")
        assert target.read_text() == "scratch"
    else:
        with pytest.raises(SandboxViolation):
            await fs.write_text(str(target), "scratch")
        assert not target.exists()
        assert not target.parent.exists()


# --- races: a symlink swapped in between the check and the open ------------------------------


def _wrap(
    obj: object, name: str, after: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Make `obj.name` run `after` once the real call returned (the check passed)."""
    real = getattr(obj, name)

    def wrapped(*args: object, **kwargs: object) -> object:
        result = real(*args, **kwargs)
        after()
        return result

    monkeypatch.setattr(obj, name, wrapped)


def _swap_for_symlink(path: Path, target: Path) -> Callable[[], None]:
    def swap() -> None:
        if path.is_dir() and not path.is_symlink():
            for child in path.iterdir():
                child.unlink()
            path.rmdir()
        else:
            path.unlink()
        path.symlink_to(target)

    return swap


async def test_file_swapped_for_symlink_before_write_is_caught(
    fs: LocalFileSystem, project: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "victim.txt").write_text("inside")
    swap = _swap_for_symlink(project / "victim.txt", outside / "secret.txt")
    _wrap(fs.policy, "check_write", swap, monkeypatch)
    with pytest.raises(SandboxViolation):
        await fs.write_text("victim.txt", "pwned")
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT


async def test_parent_swapped_for_symlink_before_write_is_caught(
    fs: LocalFileSystem, project: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "sub").mkdir()
    (project / "sub" / "secret.txt").write_text("inside")
    _wrap(fs.policy, "check_write", _swap_for_symlink(project / "sub", outside), monkeypatch)
    with pytest.raises(SandboxViolation):
        await fs.write_text("sub/secret.txt", "pwned")
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT


async def test_file_swapped_for_symlink_before_read_is_caught(
    fs: LocalFileSystem, project: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "data.txt").write_text("inside")
    swap = _swap_for_symlink(project / "data.txt", outside / "secret.txt")
    _wrap(fs.policy, "check_read", swap, monkeypatch)
    with pytest.raises(SandboxViolation):
        await fs.read_bytes("data.txt")


async def test_parent_swapped_for_symlink_before_read_is_caught(
    fs: LocalFileSystem, project: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "sub").mkdir()
    (project / "sub" / "secret.txt").write_text("inside")
    _wrap(fs.policy, "check_read", _swap_for_symlink(project / "sub", outside), monkeypatch)
    with pytest.raises(SandboxViolation):
        await fs.read_bytes("sub/secret.txt")


async def test_file_replaced_after_stat_is_caught_by_inode_check(
    fs: LocalFileSystem, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "data.txt").write_text("checked")
    (project / "other.txt").write_text("replacement")
    real_open = safe_io.open_beneath

    def replacing_open(*args: object, **kwargs: object) -> int:
        os.replace(project / "other.txt", project / "data.txt")
        return real_open(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(safe_io, "open_beneath", replacing_open)
    with pytest.raises(SandboxViolation):
        await fs.read_bytes("data.txt")


def test_low_level_open_refuses_a_symlink_swapped_in(
    fs: LocalFileSystem, project: Path, outside: Path
) -> None:
    (project / "victim.txt").write_text("inside")
    resolved = fs.check_write("victim.txt")
    assert resolved == os.path.realpath(project / "victim.txt")
    _swap_for_symlink(project / "victim.txt", outside / "secret.txt")()
    with pytest.raises(SandboxViolation):
        safe_io.open_beneath(fs.root, ["victim.txt"], safe_io.WRITE_FLAGS, display="victim.txt")
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT


# --- kernel aliases: /proc and /dev ----------------------------------------------------------


def _snapshot(*folders: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for folder in folders for p in folder.rglob("*") if p.is_file()}


async def _refused_everywhere(fs: LocalFileSystem, path: str) -> None:
    """`path` can be neither read, sized, written, checked, tested, listed nor searched."""
    with pytest.raises(SandboxViolation):
        await fs.read_bytes(path)
    with pytest.raises(SandboxViolation):
        await fs.file_size(path)
    with pytest.raises(SandboxViolation):
        await fs.write_text(path, "pwned")
    with pytest.raises(SandboxViolation):
        fs.check_write(path)
    with pytest.raises(SandboxViolation):
        fs.check_read(path)
    with pytest.raises(SandboxViolation):
        await fs.exists(path)


async def test_proc_self_root_aliases_are_refused(
    fs: LocalFileSystem, project: Path, outside: Path
) -> None:
    (project / "inside.txt").write_text("inside")
    before = _snapshot(project, outside)
    for target in [outside / "secret.txt", outside / "new.txt", project / "inside.txt"]:
        await _refused_everywhere(fs, f"/proc/self/root{target}")
        await _refused_everywhere(fs, f"/proc/{os.getpid()}/root{target}")
    with pytest.raises(SandboxViolation):
        await fs.list_dir(f"/proc/self/root{project}", limit=10)
    with pytest.raises(SandboxViolation):
        await fs.glob("*", base=f"/proc/self/root{project}", limit=10)
    with pytest.raises(SandboxViolation):
        await fs.grep("x", base=f"/proc/self/root{outside}", glob=None, limit=10, ignore_case=True)
    assert _snapshot(project, outside) == before
    assert not (outside / "new.txt").exists()


async def test_proc_self_cwd_is_refused(
    fs: LocalFileSystem, project: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "inside.txt").write_text("inside")
    for cwd, name in [(project, "inside.txt"), (outside, "secret.txt"), (outside, "made.txt")]:
        monkeypatch.chdir(cwd)
        await _refused_everywhere(fs, f"/proc/self/cwd/{name}")
        await _refused_everywhere(fs, f"/proc/{os.getpid()}/cwd/{name}")
    assert (project / "inside.txt").read_text() == "inside"
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT
    assert not (outside / "made.txt").exists()


async def test_fd_aliases_are_refused(fs: LocalFileSystem, project: Path, outside: Path) -> None:
    (project / "inside.txt").write_text("inside")
    fds = [
        os.open(outside / "secret.txt", os.O_RDWR),
        os.open(project / "inside.txt", os.O_RDWR),
    ]
    try:
        for fd in fds:
            for alias in (f"/dev/fd/{fd}", f"/proc/self/fd/{fd}", f"/proc/thread-self/fd/{fd}"):
                await _refused_everywhere(fs, alias)
    finally:
        for fd in fds:
            os.close(fd)
    for device in ["/dev/null", "/dev/zero", "/dev/stdin", "/sys/kernel"]:
        await _refused_everywhere(fs, device)
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT
    assert (project / "inside.txt").read_text() == "inside"


async def test_symlink_into_proc_is_refused(
    fs: LocalFileSystem, project: Path, outside: Path
) -> None:
    (project / "escape").symlink_to(f"/proc/self/root{outside}")
    (project / "fdlink").symlink_to("/dev/fd/0")
    for path in ["escape/secret.txt", "escape/new.txt", "fdlink"]:
        await _refused_everywhere(fs, path)
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT
    assert not (outside / "new.txt").exists()
    assert (await fs.glob("**/*", base=".", limit=10)).items == []
    matches, _ = await fs.grep("outside", base=".", glob=None, limit=10, ignore_case=False)
    assert matches == []


# --- check_read / check_write for run_command --------------------------------------------------


def test_check_read_and_check_write_share_the_policy(
    home_fs: LocalFileSystem, home: Path, outside: Path
) -> None:
    assert home_fs.check_read("app/main.py") == os.path.realpath(home / "app" / "main.py")
    assert home_fs.check_read(".") == os.path.realpath(home)
    assert home_fs.check_read("app") == os.path.realpath(home / "app")
    assert home_fs.check_read("not-yet/there.txt") == os.path.realpath(home) + "/not-yet/there.txt"
    assert home_fs.check_write("app/new.py") == os.path.realpath(home / "app" / "new.py")
    for path in [".env", "app/.env", "~/.ssh/id_rsa", ".ssh", str(outside), "../outside"]:
        with pytest.raises(SandboxViolation):
            home_fs.check_read(path)
        with pytest.raises(SandboxViolation):
            home_fs.check_write(path)
    assert not (home / "app" / "new.py").exists()


# --- the soong-agent home's files --------------------------------------------------------------


@pytest.fixture
def agent_home(project: Path) -> Path:
    """A SOONG_AGENT_HOME inside the project, as the config loader expands it (absolute)."""
    home = project / ".soong-agent"
    home.mkdir()
    (home / "config.toml").write_text('[model]\napi_key_env = "TOKEN_VAR"\n')
    for name in ["sessions.sqlite", "sessions.sqlite-wal", "sessions.sqlite-shm"]:
        (home / name).write_text(f"{name} TOKEN_VAR data\n")
    (home / "notes.md").write_text("TOKEN_VAR is fine here\n")
    (project / "config.toml").write_text("TOKEN_VAR project config\n")
    return home


@pytest.mark.parametrize(
    "path",
    [
        ".soong-agent/config.toml",
        ".soong-agent/sessions.sqlite",
        ".soong-agent/sessions.sqlite-wal",
        ".soong-agent/sessions.sqlite-shm",
        ".soong-agent/sessions.sqlite-journal",
        "./.soong-agent/../.soong-agent/config.toml",
    ],
)
async def test_agent_home_files_inside_the_project_are_sensitive(
    project: Path, agent_home: Path, path: str
) -> None:
    fs = LocalFileSystem(
        project=project,
        sensitive=[f"{agent_home}/config.toml", f"{agent_home}/sessions.sqlite"],
    )
    before = _snapshot(project)
    await _refused_everywhere(fs, path)
    await _refused_everywhere(fs, str(project / path))
    assert _snapshot(project) == before
    assert not (agent_home / "sessions.sqlite-journal").exists()
    listed, _ = await fs.list_dir(".soong-agent", limit=10)
    assert [entry.path for entry in listed] == [".soong-agent/notes.md"]
    globbed = await fs.glob("**/*", base=".", limit=50)
    assert globbed.items == [".soong-agent/notes.md", "config.toml"]
    matches, _ = await fs.grep("TOKEN_VAR", base=".", glob=None, limit=50, ignore_case=False)
    assert sorted(m.path for m in matches) == [".soong-agent/notes.md", "config.toml"]
    in_home, _ = await fs.grep("TOKEN", base=".soong-agent", glob=None, limit=50, ignore_case=True)
    assert [m.path for m in in_home] == [".soong-agent/notes.md"]


async def test_sensitive_home_symlinked_into_the_project(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "agent-home"
    home.mkdir()
    (home / "config.toml").write_text("secret config")
    (project / "home-link").symlink_to(home, target_is_directory=True)
    (project / "cfg").symlink_to(home / "config.toml")
    fs = LocalFileSystem(
        project=project, write_roots=[project, home], sensitive=[f"{home}/config.toml"]
    )
    for path in ["home-link/config.toml", "cfg", str(home / "config.toml")]:
        with pytest.raises(SandboxViolation):
            await fs.read_bytes(path)
        with pytest.raises(SandboxViolation):
            await fs.write_text(path, "pwned")
    assert (home / "config.toml").read_text() == "secret config"


# --- hard links to sensitive files --------------------------------------------------------------


async def test_hard_link_to_a_sensitive_file_is_neither_read_nor_listed(
    tmp_path: Path, project: Path
) -> None:
    user_home = tmp_path / "user-home"
    (user_home / ".ssh").mkdir(parents=True)
    (user_home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY material\n")
    (user_home / "agent").mkdir()
    (user_home / "agent" / "config.toml").write_text("config PRIVATE\n")
    os.link(user_home / ".ssh" / "id_ed25519", project / "innocent.txt")
    os.link(user_home / "agent" / "config.toml", project / "settings.txt")
    (project / "plain.txt").write_text("PRIVATE but ordinary\n")
    fs = LocalFileSystem(
        project=project,
        home_dir=user_home,
        sensitive=["~/.ssh", f"{user_home}/agent/config.toml"],
    )
    before = _snapshot(project, user_home)
    for path in ["innocent.txt", "settings.txt"]:
        with pytest.raises(SandboxViolation):
            await fs.read_bytes(path)
        with pytest.raises(SandboxViolation):
            await fs.file_size(path)
        with pytest.raises(SandboxViolation):
            fs.check_read(path)
        with pytest.raises(SandboxViolation):
            await fs.write_text(path, "pwned")
        with pytest.raises(SandboxViolation):
            await fs.grep("PRIVATE", base=path, glob=None, limit=10, ignore_case=False)
    entries, _ = await fs.list_dir(".", limit=10)
    assert [entry.path for entry in entries] == ["plain.txt"]
    assert (await fs.glob("*", base=".", limit=10)).items == ["plain.txt"]
    matches, _ = await fs.grep("PRIVATE", base=".", glob=None, limit=10, ignore_case=False)
    assert [m.path for m in matches] == ["plain.txt"]
    assert _snapshot(project, user_home) == before


async def test_ordinary_hard_links_stay_readable(fs: LocalFileSystem, project: Path) -> None:
    (project / "a.txt").write_text("shared")
    os.link(project / "a.txt", project / "b.txt")
    assert await fs.read_bytes("b.txt") == b"shared"
    assert (await fs.glob("*.txt", base=".", limit=10)).items == ["a.txt", "b.txt"]
    with pytest.raises(SandboxViolation):  # writes still refuse any file with two names
        await fs.write_text("b.txt", "changed")
    assert (project / "a.txt").read_text() == "shared"


# --- sensitive files through every tool -----------------------------------------------------------


async def test_recursive_grep_over_a_folder_with_env_returns_no_env_line(
    home_fs: LocalFileSystem, home: Path
) -> None:
    (home / "app" / ".env.test").write_text("token=from-env-test\n")
    (home / "app" / "sub").mkdir()
    (home / "app" / "sub" / ".env").write_text("token=deep\n")
    for base in ["app", ".", "app/sub"]:
        for glob in [None, ".env*", "*"]:
            matches, _ = await home_fs.grep(
                "token", base=base, glob=glob, limit=50, ignore_case=True
            )
            assert all(".env" not in m.path and "from-env" not in m.line for m in matches)
            assert all("deep" not in m.line and "API_KEY" not in m.line for m in matches)
    listing = await home_fs.glob("**/.env*", base=".", limit=50)
    assert listing.items == []
    everything = await home_fs.glob("**", base="app", limit=50)
    assert everything.items == ["app/main.py"]


async def test_sensitive_files_survive_an_edit_style_read_then_write(
    home_fs: LocalFileSystem, home: Path
) -> None:
    before = _snapshot(home)
    for path in [".env", "app/.env", ".ssh/id_rsa"]:
        with pytest.raises(SandboxViolation):
            text = (await home_fs.read_bytes(path)).decode()
            await home_fs.write_text(path, text.replace("token", "pwned"))
        with pytest.raises(SandboxViolation):  # a blind write is refused as well
            await home_fs.write_text(path, "pwned")
    assert _snapshot(home) == before


async def test_policy_filters_what_ripgrep_does_not_exclude(project: Path) -> None:
    """An absolute sensitive folder is not passed to ripgrep; the policy still drops it."""
    (project / "private").mkdir()
    (project / "private" / "data.txt").write_text("needle secret\n")
    (project / "public.txt").write_text("needle public\n")
    fs = LocalFileSystem(project=project, sensitive=[str(project / "private")])
    matches, _ = await fs.grep("needle", base=".", glob=None, limit=10, ignore_case=False)
    assert [(m.path, m.line) for m in matches] == [("public.txt", "needle public")]
    assert (await fs.glob("**/*.txt", base=".", limit=10)).items == ["public.txt"]
    with pytest.raises(SandboxViolation):
        await fs.glob("*", base="private", limit=10)
    with pytest.raises(SandboxViolation):
        await fs.glob("private/*", base=".", limit=10)


# --- races during glob and grep -------------------------------------------------------------------


async def test_folder_swapped_for_symlink_while_searching_is_not_reported(
    fs: LocalFileSystem, project: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ripgrep reports a file, then its folder becomes a symlink out: the re-check drops it."""
    (project / "sub").mkdir()
    (project / "sub" / "secret.txt").write_text(OUTSIDE_TEXT)  # same name and text as outside
    from soong_agent.adapters.sandbox import local_fs, ripgrep

    real_run = ripgrep.run_rg

    async def swapping_run(*args: object, **kwargs: object) -> object:
        consume = kwargs["consume"]
        swapped: list[bool] = []

        def swap_then_consume(record: bytes) -> bool:
            if not swapped:
                _swap_for_symlink(project / "sub", outside)()
                swapped.append(True)
            return consume(record)  # type: ignore[operator,no-any-return]

        kwargs["consume"] = swap_then_consume
        return await real_run(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(local_fs, "run_rg", swapping_run)
    matches, _ = await fs.grep("outside", base=".", glob=None, limit=10, ignore_case=False)
    assert matches == []
    assert (project / "sub").is_symlink()
    (project / "sub").unlink()
    (project / "sub").mkdir()
    (project / "sub" / "secret.txt").write_text(OUTSIDE_TEXT)
    listing = await fs.glob("**/*.txt", base=".", limit=10)
    assert listing.items == []
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT


# --- path facts for the permission gate ------------------------------------------------------


def test_path_facts_follow_symlinks_and_count_hard_links(
    fs: LocalFileSystem, project: Path, outside: Path
) -> None:
    real = os.path.realpath
    (project / ".git" / "hooks").mkdir(parents=True)
    (project / ".git" / "config").write_text("[core]\n")
    (project / "gitdir").symlink_to(project / ".git", target_is_directory=True)
    (project / "key.txt").symlink_to(outside / "secret.txt")
    (project / "dangling").symlink_to(project / "nowhere")
    os.link(project / ".git" / "config", project / "innocent")

    through = fs.path_facts("gitdir/hooks/pre-commit")  # the file does not exist yet
    assert through.lexical == real(project) + "/gitdir/hooks/pre-commit"
    assert through.resolved == real(project) + "/.git/hooks/pre-commit"
    assert not through.exists
    key = fs.path_facts("key.txt")
    assert key.resolved == real(outside / "secret.txt") and key.exists and not key.is_dir
    assert fs.path_facts("gitdir").is_dir
    assert fs.path_facts("dangling").exists  # something is there, though it leads nowhere
    assert fs.path_facts("innocent").links == 2
    assert fs.path_facts(".git").links == 1  # folders count as one
    with pytest.raises(ToolInputError):
        fs.path_facts("a\x00b")
