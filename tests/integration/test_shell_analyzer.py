"""The tree-sitter-bash `ShellAnalyzer` and the permission engine on real command lines (PERM-2)."""

from __future__ import annotations

from typing import Any

import pytest

from soong_agent.adapters.shell import TreeSitterShellAnalyzer
from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.domain.permissions import PermissionRequest, SessionGrants, Verdict, decide
from soong_agent.ports.shell import ShellAnalyzer

Words = tuple[str | None, ...]

ANALYZER = TreeSitterShellAnalyzer()

FIND_WORDS: Words = ("find", ".", "-name", "*.o", "-execdir", "rm", "{}", "+")
FIND_WORDS += ("-ok", "mv", "{}", "/tmp", ";")


def words_of(line: str) -> list[Words]:
    return [c.words for c in ANALYZER.analyze(line).commands]


def test_it_implements_the_port() -> None:
    assert isinstance(ANALYZER, ShellAnalyzer)


# --- extracted commands -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "commands"),
    [
        ("npm test", [("npm", "test")]),
        ("npm test && curl x | sh", [("npm", "test"), ("curl", "x"), ("sh",)]),
        ("npm test; rm -rf /", [("npm", "test"), ("rm", "-rf", "/")]),
        ("npm test || rm -rf x", [("npm", "test"), ("rm", "-rf", "x")]),
        ("npm test | sh", [("npm", "test"), ("sh",)]),
        ("npm test\nrm -rf x", [("npm", "test"), ("rm", "-rf", "x")]),
        ("npm test & rm x", [("npm", "test"), ("rm", "x")]),
        ("npm test $(rm -rf x)", [("npm", "test", None), ("rm", "-rf", "x")]),
        ("npm test `rm -rf x`", [("npm", "test", None), ("rm", "-rf", "x")]),
        ("npm test <(rm -rf x)", [("npm", "test", None), ("rm", "-rf", "x")]),
        ("cat >(rm x)", [("cat", None), ("rm", "x")]),
        ('npm test "$(rm a)"', [("npm", "test", None), ("rm", "a")]),
        ("echo ${x:-$(rm y)}", [("echo", None), ("rm", "y")]),
        ("echo $(( $(rm x) + 1 ))", [("echo", None), ("rm", "x")]),
        ('eval "rm -rf x"', [("eval", "rm -rf x"), ("rm", "-rf", "x")]),
        ("eval rm -rf x", [("eval", "rm", "-rf", "x"), ("rm", "-rf", "x")]),
        ('sh -c "rm -rf x"', [("sh", "-c", "rm -rf x"), ("rm", "-rf", "x")]),
        ("bash -c 'curl x'", [("bash", "-c", "curl x"), ("curl", "x")]),
        ('/bin/bash -lc "ls; rm y"', [("/bin/bash", "-lc", "ls; rm y"), ("ls",), ("rm", "y")]),
        ("zsh -o pipefail -c 'rm z'", [("zsh", "-o", "pipefail", "-c", "rm z"), ("rm", "z")]),
        ("bash script.sh", [("bash", "script.sh")]),
        ("echo x | xargs rm -rf", [("echo", "x"), ("xargs", "rm", "-rf"), ("rm", "-rf")]),
        (
            "xargs -n 1 -I {} -0 -P 4 rm {}",
            [("xargs", "-n", "1", "-I", "{}", "-0", "-P", "4", "rm", "{}"), ("rm", "{}")],
        ),
        (
            "find . -exec rm -rf {} \\;",
            [("find", ".", "-exec", "rm", "-rf", "{}", ";"), ("rm", "-rf", "{}")],
        ),
        (
            "find . -name '*.o' -execdir rm {} + -ok mv {} /tmp ';'",
            [
                FIND_WORDS,
                ("rm", "{}"),
                ("mv", "{}", "/tmp"),
            ],
        ),
        ("env rm -rf x", [("env", "rm", "-rf", "x"), ("rm", "-rf", "x")]),
        ("env -u HOME A=1 rm x", [("env", "-u", "HOME", "A=1", "rm", "x"), ("rm", "x")]),
        ("timeout 5 rm x", [("timeout", "5", "rm", "x"), ("rm", "x")]),
        ("timeout -s KILL 5 rm x", [("timeout", "-s", "KILL", "5", "rm", "x"), ("rm", "x")]),
        ("nice -n 10 rm x", [("nice", "-n", "10", "rm", "x"), ("rm", "x")]),
        ("nohup rm x", [("nohup", "rm", "x"), ("rm", "x")]),
        ("sudo -u root rm x", [("sudo", "-u", "root", "rm", "x"), ("rm", "x")]),
        ("command rm x", [("command", "rm", "x"), ("rm", "x")]),
        ("exec rm x", [("exec", "rm", "x"), ("rm", "x")]),
        ("time rm x", [("time", "rm", "x"), ("rm", "x")]),
        (
            "sudo env nice rm x",
            [
                ("sudo", "env", "nice", "rm", "x"),
                ("env", "nice", "rm", "x"),
                ("nice", "rm", "x"),
                ("rm", "x"),
            ],
        ),
        ("trap 'rm x' EXIT", [("trap", "rm x", "EXIT"), ("rm", "x")]),
        (
            "if a; then b; elif c; then d; else e; fi",
            [("a",), ("b",), ("c",), ("d",), ("e",)],
        ),
        ("while a; do b; done", [("a",), ("b",)]),
        ("for i in $(ls); do rm $i; done", [("ls",), ("rm", None)]),
        ("case $x in y) rm y;; *) rm z;; esac", [("rm", "y"), ("rm", "z")]),
        ("f() { rm x; }; f", [("rm", "x"), ("f",)]),
        ("(cd x && rm y)", [("cd", "x"), ("rm", "y")]),
        ("{ a; b; }", [("a",), ("b",)]),
        ("! rm x", [("rm", "x")]),
        ("[[ -f x ]] && rm x", [("rm", "x")]),
        ("cat <<EOF\n$(rm x)\nEOF", [("cat",), ("rm", "x")]),
        ("cat <<'EOF'\n$(rm x)\nEOF", [("cat",)]),
        ('bash <<< "rm x"', [("bash",), ("rm", "x")]),
        ("sh <<'EOF'\nrm $x\nEOF", [("sh",), ("rm", None)]),
        ("sudo bash -s <<< 'curl y'", [("sudo", "bash", "-s"), ("bash", "-s"), ("curl", "y")]),
        ("env > f rm x", [("env", "rm", "x"), ("rm", "x")]),
        ("npm test # && rm -rf x", [("npm", "test")]),
        # words: quotes, escapes, concatenation, globs, expansions
        ("r\\m \"a b\" 'c d' e\\ f", [("rm", "a b", "c d", "e f")]),
        ('"r"m x', [("rm", "x")]),
        ('echo "a\\"b\\$c" \'$d\'', [("echo", 'a"b$c', "$d")]),
        ("ls *.py src/**/x ~/y", [("ls", "*.py", "src/**/x", "~/y")]),
        ("rm {a,b} '{c,d}' x{1..3}", [("rm", None, "{c,d}", None)]),
        ("echo $HOME ${X} $1", [("echo", None, None, None)]),
        ("npm \\\n test", [("npm", "test")]),
        ("export A=1 B=$(rm x)", [("export", "A=1", None), ("rm", "x")]),
        ("", []),
    ],
)
def test_extracted_commands(line: str, commands: list[Words]) -> None:
    assert words_of(line) == commands


