"""The pure readings behind the command checks: git objects and pathspecs, protected paths, where
``cd`` goes and which commands only read (issue 11 items 2 and 3)."""

from __future__ import annotations

import shlex

import pytest

from soong_agent.adapters.inmemory.filesystem import InMemoryFileSystem
from soong_agent.application.permissions.command_review import review_command
from soong_agent.domain.permissions.git_objects import (
    exclusions,
    missing_exclusions,
    object_path,
    read_git,
)
from soong_agent.domain.permissions.protected import DEFAULT_PROTECTED_PATHS, ProtectedPaths
from soong_agent.domain.permissions.sensitive import SensitivePaths
from soong_agent.domain.permissions.shell import (
    DirectoryChange,
    argument_words,
    directory_change,
    only_reads,
)
from soong_agent.ports.shell import ShellAnalysis, SimpleCommand

ROOT = "/work/proj"
HOME = "/home/ann"


def words(line: str) -> tuple[str | None, ...]:
    return tuple(shlex.split(line))


# --- git ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("HEAD:.env", (".env", False)),
        ("HEAD~2:src/a.py", ("src/a.py", False)),
        ("main@{1 day ago}:x", ("x", False)),
        (":.env", (".env", False)),
        (":2:conf/.env", ("conf/.env", False)),
        ("HEAD:./x", ("./x", True)),
        ("HEAD:", ("", False)),
        (":/fix the bug", None),
        ("HEAD", None),
        ("https://example.com/x", None),
        ("-L1,5:a.py", None),
    ],
)
def test_object_path(word: str, expected: tuple[str, bool] | None) -> None:
    assert object_path(word) == expected


@pytest.mark.parametrize(
    "line",
    [
        "git show",
        "git show HEAD",
        "git show --oneline HEAD~1",
        "git show -p --stat HEAD",
        "git log -p",
        "git log --patch --all",
        "git whatchanged -p",
        "git diff",
        "git diff HEAD~1 HEAD",
        "git diff --cached",
        "git grep TOKEN",
        "git grep -e TOKEN HEAD~3",
        "git archive HEAD",
        "git format-patch -1",
        "git -C sub log -p",
        "/usr/bin/git --no-pager show HEAD",
    ],
)
def test_unbounded_git_output(line: str) -> None:
    read = read_git(words(line))
    assert read is not None and read.unbounded is not None and read.refusal is None


@pytest.mark.parametrize(
    "line",
    [
        "git status",
        "git log --oneline",
        "git log --stat",
        "git show --stat HEAD",
        "git show -s --format=%H HEAD",
        "git show HEAD:README.md",
        "git diff --name-only",
        "git diff HEAD:a.py HEAD~1:a.py",
        "git grep -l TOKEN",
        "git archive --list",
        "git log -L1,5:a.py",
        "git cat-file -t 0123abcd",
        "git blame a.py",
        "git commit -m 'fix: HEAD:.env loading'",
    ],
)
def test_bounded_git_output(line: str) -> None:
    read = read_git(words(line))
    assert read is not None and read.unbounded is None and read.refusal is None


@pytest.mark.parametrize(
    "line",
    [
        "git show 0123abcd",
        "git show 0123abcd..feed1234",
        "git show v1^{blob}",
        "git grep . 0123abcd",
        "git cat-file -p 0123abcdef",
        "git cat-file blob 0123abcd",
        "git cat-file --batch",
        "git cat-file --batch-command",
        "git bundle create x.bundle --all",
        "git fast-export --all",
        "git unpack-file 0123abcd",
        "git stash show -p",
        "git -c alias.s=show s HEAD",
        "git --config-env=alias.s=X s",
    ],
)
def test_git_refusals(line: str) -> None:
    read = read_git(words(line))
    assert read is not None and read.refusal is not None


def test_hash_suffixes_that_make_a_commit_are_not_refused() -> None:
    for rev in ("0123abcd^{commit}", "0123abcd~1", "0123abcd^", "0123abcd^2", "0123abcd^!"):
        read = read_git(("git", "show", rev))
        assert read is not None and read.refusal is None, rev


