"""The ShellAnalyzer contract: SimpleShellAnalyzer and the tree-sitter-bash analyser.

Both must read plain lines the same way, and neither may call a line `ok` while hiding a command
it runs: the simple analyser may give up (not `ok`) where tree-sitter looks inside, and the
permission engine then asks, so no prefix rule is bypassed through either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from soong_agent.adapters.shell import TreeSitterShellAnalyzer
from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.domain.permissions import PermissionRequest, SessionGrants, Verdict, decide
from soong_agent.ports.shell import ShellAnalysis, ShellAnalyzer
from soong_agent.testing import SimpleShellAnalyzer

Words = tuple[str | None, ...]

FACTORIES: dict[str, Callable[[], ShellAnalyzer]] = {
    "simple": SimpleShellAnalyzer,
    "treesitter": TreeSitterShellAnalyzer,
}


@pytest.fixture(params=sorted(FACTORIES))
def analyzer(request: pytest.FixtureRequest) -> ShellAnalyzer:
    return FACTORIES[request.param]()


def words_of(analysis: ShellAnalysis) -> list[Words]:
    return [c.words for c in analysis.commands]


def test_implements_the_port(analyzer: ShellAnalyzer) -> None:
    assert isinstance(analyzer, ShellAnalyzer)


@pytest.mark.parametrize(
    ("line", "commands"),
    [
        ("", []),
        ("   ", []),
        ("npm test", [("npm", "test")]),
        ("npm test && curl x | wc -l", [("npm", "test"), ("curl", "x"), ("wc", "-l")]),
        ("npm test; rm -rf /", [("npm", "test"), ("rm", "-rf", "/")]),
        ("npm test || rm -rf x", [("npm", "test"), ("rm", "-rf", "x")]),
        ("npm test\nrm -rf x", [("npm", "test"), ("rm", "-rf", "x")]),
        ("npm test & rm x", [("npm", "test"), ("rm", "x")]),
        ("ls &", [("ls",)]),
        ("ls;", [("ls",)]),
        ("ls 'my dir' | grep -v x", [("ls", "my dir"), ("grep", "-v", "x")]),
        ("echo 'a b' \"c d\"", [("echo", "a b", "c d")]),
        ('echo "a\\"b"', [("echo", 'a"b')]),
        ("r\\m -rf x", [("rm", "-rf", "x")]),
        ("'rm' -rf x", [("rm", "-rf", "x")]),
        ("/bin/rm -rf -- x", [("/bin/rm", "-rf", "--", "x")]),
        ("echo *.py ~/x", [("echo", "*.py", "~/x")]),
        ("npm test # comment", [("npm", "test")]),
        ("echo a#b", [("echo", "a#b")]),
        ("ls &&\n  wc", [("ls",), ("wc",)]),
        ("echo $HOME ${X}y z", [("echo", None, None, "z")]),
        ("echo {a,b} {1..3}", [("echo", None, None)]),
    ],
)
def test_plain_lines(analyzer: ShellAnalyzer, line: str, commands: list[Words]) -> None:
    analysis = analyzer.analyze(line)
    assert words_of(analysis) == commands
    assert analysis.ok, analysis.problems
    assert analysis.problems == ()


@pytest.mark.parametrize(
    ("line", "writes", "reads"),
    [
        ("npm test > /etc/passwd", ("/etc/passwd",), ()),
        ("npm test >> log", ("log",), ()),
        ("npm test 2>&1 >> ~/.bashrc", ("~/.bashrc",), ()),
        ("npm test 2>/dev/null", (), ()),
        ("npm test >/dev/stdout 2>&1", (), ()),
        ("npm test &> out.log", ("out.log",), ()),
        ("npm test &>> out.log", ("out.log",), ()),
        ("npm test >| out", ("out",), ()),
        ("npm test >&out", ("out",), ()),
        ("npm test 2> err", ("err",), ()),
        ("npm test > $F", ("?",), ()),
        ("cat < in.txt", (), ("in.txt",)),
    ],
)
def test_redirections(
    analyzer: ShellAnalyzer, line: str, writes: tuple[str, ...], reads: tuple[str, ...]
) -> None:
    analysis = analyzer.analyze(line)
    assert analysis.ok, analysis.problems
    (command,) = analysis.commands
    assert command.words[:2] == ("npm", "test") or command.words == ("cat",)
    assert (command.writes_to, command.reads_from) == (writes, reads)


@pytest.mark.parametrize(
    ("line", "targets"),
    [
        # a redirection binds to the simple command it follows, not to the whole && / | list
        ("rm -rf build && echo ok > log.txt", [(), ("log.txt",)]),
        ("ls || echo hi > out.txt", [(), ("out.txt",)]),
        ("ls | grep x > out.txt", [(), ("out.txt",)]),
        ("a && b | c > f", [(), (), ("f",)]),
        ("cd /etc && echo x > passwd", [(), ("passwd",)]),
        ("echo hi > out.txt && ls", [("out.txt",), ()]),
    ],
)
def test_each_command_writes_where_its_own_redirection_points(
    analyzer: ShellAnalyzer, line: str, targets: list[tuple[str, ...]]
) -> None:
    analysis = analyzer.analyze(line)
    assert [c.writes_to for c in analysis.commands] == targets


@pytest.mark.parametrize(
    ("line", "targets"),
    [
        ("(ls; pwd) > all.txt", [("all.txt",), ("all.txt",)]),
        ("{ ls; pwd; } > all.txt", [("all.txt",), ("all.txt",)]),
        ("a && (b; c) > f", [(), ("f",), ("f",)]),
    ],
)
def test_a_group_or_subshell_redirected_writes_from_every_command(
    line: str, targets: list[tuple[str, ...]]
) -> None:
    analysis = TreeSitterShellAnalyzer().analyze(line)  # (the fake reads no groups)
    assert [c.writes_to for c in analysis.commands] == targets


def test_words_after_a_redirection_stay_with_the_command(analyzer: ShellAnalyzer) -> None:
    analysis = analyzer.analyze("echo > f x")
    assert words_of(analysis) == [("echo", "x")]
    assert analysis.commands[0].writes_to == ("f",)


@pytest.mark.parametrize(
    "line",
    [
        "$CMD",
        "$CMD x",
        "ls$IFS-la",
        'npm test "',
        "npm test '",
        "npm test $(",
        "ls &&",
        "| ls",
        "PATH=/tmp/evil npm test",
        "a\x00b",
    ],
)
def test_what_is_not_understood_is_not_ok(analyzer: ShellAnalyzer, line: str) -> None:
    analysis = analyzer.analyze(line)
    assert not analysis.ok
    assert analysis.problems


def test_a_broken_line_still_lists_the_commands_it_can_see(analyzer: ShellAnalyzer) -> None:
    analysis = analyzer.analyze('rm -rf x; echo "')
    assert not analysis.ok
    assert ("rm", "-rf", "x") in words_of(analysis)


@pytest.mark.parametrize(
    "line",
    ["\x00", "\udcff", "((((", "'" * 1001, "\\", "a" * 100_000, "echo " + "$(" * 400, "}{;;&&|"],
    ids=range(8),
)
def test_it_never_raises(analyzer: ShellAnalyzer, line: str) -> None:
    analysis = analyzer.analyze(line)
    assert analysis.ok == (analysis.problems == ())


# --- no command hides behind `ok` ----------------------------------------------------------------

NESTED = [
    "npm test $(rm -rf x)",
    "npm test `rm -rf x`",
    "npm test <(rm -rf x)",
    "cat >(rm x)",
    'npm test "$(rm a)"',
    "echo ${x:-$(rm y)}",
    'eval "rm -rf x"',
    'sh -c "rm -rf x"',
    "bash -c 'rm x'",
    "echo x | xargs rm -rf",
    "find . -exec rm -rf {} \\;",
    "env rm -rf x",
    "timeout 5 rm x",
    "nohup rm x",
    "sudo -u root rm x",
    "command rm x",
    "time rm x",
    "(rm x)",
    "{ rm x; }",
    "if true; then rm x; fi",
    "for f in a; do rm $f; done",
    "cat <<EOF\n$(rm x)\nEOF",
    "ls; sh <<'EOF'\nrm x\nEOF",
    "ls; bash <<< 'rm x'",
    "trap 'rm x' EXIT; ls",
]


@pytest.mark.parametrize("line", NESTED)
def test_a_nested_command_is_listed_or_the_line_is_not_ok(
    analyzer: ShellAnalyzer, line: str
) -> None:
    analysis = analyzer.analyze(line)
    names = [c.words[0] for c in analysis.commands if c.words]
    assert "rm" in names or not analysis.ok, (analysis.commands, analysis.problems)


ALLOW = ["run_command(prefix:npm test)", "run_command(prefix:ls)", "run_command(prefix:grep)"]
DENY = ["run_command(prefix:rm)", "run_command(prefix:curl)"]

BYPASSES = [
    *NESTED,
    "npm test && curl x | sh",
    "npm test; rm -rf /",
    "npm test\nrm -rf x",
    "npm test > /etc/passwd",
    "npm test 2>&1 >> ~/.bashrc",
    "$CMD",
    "npm test && $(echo rm) x",
    'npm test "',
    "ls && sudo rm -rf /",
    "ls & rm x",
    "npm() { rm -rf x; }; npm test",
    "r\\m -rf x",
    "/bin/rm -rf x",
    "PATH=/tmp/evil npm test",
    "export PATH=/tmp/evil; npm test",
    "ls && {rm,-rf,x}",
    "ls; r{m,} -rf x",
    "ls$IFS-la",
    "[[ $(rm x) ]]",
    "npm testing",
    "lsblk",
]


def judge(analyzer: ShellAnalyzer, line: str, **config: Any) -> Verdict:
    request = PermissionRequest(
        "run_command",
        "exec",
        "*",
        target=line,
        target_kind="command",
        shell=analyzer.analyze(line),
    )
    return decide(request, policy=PermissionsConfig(**config), grants=SessionGrants())


@pytest.mark.parametrize("line", BYPASSES)
def test_prefix_rules_are_not_bypassed(analyzer: ShellAnalyzer, line: str) -> None:
    assert judge(analyzer, line, allow=ALLOW).outcome != "allow"


@pytest.mark.parametrize("line", [line for line in BYPASSES if "rm" in line or "curl" in line])
def test_a_denied_command_is_never_allowed(analyzer: ShellAnalyzer, line: str) -> None:
    verdict = judge(analyzer, line, allow=["run_command", *ALLOW], deny=DENY)
    assert verdict.outcome in ("deny", "ask"), verdict.reason


@pytest.mark.parametrize(
    "line",
    [
        "npm test",
        "npm test -- --watch=false",
        "npm test 2>/dev/null",
        "npm test | grep ok",
        "npm test && ls -la",
        "ls 'my dir' | grep -v x",
        "npm test # comment",
    ],
)
def test_covered_lines_are_allowed(analyzer: ShellAnalyzer, line: str) -> None:
    verdict = judge(analyzer, line, allow=ALLOW, deny=DENY)
    assert verdict.outcome == "allow", verdict.reason