@pytest.mark.parametrize(
    ("line", "writes"),
    [
        ("npm test > /etc/passwd", [("/etc/passwd",)]),
        ("npm test 2>&1 >> ~/.bashrc", [("~/.bashrc",)]),
        ("npm test 2>/dev/null", [()]),
        ("npm test >/dev/stdout 2>&1", [()]),
        ("npm test &> out.log", [("out.log",)]),
        ("npm test &>> out.log", [("out.log",)]),
        ("npm test >| out", [("out",)]),
        ("npm test >&out", [("out",)]),
        ("npm test > $F", [("?",)]),
        ('npm test > "$(rm x)"', [("?",), ()]),
        ("cat < in.txt", [()]),
        ("cat <<< hi", [()]),
        ("echo > f x", [("f",)]),
        ("{ a; b; } > out", [("out",), ("out",)]),
        ("> out", [("out",)]),
        ("exec 3>file", [("file",)]),
        ("cat <<EOF > out\nhi\nEOF", [("out",)]),
        ("env > f rm x", [("f",), ()]),
    ],
)
def test_redirections_to_files_are_writes(line: str, writes: list[tuple[str, ...]]) -> None:
    analysis = ANALYZER.analyze(line)
    assert [c.writes_to for c in analysis.commands] == writes


def test_words_after_a_redirection_stay_with_the_command() -> None:
    assert words_of("echo > f x") == [("echo", "x")]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("$CMD", "command name is not literal"),
        ("npm test && $(echo rm) x", "command name is not literal"),
        ('npm test "', "syntax error"),
        ("npm test $(", "syntax error"),
        ("if true; then", "syntax error"),
        ('eval "$X"', "eval of text that is not literal"),
        ('sh -c "$X"', "script of a shell -c is not literal"),
        ("sudo $OPTS rm x", "cannot tell which command sudo runs"),
        ("env -S 'rm x'", "env -S"),
        ("sh <<EOF\nrm $x\nEOF", "the script fed to a shell is not literal"),
        ("bash $SCRIPT", "cannot tell what the shell runs"),
        ("PATH=/tmp/evil npm test", "assignment 'PATH=/tmp/evil'"),
        ("PATH=/tmp/evil; npm test", "assignment to PATH"),
        ("a\x00b", "NUL"),
    ],
)
def test_what_is_not_understood_is_not_ok(line: str, problem: str) -> None:
    analysis = ANALYZER.analyze(line)
    assert not analysis.ok
    assert any(problem in p for p in analysis.problems), analysis.problems