def test_paths_git_names() -> None:
    read = read_git(words("git -C sub cat-file -p HEAD:.env"))
    assert read is not None and read.directory == "sub" and read.object_paths == ((".env", False),)
    read = read_git(words("git log -p -L 1,5:conf/.env -- a.py"))
    assert read is not None and (("conf/.env", False) in read.object_paths)
    assert read.pathspecs == ("a.py",)
    read = read_git(words("git diff HEAD~1 README.md"))
    assert read is not None and read.maybe_paths == ("HEAD~1", "README.md")
    read = read_git(words("git grep TOKEN -- src"))
    assert read is not None and read.pathspecs == ("src",) and read.maybe_paths == ()


def test_literal_pathspecs_turn_the_exclusions_off() -> None:
    line = "git --literal-pathspecs show HEAD -- ':(exclude,top,glob)**/.env'"
    read = read_git(words(line))
    assert read is not None and read.excludes == ()
    read = read_git(words(line.replace("--literal-pathspecs ", "")))
    assert read is not None and read.excludes == (":(exclude,top,glob)**/.env",)


@pytest.mark.parametrize(
    ("line", "writes"),
    [
        ("git config core.hooksPath /tmp/h", (".git/config",)),
        ("git config --add remote.o.push x", (".git/config",)),
        ("git config --unset core.editor", (".git/config",)),
        ("git config set core.editor vi", (".git/config",)),
        ("git config --global core.pager less", ("~/.gitconfig",)),
        ("git config --file other.cfg a.b c", ("other.cfg",)),
        ("git config --worktree a.b c", (".git/config.worktree",)),
        ("git config core.editor", ()),
        ("git config --get core.editor", ()),
        ("git config --list", ()),
        ("git config get core.editor", ()),
    ],
)
def test_git_config_writes(line: str, writes: tuple[str, ...]) -> None:
    read = read_git(words(line))
    assert read is not None and read.config_writes == writes


def test_exclusions_cover_names_and_project_paths() -> None:
    rules = SensitivePaths(
        [".env", ".env.*", "~/.ssh", "config/secrets", "keys/*.pem"], project=ROOT, home=HOME
    ).rules
    found = exclusions(rules, ROOT)
    assert found[:4] == (
        ":(exclude,top,glob)**/.env",
        ":(exclude,top,glob)**/.env/**",
        ":(exclude,top,glob)**/.env.*",
        ":(exclude,top,glob)**/.env.*/**",
    )
    assert ":(exclude,top,literal)config/secrets" in found
    assert ":(exclude,top,literal)config/secrets-wal" in found
    assert ":(exclude,top,glob)keys/*.pem" in found
    assert not any(".ssh" in spec for spec in found)  # outside the project: not in git


def test_missing_exclusions() -> None:
    required = [":(exclude,top,glob)**/.env", ":(exclude,top,literal)config/secrets"]
    assert (
        missing_exclusions(required, [":(top,glob,exclude)**/.env", ":(exclude,top,literal)config"])
        == []
    )
    assert missing_exclusions(required, [":(exclude,glob)**/.env"]) == required
    assert missing_exclusions(required, [":!**/.env"]) == required  # not glob, not top


# --- protected paths ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "entry"),
    [
        (f"{ROOT}/.git/hooks/pre-commit", ".git"),
        (f"{ROOT}/.git", ".git"),
        (f"{ROOT}/vendor/lib/.git/config", ".git"),
        (f"{ROOT}/.GIT/config", ".git"),
        (f"{ROOT}/.vscode/settings.json", ".vscode"),
        (f"{ROOT}/.github/workflows/ci.yml", ".github/workflows"),
        (f"{ROOT}/.envrc", ".envrc"),
        (f"{ROOT}/.soong-agent/plans/p.md", ".soong-agent"),
        (f"{HOME}/.bashrc", "~/.bashrc"),
        (f"{ROOT}/src/app.py", None),
        (f"{ROOT}/.github/dependabot.yml", None),
        (f"{ROOT}/.gitignore", None),
        (f"{HOME}/.bashrc.d/x", None),
    ],
)
def test_protected_defaults(path: str, entry: str | None) -> None:
    protected = ProtectedPaths(DEFAULT_PROTECTED_PATHS, project=ROOT, home=HOME)
    assert protected.entry_for(path) == entry


def test_protected_resolved_form_and_a_project_inside_a_protected_name() -> None:
    protected = ProtectedPaths([".git"], project="/srv/.git/work/proj", home=HOME)
    assert protected.entry_for("/srv/.git/work/proj/src/a.py") is None
    assert protected.entry_for("/srv/.git/work/proj/g/hooks/x", "/srv/.git/work/proj/.git/hooks/x")
    assert not ProtectedPaths([], project=ROOT, home=HOME)


