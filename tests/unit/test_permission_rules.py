"""Permission rule parsing and matching (PERM-2), as tables."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from soong_agent.domain.config.schema import PermissionsConfig, SoongConfig
from soong_agent.domain.config.validation_messages import format_validation_error
from soong_agent.domain.permissions import (
    DomainPattern,
    RuleSet,
    anchored_path,
    parse_rule,
    parse_rules,
    url_host,
)

# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tool", "kind", "detail"),
    [
        ("run_command", "run_command", "any", None),
        ("  web_fetch  ", "web_fetch", "any", None),
        ("*", "*", "any", None),
        ("mcp__github__*", "mcp__github__*", "any", None),
        ("run_command(prefix:npm test)", "run_command", "prefix", ("npm", "test")),
        ("run_command(prefix: git  log )", "run_command", "prefix", ("git", "log")),
        ("run_command(prefix:'my tool' run)", "run_command", "prefix", ("my tool", "run")),
        ("web_fetch(domain:Example.COM)", "web_fetch", "domain", "example.com"),
        ("web_fetch(domain:*.example.com)", "web_fetch", "domain", "example.com"),
        ("write_file(/src/**)", "write_file", "path", ("project", "src/**")),
        ("write_file(src/**/*.py)", "write_file", "path", ("project", "src/**/*.py")),
        ("write_file(./docs/)", "write_file", "path", ("project", "docs/**")),
        ("write_file(/)", "write_file", "path", ("project", "**")),
        ("read_file(//etc/**)", "read_file", "path", ("absolute", "etc/**")),
        ("read_file(~/.ssh/**)", "read_file", "path", ("home", ".ssh/**")),
        ("*(/.env)", "*", "path", ("project", ".env")),
    ],
)
def test_parse_rule_forms(text: str, tool: str, kind: str, detail: object) -> None:
    rule = parse_rule(text)
    assert (rule.tool, rule.kind) == (tool, kind)
    assert rule.text == text.strip()
    if kind == "prefix":
        assert rule.words == detail
    elif kind == "domain":
        assert rule.domain == detail
    elif kind == "path":
        assert (rule.anchor, rule.pattern) == detail


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty permission rule"),
        ("run_command(", "expected ')' at the end"),
        ("run_command)", "')' without '('"),
        ("run_command()", "empty parentheses"),
        ("(prefix:ls)", "missing tool name"),
        ("run command", "is not a tool name"),
        ("run_command(prefx:npm)", "unknown 'prefx:'"),
        ("run_command(prefix:)", "needs at least one word"),
        ("run_command(prefix:'npm)", "prefix words"),
        ("web_fetch(domain:https://example.com)", "host name only"),
        ("web_fetch(domain:example.com:443)", "host name only"),
        ("web_fetch(domain:exa mple.com)", "is not a host name"),
        ("write_file(src/../etc/x)", "'..' is not allowed"),
        ("read_file(~bob/x)", "only '~/'"),
        ("run_command(prefix:ls)\nrm", "on one line"),
    ],
)
def test_parse_rule_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        parse_rule(text)
    assert message in str(info.value)


def test_parse_rules_names_the_bad_index() -> None:
    with pytest.raises(ValueError, match=r"^permissions\.deny\[1\]: bad permission rule"):
        parse_rules(["run_command", "run_command("], where="permissions.deny")
    rules = RuleSet.parse(["read_file"], ["run_command(prefix:rm)"])
    assert [r.text for r in rules.allow] == ["read_file"]
    assert [r.words for r in rules.deny] == [("rm",)]


def test_config_loading_reports_a_bad_rule_with_its_key_path() -> None:
    raw = {"permissions": {"allow": ["read_file", "web_fetch", "run_command(prefx:npm)"]}}
    with pytest.raises(ValidationError) as info:
        SoongConfig.model_validate(raw)
    line = format_validation_error(info.value, file="config.toml")
    assert line.startswith("config.toml: permissions.allow[2]: bad permission rule")
    assert "unknown 'prefx:'" in line
    ok = PermissionsConfig(allow=["run_command(prefix:npm test)"], deny=["web_fetch"])
    assert ok.allow == ["run_command(prefix:npm test)"]


# --- matching --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "tool", "expected"),
    [
        ("run_command", "run_command", True),
        ("run_command", "run_commands", False),
        ("run_command(prefix:ls)", "write_file", False),
        ("*", "anything", True),
        ("mcp__github__*", "mcp__github__create_issue", True),
        ("mcp__github__*", "mcp__gitlab__create_issue", False),
        ("*_file", "write_file", True),
        ("*_file", "list_dir", False),
    ],
)
def test_rule_applies_to_tool(rule: str, tool: str, expected: bool) -> None:
    assert parse_rule(rule).applies_to(tool) is expected


@pytest.mark.parametrize(
    ("rule", "words", "expected"),
    [
        ("x(prefix:npm test)", ("npm", "test"), True),
        ("x(prefix:npm test)", ("npm", "test", "--watch=false"), True),
        ("x(prefix:npm test)", ("npm", "testing"), False),
        ("x(prefix:npm test)", ("npm",), False),
        ("x(prefix:npm test)", ("npm", None), False),
        ("x(prefix:npm test)", (None, "test"), False),
        ("x(prefix:npm test)", ("npx", "test"), False),
        ("x(prefix:npm)", ("npm", "run", "build"), True),
        ("x(prefix:ls)", ("/tmp/evil/ls",), False),
        ("x(prefix:'my tool')", ("my tool", "x"), True),
        ("x(prefix:my tool)", ("my tool", "x"), False),
    ],
)
def test_prefix_rules_match_word_by_word(
    rule: str, words: tuple[str | None, ...], expected: bool
) -> None:
    assert parse_rule(rule).matches_command(words) is expected


@pytest.mark.parametrize(
    ("words", "expected"),
    [(("rm", "-rf"), True), (("/bin/rm", "x"), True), (("./rm",), True), (("rmdir",), False)],
)
def test_deny_prefix_rules_also_match_the_command_basename(
    words: tuple[str, ...], expected: bool
) -> None:
    assert parse_rule("x(prefix:rm)").matches_command(words, loose_name=True) is expected


ROOT = "/work/proj"
HOME = "/home/ann"


@pytest.mark.parametrize(
    ("rule", "path", "expected"),
    [
        # `**` crosses folders, `*` does not
        ("x(/src/**)", "src/a.py", True),
        ("x(/src/**)", "src/deep/er/a.py", True),
        ("x(/src/**)", "src", True),
        ("x(/src/**)", "srcx/a.py", False),
        ("x(/src/**)", "lib/src/a.py", False),
        ("x(/src/*.py)", "src/a.py", True),
        ("x(/src/*.py)", "src/deep/a.py", False),
        ("x(src/**/*.py)", "src/a.py", True),
        ("x(src/**/*.py)", "src/a/b/c.py", True),
        ("x(src/**/*.py)", "src/a/b/c.txt", False),
        ("x(**/*.env)", "deep/er/prod.env", True),
        ("x(**/*.env)", "prod.env", True),
        ("x(/.env)", ".env", True),
        ("x(/.env)", "sub/.env", False),
        ("x(/docs/)", "docs/x/y.md", True),
        ("x(/file?.txt)", "file1.txt", True),
        ("x(/file[0-9].txt)", "file7.txt", True),
        ("x(/file[!0-9].txt)", "file7.txt", False),
        # paths are normalised; leaving the project never matches a project rule
        ("x(/src/**)", "./src/a.py", True),
        ("x(/src/**)", "src/../../etc/passwd", False),
        ("x(/**)", "../outside.txt", False),
        ("x(/**)", "/etc/passwd", False),
        # absolute targets are placed in the project when the root is known
        ("x(/src/**)", "/work/proj/src/a.py", True),
        ("x(/src/**)", "/work/project2/src/a.py", False),
        # absolute rules
        ("x(//etc/**)", "/etc/passwd", True),
        ("x(//etc/**)", "/etcetera/x", False),
        ("x(//work/proj/src/*.py)", "src/a.py", True),
        ("x(//etc/**)", "etc/passwd", False),
        # home rules
        ("x(~/.ssh/**)", "~/.ssh/id_rsa", True),
        ("x(~/.ssh/**)", "/home/ann/.ssh/id_rsa", True),
        ("x(~/.ssh/**)", "/home/bob/.ssh/id_rsa", False),
        ("x(~/.ssh/**)", "~bob/.ssh/id_rsa", False),
    ],
)
def test_path_rules(rule: str, path: str, expected: bool) -> None:
    assert parse_rule(rule).matches_path(path, project_root=ROOT, home=HOME) is expected


def test_path_rules_without_roots_only_compare_like_with_like() -> None:
    assert parse_rule("x(/src/**)").matches_path("src/a.py")
    assert not parse_rule("x(/src/**)").matches_path("/work/proj/src/a.py")
    assert not parse_rule("x(~/.ssh/**)").matches_path("/home/ann/.ssh/id_rsa")
    assert parse_rule("x(~/.ssh/**)").matches_path("~/.ssh/id_rsa")


@pytest.mark.parametrize(
    ("path", "anchor", "expected"),
    [
        ("src/a.py", "project", "src/a.py"),
        ("src/a.py", "absolute", "work/proj/src/a.py"),
        ("/work/proj", "project", ""),
        ("~/x", "absolute", "home/ann/x"),
        ("../x", "project", None),
        ("", "project", None),
    ],
)
def test_anchored_path(path: str, anchor: str, expected: str | None) -> None:
    assert anchored_path(path, anchor, project_root=ROOT, home=HOME) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rule", "url", "expected"),
    [
        ("x(domain:example.com)", "https://example.com/a", True),
        ("x(domain:example.com)", "https://EXAMPLE.com.:8443/a", True),
        ("x(domain:example.com)", "https://api.example.com/a", True),
        ("x(domain:example.com)", "https://a.b.example.com", True),
        ("x(domain:example.com)", "https://evil-example.com/", False),
        ("x(domain:example.com)", "https://example.com.evil.net/", False),
        ("x(domain:example.com)", "https://example.com@evil.net/", False),
        ("x(domain:example.com)", "https://evil.net/?u=https://example.com", False),
        ("x(domain:example.com)", "https://evil.net\\@example.com/", False),
        ("x(domain:example.com)", "example.com/path", True),
        ("x(domain:example.com)", "not a url", False),
        ("x(domain:*.example.com)", "https://example.com/", False),
        ("x(domain:*.example.com)", "https://api.example.com/", True),
    ],
)
def test_domain_rules(rule: str, url: str, expected: bool) -> None:
    assert parse_rule(rule).matches_url(url) is expected


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://Api.Example.com:8443/x", "api.example.com"),
        ("http://[::1]:80/", "::1"),
        ("https://", None),
        ("", None),
    ],
)
def test_url_host(url: str, host: str | None) -> None:
    assert url_host(url) == host


def test_rules_of_other_kinds_never_match() -> None:
    prefix, path, domain = (
        parse_rule("x(prefix:ls)"),
        parse_rule("x(/src/**)"),
        parse_rule("x(domain:a.com)"),
    )
    assert not prefix.matches_path("ls") and not prefix.matches_url("https://ls")
    assert not path.matches_command(("src",)) and not path.matches_url("https://src")
    assert not domain.matches_command(("a.com",)) and not domain.matches_path("a.com")


# --- PERM-4: rules mean what they say ---------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "words", "covered"),
    [
        # a reader's prefix covers reading, not its writing or executing options
        ("find", ("find", ".", "-name", "*.py"), True),
        ("find", ("find", ".", "-delete"), False),
        ("find", ("find", ".", "-fprint", "out"), False),
        ("find", ("find", ".", "-exec", "rm", "{}", ";"), False),
        ("find", ("find", ".", None), False),  # `$ARGS` may be -delete
        ("find . -delete", ("find", ".", "-delete"), True),  # a rule naming the option
        ("find . -delete", ("find", ".", "-delete", "-fprint", "x"), False),
        ("rg", ("rg", "pattern"), True),
        ("rg", ("rg", "--pre=./x.sh", "p"), False),
        ("rg", ("rg", "--pre", "./x.sh", "p"), False),
        ("rg", ("rg", "-e", "--pre", "p"), True),  # a pattern, not the option
        ("sed -n", ("sed", "-n", "1p", "file"), True),
        ("sed -n", ("sed", "-n", "w out", "file"), False),
        ("sed -n", ("sed", "-n", "-i", "s/a/b/", "f"), False),
        ("sed", ("sed", "s/a/b/w out", "f"), False),
        ("sed", ("sed", "s/a/b/e", "f"), False),
        ("sed", ("sed", "-ni", "p", "f"), False),
        ("sed -i", ("sed", "-i", "s/a/b/", "f"), True),
        ("awk", ("awk", "{print $1}", "f"), True),
        ("awk", ("awk", '{system("rm x")}', "f"), False),
        ("awk", ("awk", '{print > "out"}'), False),
        ("awk", ("awk", "-f", "prog.awk"), False),
        ("python3", ("python3", "script.py", "-c"), True),
        ("python3", ("python3", "-c", "import os"), False),
        ("perl", ("perl", "-ne", "print"), False),
        ("perl", ("perl", "-pi", "-e", "s/a/b/", "f"), False),
        ("node", ("node", "-e", "1"), False),
        ("bash", ("bash", "-c", "ls"), False),
        ("tar -tf", ("tar", "-tf", "a.tar"), True),
        ("tar", ("tar", "xzf", "a.tgz"), False),
        ("tar", ("tar", "-t", "--to-command=sh", "-f", "a"), False),
        ("git", ("git", "status"), True),
        ("git", ("git", "commit", "-m", "x"), False),
        ("git commit", ("git", "commit", "-m", "x"), True),
        ("git status", ("git", "-C", ".", "status"), True),
        ("git status", ("git", "--no-pager", "-c", "color.ui=never", "status"), True),
        ("git status", ("git", "-c", "core.pager=evil", "status"), False),
        ("git status", ("git", "--exec-path=/tmp", "status"), False),
        ("git status", ("git", "-C", None, "status"), False),
        ("git log", ("git", "log", "--output=x"), False),
        ("git branch", ("git", "branch", "-a"), True),
        ("git branch", ("git", "branch", "-D", "main"), False),
        ("git config", ("git", "config", "user.name"), True),
        ("git config", ("git", "config", "user.name", "x"), False),
        ("sort", ("sort", "-o", "out", "f"), False),
        ("npm", ("npm", "run", "build"), True),  # executors by nature: their own rule covers
        ("make", ("make", "test"), True),
    ],
)
def test_prefix_allow_rules_cover_only_what_they_name(
    rule: str, words: tuple[str | None, ...], covered: bool
) -> None:
    assert parse_rule(f"run_command(prefix:{rule})").covers_command(words) is covered


@pytest.mark.parametrize(
    ("rule", "words", "level"),
    [
        ("git commit", ("git", "commit", "-m", "x"), "yes"),
        ("git commit", ("git", "-C", ".", "commit"), "yes"),
        ("git commit", ("git", "--no-pager", "commit"), "yes"),
        ("git commit", ("git", "-c", "k=v", "commit"), "yes"),
        ("git commit", ("git", "--git-dir=.git", "--work-tree=.", "-P", "commit"), "yes"),
        ("git commit", ("/usr/bin/git", "-C", ".", "commit"), "yes"),
        ("git -C . commit", ("git", "commit"), "yes"),  # the rule is normalised too
        ("git commit", ("git", None), "maybe"),
        ("git commit", ("git", "-C", None, "status"), "maybe"),
        ("git commit", ("git", "status"), "no"),
        ("git commit", ("git", "-C", ".", "status"), "no"),
        ("rm -rf", ("rm", None, "x"), "maybe"),
        ("rm", ("rmdir", "x"), "no"),
        ("rm", ("echo", None), "no"),
    ],
)
def test_deny_rules_match_after_global_options(
    rule: str, words: tuple[str | None, ...], level: str
) -> None:
    assert parse_rule(f"run_command(prefix:{rule})").deny_match(words) == level


@pytest.mark.parametrize(
    ("pattern", "host", "matches"),
    [
        ("example.com", "example.com", True),
        ("example.com", "api.example.com", True),
        ("example.com", "EXAMPLE.com.", True),
        ("example.com", "evil-example.com", False),
        ("*.example.com", "example.com", False),
        ("*.example.com", "api.example.com", True),
        ("*.example.com", "a.b.example.com", True),
        ("*.localhost", "localhost", False),
        (".example.com", "example.com", True),
    ],
)
def test_one_domain_pattern_syntax(pattern: str, host: str, matches: bool) -> None:
    assert DomainPattern.parse(pattern).matches(host) is matches


@pytest.mark.parametrize("text", ["", "*", "*example.com", "a.*.com", "ex ample.com", "*.", "a/b"])
def test_bad_domain_patterns(text: str) -> None:
    with pytest.raises(ValueError, match="is not a domain"):
        DomainPattern.parse(text)