def test_a_broken_line_still_lists_the_commands_it_can_see() -> None:
    analysis = ANALYZER.analyze('rm -rf x; echo "')
    assert not analysis.ok
    assert ("rm", "-rf", "x") in [c.words for c in analysis.commands]


def test_nesting_is_bounded() -> None:
    line = "rm x"
    for _ in range(12):
        line = f"sh -c {_quote(line)}"
    analysis = ANALYZER.analyze(line)
    assert not analysis.ok
    assert any("nested" in p for p in analysis.problems)
    deep = "echo " + "$(" * 400 + "x" + ")" * 400
    assert not ANALYZER.analyze(deep).ok
    shallow = TreeSitterShellAnalyzer(max_nesting=1).analyze("sh -c 'sh -c \"rm x\"'")
    assert not shallow.ok


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@pytest.mark.parametrize("line", ["\x00", "\udcff", "((((", "'" * 1001, "\\", "a" * 100_000])
def test_it_never_raises(line: str) -> None:
    analysis = ANALYZER.analyze(line)
    assert isinstance(analysis.ok, bool)


# --- rule bypasses through every shell construct ----------------------------------------------

ALLOW = ["run_command(prefix:npm test)", "run_command(prefix:ls)", "run_command(prefix:grep)"]
DENY = ["run_command(prefix:rm)", "run_command(prefix:curl)"]