# --- where a command runs, what it writes ---------------------------------------------------


@pytest.mark.parametrize(
    ("line", "change"),
    [
        ("cd sub", DirectoryChange("sub")),
        ("cd -P ../x", DirectoryChange("../x")),
        ("cd", DirectoryChange("~")),
        ("cd -- -dir", DirectoryChange("-dir")),
        ("cd -", DirectoryChange()),
        ("pushd src", DirectoryChange("src")),
        ("pushd", DirectoryChange()),
        ("popd", DirectoryChange()),
        ("pushd +1", DirectoryChange()),
        ("ls sub", None),
    ],
)
def test_directory_change(line: str, change: DirectoryChange | None) -> None:
    assert directory_change(words(line)) == change


def test_directory_change_that_is_not_literal() -> None:
    assert directory_change(("cd", None)) == DirectoryChange(unknown=True)


def test_argument_words() -> None:
    assert argument_words(("cp", "-r", "--target-directory=out", "a", None, "b")) == [
        "out",
        "a",
        "b",
    ]


@pytest.mark.parametrize(
    ("line", "reads"),
    [
        ("cat a", True),
        ("ls -la .git", True),
        ("find . -name x", True),
        ("find . -delete", False),
        ("git log -p", True),
        ("git status", True),
        ("git commit -m x", False),
        ("git config a.b c", False),
        ("cp a b", False),
        ("python3 x.py", False),
        ("sed -i s/a/b/ f", False),
    ],
)
def test_only_reads(line: str, reads: bool) -> None:
    assert only_reads(words(line)) is reads


# --- the review over the in-memory sandbox ---------------------------------------------------


@pytest.fixture
def fs() -> InMemoryFileSystem:
    return InMemoryFileSystem(
        {"README.md": "r", "sub/notes.md": "n", "conf/.env.local": "s", ".git/config": "c"},
        root=ROOT,
        home=HOME,
        sensitive=[".env", ".env.*", "~/.ssh"],
    )


def line(*commands: tuple[str | None, ...], writes: tuple[str, ...] = ()) -> ShellAnalysis:
    simple = [SimpleCommand(c) for c in commands]
    if writes:
        simple[-1] = SimpleCommand(commands[-1], writes_to=writes)
    return ShellAnalysis(tuple(simple))


def test_review_judges_words_in_every_folder_the_line_may_be_in(fs: InMemoryFileSystem) -> None:
    assert review_command(line(("cd", "sub"), ("cat", "notes.md")), fs).problem is None
    assert review_command(line(("cd", "conf"), ("cat", ".env.local")), fs).problem is not None
    refused = review_command(line(("cd", "sub"), ("cat", "../../etc/passwd")), fs)
    assert refused.problem is not None


def test_review_doubts_a_cd_that_is_not_literal(fs: InMemoryFileSystem) -> None:
    review = review_command(line(("cd", None), ("ls",)), fs)
    assert review.problem is None and review.doubts


def test_review_notes_protected_writes(fs: InMemoryFileSystem) -> None:
    protected = ProtectedPaths([".git"], project=ROOT, home=HOME)
    review = review_command(
        line(("cd", ".git"), ("echo", "x"), writes=("config",)), fs, protected=protected
    )
    assert review.problem is None and review.protected
    assert "matches '.git'" in review.protected[0]


def test_review_refusal_names_the_pathspec_to_add(fs: InMemoryFileSystem) -> None:
    review = review_command(line(("git", "log", "-p")), fs)
    assert review.problem is not None
    assert "-- ':(exclude,top,glob)**/.env'" in review.problem
    bounded = (
        "git",
        "log",
        "-p",
        "--",
        ":(exclude,top,glob)**/.env",
        ":(exclude,top,glob)**/.env/**",
        ":(exclude,top,glob)**/.env.*",
        ":(exclude,top,glob)**/.env.*/**",
    )
    assert review_command(line(bounded), fs).problem is None
    assert review_command(line(("git", "log", "-p", "--", "README.md")), fs).problem is None
    assert review_command(line(("git", "log", "-p", "--", "sub")), fs).problem is not None
    assert review_command(line(("git", "log", "-p", "--", "gone.txt")), fs).problem is not None