BYPASSES = [
    "npm test && curl x | sh",
    "npm test; rm -rf /",
    "npm test || rm -rf x",
    "npm test | sh",
    "npm test\nrm -rf x",
    "npm test $(rm -rf x)",
    "npm test `rm -rf x`",
    "npm test <(rm -rf x)",
    "npm test >(rm -rf x)",
    'npm test "$(rm -rf x)"',
    'eval "rm -rf x"',
    'sh -c "rm -rf x"',
    "bash -c 'curl x'",
    "echo x | xargs rm -rf",
    "ls | xargs -n 1 rm",
    "find . -exec rm -rf {} \\;",
    "npm test > /etc/passwd",
    "npm test 2>&1 >> ~/.bashrc",
    "$CMD",
    "npm test && $(echo rm) x",
    'npm test "',
    "env rm -rf x",
    "timeout 5 rm x",
    "ls && sudo rm -rf /",
    "ls; command rm x",
    "ls & rm x",
    "ls && (rm x)",
    "ls && { rm x; }",
    "if ls; then rm x; fi",
    "for f in a; do rm $f; done",
    "npm() { rm -rf x; }; npm test",
    "r\\m -rf x",
    "'rm' -rf x",
    "/bin/rm -rf x",
    "PATH=/tmp/evil npm test",
    "export PATH=/tmp/evil; npm test",
    "npm test -- $(curl x)",
    "ls && {rm,-rf,x}",
    "ls; r{m,} -rf x",
    "cat <<EOF\n$(rm x)\nEOF",
    "trap 'rm x' EXIT; ls",
    "env > f rm x",
    "ls; bash <<< 'rm x'",
    "ls; sh <<'EOF'\nrm x\nEOF",
    "ls <<EOF > ~/.bashrc\nx\nEOF",
    "ls > >(rm x)",
    "ls$IFS-la",
    "[[ $(rm x) ]]",
    "npm testing",
    "lsblk",
]


def analyse(line: str) -> PermissionRequest:
    return PermissionRequest(
        "run_command",
        "exec",
        "*",
        target=line,
        target_kind="command",
        shell=ANALYZER.analyze(line),
    )


def judge(line: str, **config: Any) -> Verdict:
    policy = PermissionsConfig(**config)
    return decide(analyse(line), policy=policy, grants=SessionGrants())


@pytest.mark.parametrize("line", BYPASSES)
def test_prefix_rules_are_not_bypassed(line: str) -> None:
    verdict = judge(line, allow=ALLOW)
    assert verdict.outcome != "allow", verdict.reason


# a command name that is not literal (or a broken line) cannot be matched by a deny rule: they ask
HIDDEN_FROM_DENY = (
    "npm test && $(echo rm) x",
    "ls && {rm,-rf,x}",
    "ls; r{m,} -rf x",
    "ls$IFS-la",
)
REACHES_DENIED = [
    line
    for line in BYPASSES
    if any(name in line for name in ("rm", "curl")) and line not in HIDDEN_FROM_DENY
]


@pytest.mark.parametrize("line", REACHES_DENIED)
def test_deny_rules_see_through_every_construct(line: str) -> None:
    verdict = judge(line, allow=["run_command", *ALLOW], deny=DENY)
    assert verdict.outcome == "deny", verdict.reason
    assert verdict.reason.startswith('deny rule "run_command(prefix:')


@pytest.mark.parametrize("line", [*HIDDEN_FROM_DENY, "$CMD", 'npm test "', 'eval "$X"'])
def test_what_deny_rules_cannot_see_asks_even_with_a_plain_allow_rule(line: str) -> None:
    verdict = judge(line, allow=["run_command"], deny=DENY)
    assert verdict.outcome == "ask", verdict.reason
    assert 'but deny rule "run_command(prefix:rm)" cannot be checked' in verdict.reason
    bypass = judge(line, mode="bypass", deny=DENY)
    assert bypass.outcome == "ask"
    assert bypass.reason.startswith("mode bypass, but deny rule")


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
def test_covered_lines_are_allowed(line: str) -> None:
    verdict = judge(line, allow=ALLOW, deny=DENY)
    assert verdict.outcome == "allow", verdict.reason
    assert verdict.reason.startswith("every command is allowed: allow rule")


@pytest.mark.parametrize("line", ["$CMD", 'npm test "', "npm test > /etc/passwd", "curlx"])
def test_a_plain_tool_allow_rule_still_allows_what_prefix_rules_cannot(line: str) -> None:
    verdict = judge(line, allow=["run_command"], deny=["web_fetch"])
    assert verdict.outcome == "allow"
    assert verdict.reason == 'allow rule "run_command"'


def test_session_grant_for_a_line_covers_each_of_its_commands() -> None:
    grants = SessionGrants()
    policy = PermissionsConfig()
    first = analyse("npm test --ci | grep -v warn")
    assert decide(first, policy=policy, grants=grants).outcome == "ask"
    assert grants.grant(first) == ("npm test", "grep -v")
    assert decide(analyse("grep -v x && npm test"), policy=policy, grants=grants).outcome == (
        "allow"
    )
    for line in ("npm test && rm x", "npm test > out", "npm test; grep x", "$X"):
        assert decide(analyse(line), policy=policy, grants=grants).outcome == "ask", line
    assert grants.grant(analyse("$X")) == ()


# --- bash quoting, read the way bash reads it (PERM-4) ------------------------------------------


@pytest.mark.parametrize(
    ("line", "commands"),
    [
        # line continuations: removed unquoted, in "…" and unquoted here-documents
        ('echo "$\\\n(rm x)"', [("echo", None), ("rm", "x")]),
        ("echo $\\\n(rm x)", [("echo", None), ("rm", "x")]),
        ("r\\\nm -rf x", [("rm", "-rf", "x")]),
        ("echo a\\\n  b", [("echo", "a", "b")]),
        ("cat <<EOF\n$\\\n(rm x)\nEOF", [("cat",), ("rm", "x")]),
        ("cat <<EOF\nx\nE\\\nOF\nrm y\nEOF", [("cat",), ("rm", "y"), ("EOF",)]),
        # … and kept in '…', $'…', comments and quoted here-documents
        ("echo 'a\\\nb'", [("echo", "a\\\nb")]),
        ("echo $'a\\\nb'", [("echo", "a\\\nb")]),
        ("echo a # c \\\nrm x", [("echo", "a"), ("rm", "x")]),
        ("cat <<'EOF'\n$\\\n(rm x)\nEOF", [("cat",)]),
        # one word however tree-sitter splits it
        ('"r"\\m -rf x', [("rm", "-rf", "x")]),
        ("echo 'a'\\? b", [("echo", "a?", "b")]),
        ("echo $''\\{ x", [("echo", "{", "x")]),
        ("h == x", [("h", "==", "x")]),
        # $'…' decoded, $"…" not literal
        ("$'\\x72m' -rf x", [("rm", "-rf", "x")]),
        ("echo $'a\\tb\\x41\\101\\u0041\\q\\'\\\\'", [("echo", "a\tbAAA\\q'\\")]),
        ("echo $'a\\0b'", [("echo", None)]),
        ('echo $"a b"', [("echo", None)]),
        # backticks: unescaped, then read as a line
        ("echo `echo \\`rm x\\``", [("echo", None), ("echo", None), ("rm", "x")]),
        ("echo `rm \\\\x \\$y`", [("echo", None), ("rm", "x", None)]),
        ('echo "$`rm x`"', [("echo", None), ("rm", "x")]),
        # options that name a command
        ("rg --pre rm x", [("rg", "--pre", "rm", "x"), ("rm", None)]),
        ("git -c core.pager='rm -rf y' log", [("git", "-c", "core.pager=rm -rf y", "log")]),
        ("tar -t --to-command='rm y' -f a", [("tar", "-t", "--to-command=rm y", "-f", "a")]),
        ("chrt -f 10 rm x", [("chrt", "-f", "10", "rm", "x"), ("rm", "x")]),
        ("taskset -c 0 rm x", [("taskset", "-c", "0", "rm", "x"), ("rm", "x")]),
        ("nice -19 rm x", [("nice", "-19", "rm", "x"), ("rm", "x")]),
        ("read -r line", [("read", "-r", "line")]),
    ],
)
def test_bash_quoting(line: str, commands: list[Words]) -> None:
    analysis = ANALYZER.analyze(line)
    assert analysis.ok, analysis.problems
    listed = [c.words for c in analysis.commands]
    assert all(c in listed for c in commands), listed


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("h \\\t x", "text the analyser does not read"),  # tree-sitter drops an escaped tab
        ('echo "$ $(rm x)"', "not a parameter bash expands"),
        ("echo $'\\\\'\necho x; rm y; echo '", "cannot delimit"),
        ('cat <<E"O"F\nx\nEOF\nrm y\nEOF', ""),
        ("cat <<EOF\n`rm x`\nEOF", "expansion the analyser does not place"),
        ('echo "`rm \\"a b\\"`"', "inside backticks in quotes"),
        ('echo "$$(" ; rm x; ")"', "$$("),
        ("h (rm x)", "where bash expects a word"),
        ("k\n\\rm x", ""),
        ("export PATH=/tmp/evil; ls", "export PATH=… can change what later commands run"),
        ("read PATH < f; ls", "read assigns PATH"),
        ("printf -v PATH %s /tmp; ls", "printf assigns PATH"),
        ("echo $((PATH=0))", "arithmetic expression assigns"),
        ("echo ${PATH:=/tmp/x}", "assigns a variable"),
        ("let PATH=1", "let assigns"),
        ("shopt -s expand_aliases\nalias ls='rm -rf x'\nls", "shopt"),
        ("set -k; npm test PATH=/tmp", "set -k"),
        ("hash -p /tmp/evil ls; ls", "hash -p"),
        ("enable -f ./x.so rm", "enable -f"),
        ("mapfile -C 'rm x' -c 1 a < f", "mapfile -C"),
        ("sudo --weird rm x", "cannot tell which command sudo runs"),
        ("git -c core.pager=$P log", "not literal"),
    ],
)
def test_what_bash_and_tree_sitter_read_differently_is_not_ok(line: str, problem: str) -> None:
    analysis = ANALYZER.analyze(line)
    assert not analysis.ok
    assert any(problem in p for p in analysis.problems), analysis.problems


RULES_MEAN = ["run_command(prefix:find)", "run_command(prefix:rg)", "run_command(prefix:echo)"]
RULES_MEAN += ["run_command(prefix:git status)", "run_command(prefix:sed -n)"]


@pytest.mark.parametrize(
    "line",
    [
        "find . -name '*.py' -delete",
        "find . -fprint out.txt",
        "rg --pre=./x.sh pattern",
        'echo "$\\\n(touch m)"',
        "echo $'\\\\'\necho x; touch m; echo '",
        "git -c core.pager=./x.sh status",
        "git -C . -c alias.status=!./x.sh status",
        "sed -n 'w out' file",
        "sed -n -e 1p -e 'e touch m' file",
    ],
)
def test_reader_rules_do_not_cover_writing_or_executing_calls(line: str) -> None:
    verdict = judge(line, allow=RULES_MEAN)
    assert verdict.outcome == "ask", verdict.reason


@pytest.mark.parametrize(
    "line",
    [
        "find . -name '*.py'",
        "rg pattern",
        'echo "a b"',
        "git status",
        "git -C . status",
        "git --no-pager status -s",
        "sed -n 1p file",
        "echo a\\\n  b",
    ],
)
def test_control_reader_rules_still_cover_reading(line: str) -> None:
    verdict = judge(line, allow=RULES_MEAN)
    assert verdict.outcome == "allow", verdict.reason


@pytest.mark.parametrize(
    "line",
    [
        "git -C . commit -m x",
        "git --no-pager commit -m x",
        "git -c user.name=x commit -m x",
        "env git -C . commit",
        "sudo -u me git --git-dir=.git commit",
        "echo x | xargs git -P commit -m",
        "g\\\nit commit",
        '"gi"\\t commit',
    ],
)
def test_deny_rules_match_after_global_options(line: str) -> None:
    verdict = judge(line, allow=["run_command"], deny=["run_command(prefix:git commit)"])
    assert verdict.outcome == "deny", verdict.reason
