"""The permission engine (PERM-1, PERM-2): rules × modes × grants → decision + reason, as tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.domain.permissions import (
    PermissionRequest,
    RuleSet,
    SessionGrants,
    Verdict,
    command_scope,
    decide,
    describe_scope,
    describe_scopes,
    directory_scope,
    fallback_analysis,
    path_scope,
    scope_covers,
    session_scopes,
    url_scope,
    without_approver,
)
from soong_agent.ports.approval import PermissionClass
from soong_agent.ports.shell import ShellAnalysis, SimpleCommand

ROOT = "/work/proj"
HOME = "/home/ann"

Words = tuple[str | None, ...]


def path(tool: str, target: str, cls: PermissionClass = "write") -> PermissionRequest:
    return PermissionRequest(tool, cls, path_scope(target), target=target, target_kind="path")


def url(
    target: str, tool: str = "web_fetch", cls: PermissionClass = "network"
) -> PermissionRequest:
    return PermissionRequest(tool, cls, url_scope(target), target=target, target_kind="url")


def cmd(
    *commands: Words | SimpleCommand, ok: bool = True, line: str = "(line)"
) -> PermissionRequest:
    simple = tuple(c if isinstance(c, SimpleCommand) else SimpleCommand(c) for c in commands)
    problems = () if ok else ("syntax error",)
    analysis = ShellAnalysis(simple, ok=ok, problems=problems)
    return PermissionRequest(
        "run_command", "exec", "*", target=line, target_kind="command", shell=analysis
    )


def plain(tool: str, cls: PermissionClass) -> PermissionRequest:
    return PermissionRequest(tool, cls, "*")


def run(
    request: PermissionRequest,
    grants: SessionGrants | None = None,
    **config: Any,
) -> Verdict:
    policy = PermissionsConfig(**config)
    return decide(
        request, policy=policy, grants=grants or SessionGrants(), project_root=ROOT, home=HOME
    )


# --- rule × request → decision + reason ---------------------------------------------------------

CASES: list[tuple[str, dict[str, Any], PermissionRequest, str, str]] = [
    # no rules, default mode
    ("read-only allowed", {}, plain("read_file", "read_only"), "allow", "readonly_default"),
    ("write asks", {}, path("write_file", "src/a.py"), "ask", "write tool needs approval"),
    ("exec asks", {}, cmd(("npm", "test")), "ask", "exec tool needs approval"),
    (
        "readonly_default ask",
        {"readonly_default": "ask"},
        plain("read_file", "read_only"),
        "ask",
        "readonly_default = 'ask'",
    ),
    (
        "readonly_default ask, allowed by rule",
        {"readonly_default": "ask", "allow": ["read_file"]},
        plain("read_file", "read_only"),
        "allow",
        'allow rule "read_file"',
    ),
    (
        "readonly_default deny is not overridden by an allow rule",
        {"readonly_default": "deny", "allow": ["read_file"]},
        plain("read_file", "read_only"),
        "deny",
        "readonly_default = 'deny'",
    ),
    # `Tool`
    (
        "Tool allows every call",
        {"allow": ["write_file"]},
        path("write_file", "/etc/x"),
        "allow",
        'allow rule "write_file"',
    ),
    (
        "tool mismatch",
        {"allow": ["write_file"]},
        path("edit_file", "src/a.py"),
        "ask",
        "write tool needs approval",
    ),
    ("* allows any tool", {"allow": ["*"]}, path("edit_file", "x"), "allow", 'allow rule "*"'),
    (
        "* denies any tool",
        {"deny": ["*"], "mode": "bypass"},
        plain("read_file", "read_only"),
        "deny",
        'deny rule "*"',
    ),
    # `Tool(glob)`
    (
        "glob ** below",
        {"allow": ["write_file(/src/**)"]},
        path("write_file", "src/deep/a.py"),
        "allow",
        'allow rule "write_file(/src/**)" matches src/deep/a.py',
    ),
    (
        "glob outside",
        {"allow": ["write_file(/src/**)"]},
        path("write_file", "docs/a.md"),
        "ask",
        "needs approval",
    ),
    (
        "glob escape with ..",
        {"allow": ["write_file(/src/**)"]},
        path("write_file", "src/../../etc/passwd"),
        "ask",
        "needs approval",
    ),
    (
        "glob on an absolute target inside the project",
        {"allow": ["write_file(src/**/*.py)"]},
        path("write_file", "/work/proj/src/a/b.py"),
        "allow",
        'allow rule "write_file(src/**/*.py)"',
    ),
    (
        "absolute glob",
        {"deny": ["read_file(//etc/**)"]},
        path("read_file", "/etc/shadow", "read_only"),
        "deny",
        'deny rule "read_file(//etc/**)" matches /etc/shadow',
    ),
    (
        "home glob",
        {"deny": ["*(~/.ssh/**)"]},
        path("read_file", "/home/ann/.ssh/id_rsa", "read_only"),
        "deny",
        'deny rule "*(~/.ssh/**)"',
    ),
    (
        "deny dotenv though read-only is allowed",
        {"deny": ["read_file(/.env)"]},
        path("read_file", ".env", "read_only"),
        "deny",
        'deny rule "read_file(/.env)"',
    ),
    # `Tool(domain:…)`
    (
        "domain",
        {"allow": ["web_fetch(domain:example.com)"]},
        url("https://example.com/x"),
        "allow",
        'allow rule "web_fetch(domain:example.com)" matches example.com',
    ),
    (
        "subdomain",
        {"allow": ["web_fetch(domain:example.com)"]},
        url("https://api.example.com/x"),
        "allow",
        "matches api.example.com",
    ),
    (
        "lookalike domain",
        {"allow": ["web_fetch(domain:example.com)"]},
        url("https://evil-example.com/x"),
        "ask",
        "network tool needs approval",
    ),
    (
        "domain deny",
        {"allow": ["web_fetch"], "deny": ["web_fetch(domain:evil.net)"]},
        url("https://cdn.evil.net/x"),
        "deny",
        'deny rule "web_fetch(domain:evil.net)"',
    ),
    # `Tool(prefix:…)`
    (
        "prefix",
        {"allow": ["run_command(prefix:npm test)"]},
        cmd(("npm", "test", "--watch=false")),
        "allow",
        'allow rule "run_command(prefix:npm test)"',
    ),
    (
        "prefix word boundary",
        {"allow": ["run_command(prefix:npm test)"]},
        cmd(("npm", "testing")),
        "ask",
        '"npm testing" is not covered',
    ),
    (
        "prefix on another tool's target kind",
        {"allow": ["write_file(prefix:src)"]},
        path("write_file", "src/a.py"),
        "ask",
        "needs approval",
    ),
    # strictest wins
    (
        "deny beats allow",
        {"allow": ["run_command"], "deny": ["run_command(prefix:rm)"]},
        cmd(("rm", "-rf", "x")),
        "deny",
        'deny rule "run_command(prefix:rm)" matches "rm -rf x"',
    ),
    (
        "deny beats a more specific allow",
        {"allow": ["write_file(/src/a.py)"], "deny": ["write_file(/src/**)"]},
        path("write_file", "src/a.py"),
        "deny",
        'deny rule "write_file(/src/**)"',
    ),
    # modes
    (
        "plan denies writes even with an allow rule",
        {"mode": "plan", "allow": ["write_file"]},
        path("write_file", "src/a.py"),
        "deny",
        "mode plan is read-only",
    ),
    (
        "plan denies exec",
        {"mode": "plan", "allow": ["run_command(prefix:ls)"]},
        cmd(("ls",)),
        "deny",
        "mode plan is read-only",
    ),
    (
        "plan reads",
        {"mode": "plan"},
        plain("read_file", "read_only"),
        "allow",
        "readonly_default",
    ),
    (
        "plan, deny rule reason first",
        {"mode": "plan", "deny": ["write_file"]},
        path("write_file", "a"),
        "deny",
        'deny rule "write_file"',
    ),
    ("bypass allows", {"mode": "bypass"}, cmd(("rm", "-rf", "/")), "allow", "mode bypass"),
    (
        "bypass allows unparseable",
        {"mode": "bypass"},
        cmd((None,), ok=False),
        "allow",
        "mode bypass",
    ),
    (
        "bypass still denies by rule",
        {"mode": "bypass", "deny": ["run_command(prefix:rm)"]},
        cmd(("ls",), ("rm", "x")),
        "deny",
        'deny rule "run_command(prefix:rm)"',
    ),
    (
        "accept_edits allows writes",
        {"mode": "accept_edits"},
        path("edit_file", "src/a.py"),
        "allow",
        "mode accept_edits",
    ),
    (
        "accept_edits does not allow exec",
        {"mode": "accept_edits"},
        cmd(("ls",)),
        "ask",
        "exec tool needs approval",
    ),
    (
        "accept_edits does not allow network",
        {"mode": "accept_edits"},
        url("https://example.com"),
        "ask",
        "network tool needs approval",
    ),
    (
        "accept_edits still denies by rule",
        {"mode": "accept_edits", "deny": ["edit_file(/.git/**)"]},
        path("edit_file", ".git/config"),
        "deny",
        'deny rule "edit_file(/.git/**)"',
    ),
]


@pytest.mark.parametrize(
    ("config", "request_", "outcome", "reason"),
    [pytest.param(c, r, o, why, id=name) for name, c, r, o, why in CASES],
)
def test_rule_request_decision_reason(
    config: dict[str, Any], request_: PermissionRequest, outcome: str, reason: str
) -> None:
    verdict = run(request_, **config)
    assert (verdict.outcome, reason in verdict.reason) == (outcome, True), verdict.reason


@pytest.mark.parametrize(
    ("config", "request_", "decided_by", "rule"),
    [
        ({"deny": ["run_command(prefix:rm)"]}, cmd(("rm",)), "rule", "run_command(prefix:rm)"),
        ({"allow": ["write_file"]}, path("write_file", "a"), "rule", "write_file"),
        ({"mode": "plan"}, path("write_file", "a"), "mode", None),
        ({}, plain("read_file", "read_only"), "readonly_default", None),
        ({}, path("write_file", "a"), "policy", None),
        (
            {"allow": ["run_command(prefix:ls)", "run_command(prefix:grep)"]},
            cmd(("ls",), ("grep", "x")),
            "rule",
            None,
        ),
        (
            {"allow": ["run_command(prefix:ls)"]},
            cmd(("ls",), ("ls", "-l")),
            "rule",
            "run_command(prefix:ls)",
        ),
    ],
)
def test_verdict_says_what_decided(
    config: dict[str, Any], request_: PermissionRequest, decided_by: str, rule: str | None
) -> None:
    verdict = run(request_, **config)
    assert (verdict.decided_by, verdict.rule) == (decided_by, rule)


def test_mode_and_rules_parameters_override_the_policy() -> None:
    policy = PermissionsConfig(mode="plan", allow=["write_file"])
    request = path("write_file", "src/a.py")
    grants = SessionGrants()
    assert decide(request, policy=policy, grants=grants).outcome == "deny"
    assert decide(request, policy=policy, grants=grants, mode="default").outcome == "allow"
    rules = RuleSet.parse(deny=["write_file(/src/**)"])
    verdict = decide(request, policy=policy, grants=grants, mode="bypass", rules=rules)
    assert (verdict.outcome, verdict.rule) == ("deny", "write_file(/src/**)")


def test_legacy_requests_without_target_still_work() -> None:
    grants = SessionGrants()
    policy = PermissionsConfig()
    request = PermissionRequest("write_file", "write", "src/")
    assert decide(request, policy=policy, grants=grants).outcome == "ask"
    grants.add("write_file", "src/")
    verdict = decide(
        PermissionRequest("write_file", "write", "src/a/"), policy=policy, grants=grants
    )
    assert verdict.outcome == "allow"
    assert verdict.reason.startswith("allowed for this session: write_file on any file in src/")


# --- command lines: every simple command must be covered ----------------------------------------

NPM_LS = {"allow": ["run_command(prefix:npm test)", "run_command(prefix:ls)"]}


@pytest.mark.parametrize(
    ("config", "request_", "outcome", "reason"),
    [
        (NPM_LS, cmd(("npm", "test"), ("ls", "-l")), "allow", "every command is allowed"),
        (NPM_LS, cmd(("npm", "test"), ("curl", "x")), "ask", '"curl x" is not covered'),
        (NPM_LS, cmd(("npm", "test"), (None, "x"), ok=False), "ask", "not fully understood"),
        (NPM_LS, cmd(("npm", "test"), ok=False), "ask", "syntax error"),
        (NPM_LS, cmd(), "ask", "no command found"),
        (
            NPM_LS,
            cmd(SimpleCommand(("npm", "test"), ("/etc/passwd",))),
            "ask",
            '"npm test" writes to /etc/passwd',
        ),
        (
            {"allow": ["run_command(prefix:npm test)", "run_command(/build/**)"]},
            cmd(SimpleCommand(("npm", "test"), ("build/log.txt",))),
            "allow",
            "every command is allowed",
        ),
        (
            {"allow": ["run_command(prefix:npm test)"], "deny": ["*(//etc/**)"]},
            cmd(SimpleCommand(("npm", "test"), ("/etc/passwd",))),
            "deny",
            'deny rule "*(//etc/**)" matches the redirection to /etc/passwd',
        ),
        ({"allow": ["run_command"]}, cmd((None,), ok=False), "allow", 'allow rule "run_command"'),
        (
            {"allow": ["run_command"], "deny": ["run_command(prefix:rm)"]},
            cmd(("ls",), (None, "x"), ok=False),
            "ask",
            'but deny rule "run_command(prefix:rm)" cannot be checked',
        ),
        (
            {"mode": "bypass", "deny": ["run_command(prefix:rm)"]},
            cmd((None, "x"), ok=False),
            "ask",
            'mode bypass, but deny rule "run_command(prefix:rm)" cannot be checked',
        ),
        (
            {"mode": "bypass", "deny": ["*(//etc/**)"]},
            cmd(SimpleCommand(("ls",), ("?",))),
            "ask",
            "a redirection target is not literal",
        ),
        (
            {"mode": "bypass", "deny": ["web_fetch(prefix:rm)"]},
            cmd((None, "x"), ok=False),
            "allow",
            "mode bypass",
        ),
        (
            {"allow": ["run_command"]},
            cmd(SimpleCommand(("ls",), ("out",))),
            "allow",
            'allow rule "run_command"',
        ),
        (
            {"allow": ["run_command"], "deny": ["run_command(prefix:curl)"]},
            cmd(("ls",), ("curl", "x"), ok=False),
            "deny",
            'deny rule "run_command(prefix:curl)"',
        ),
        (
            {"deny": ["run_command(prefix:rm)"]},
            cmd(("/usr/bin/rm", "x")),
            "deny",
            'deny rule "run_command(prefix:rm)"',
        ),
    ],
)
def test_command_lines(
    config: dict[str, Any], request_: PermissionRequest, outcome: str, reason: str
) -> None:
    verdict = run(request_, **config)
    assert (verdict.outcome, reason in verdict.reason) == (outcome, True), verdict.reason


def test_a_command_without_analysis_is_never_allowed_by_prefix_but_still_denied() -> None:
    config: dict[str, Any] = {
        "allow": ["run_command(prefix:npm test)"],
        "deny": ["run_command(prefix:rm)"],
    }
    bare = PermissionRequest("run_command", "exec", "*", target="npm test", target_kind="command")
    verdict = run(bare, **config)
    assert verdict.outcome == "ask"
    assert "not analysed by a shell parser" in verdict.reason
    chained = PermissionRequest(
        "run_command", "exec", "*", target="npm test&&rm -rf x", target_kind="command"
    )
    assert run(chained, **config).outcome == "deny"


@pytest.mark.parametrize(
    ("line", "commands"),
    [
        ("npm test", [("npm", "test")]),
        ("npm test && rm -rf x", [("npm", "test"), ("rm", "-rf", "x")]),
        ("a|b;c || d > e", [("a",), ("b",), ("c",), ("d",), ("e",)]),
        ("echo 'a b'", [("echo", "a b")]),
    ],
)
def test_fallback_analysis(line: str, commands: list[Words]) -> None:
    analysis = fallback_analysis(line)
    assert not analysis.ok
    assert [c.words for c in analysis.commands] == commands


# --- session grants -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grant", "kind", "request_", "outcome"),
    [
        ("src/", "path", path("write_file", "src/a.py"), "allow"),
        ("src/", "path", path("write_file", "src/deep/er/a.py"), "allow"),
        ("src/", "path", path("write_file", "srcx/a.py"), "ask"),
        ("src/", "path", path("write_file", "a.py"), "ask"),
        ("src/", "path", path("write_file", "src/../../etc/passwd"), "ask"),
        ("./", "path", path("write_file", "a/b.py"), "allow"),
        ("./", "path", path("write_file", "/etc/passwd"), "ask"),
        ("./", "path", path("write_file", "../x"), "ask"),
        ("src/", "path", path("edit_file", "src/a.py"), "ask"),  # another tool
        ("npm test", "command", cmd(("npm", "test", "--ci")), "allow"),
        ("npm test", "command", cmd(("npm", "testing")), "ask"),
        ("npm test", "command", cmd(("npm", "test"), ("curl", "x")), "ask"),
        ("npm test", "command", cmd(("npm", "test"), ok=False), "ask"),
        ("npm test", "command", cmd(SimpleCommand(("npm", "test"), ("f",))), "ask"),
        ("ls", "command", cmd(("ls", "-la"), ("ls",)), "allow"),
        ("example.com", "url", url("https://example.com/a"), "allow"),
        ("example.com", "url", url("https://EXAMPLE.com:443/b"), "allow"),
        ("example.com", "url", url("https://api.example.com/"), "ask"),
        ("example.com", "url", url("https://evil-example.com/"), "ask"),
        ("*", None, cmd((None,), ok=False), "allow"),
    ],
)
def test_grants(grant: str, kind: Any, request_: PermissionRequest, outcome: str) -> None:
    grants = SessionGrants()
    tool = "write_file" if kind == "path" else request_.tool
    grants.add(tool, grant, kind)
    verdict = run(request_, grants)
    assert verdict.outcome == outcome, verdict.reason
    if outcome == "allow":
        assert verdict.decided_by == "grant"
        assert "allowed for this session" in verdict.reason


def test_grants_and_rules_can_cover_one_line_together() -> None:
    grants = SessionGrants()
    grants.add("run_command", "grep", "command")
    verdict = run(cmd(("npm", "test"), ("grep", "ok")), grants, allow=["run_command(prefix:npm)"])
    assert verdict.outcome == "allow"
    assert 'allow rule "run_command(prefix:npm)"' in verdict.reason
    assert 'commands starting with "grep"' in verdict.reason
    assert verdict.decided_by == "grant"


def test_a_grant_never_overrides_plan_or_a_deny_rule() -> None:
    grants = SessionGrants()
    grants.add("write_file", "./", "path")
    assert run(path("write_file", "a.py"), grants, mode="plan").outcome == "deny"
    verdict = run(path("write_file", "a.py"), grants, deny=["write_file(/a.py)"])
    assert verdict.reason.startswith('deny rule "write_file(/a.py)"')


def test_grant_records_what_the_prompt_showed() -> None:
    grants = SessionGrants()
    request = cmd(("npm", "test", "--ci"), ("grep", "-v", "x"), ("npm", "test"))
    scopes = session_scopes(request)
    assert scopes == ("npm test", "grep -v")
    assert describe_scopes("run_command", scopes, "command") == (
        'run_command for commands starting with "npm test" or "grep -v", '
        "for the rest of this session"
    )
    assert grants.grant(request) == scopes
    assert len(grants) == 2
    assert run(cmd(("grep", "-v", "y"), ("npm", "test", "x")), grants).outcome == "allow"
    assert run(cmd(("grep", "y")), grants).outcome == "ask"


@pytest.mark.parametrize(
    ("request_", "scopes"),
    [
        (path("write_file", "src/a.py"), ("src/",)),
        (url("https://Docs.Example.com/x?y"), ("docs.example.com",)),
        (url("not a url at all"), ()),
        (cmd(("npm", "test")), ("npm test",)),
        (cmd(("npm", "test"), ok=False), ()),
        (cmd((None, "x"), ok=False), ()),
        (cmd(), ()),
        (PermissionRequest("todo_write", "write", "*"), ("*",)),
    ],
)
def test_session_scopes(request_: PermissionRequest, scopes: tuple[str, ...]) -> None:
    assert session_scopes(request_) == scopes


@pytest.mark.parametrize(
    ("display", "scope"),
    [
        ("src/a.py", "src/"),
        ("src/deep/a.py", "src/deep/"),
        ("a.py", "./"),
        ("./a.py", "./"),
        ("src/../../etc/passwd", "../etc/"),
        ("/etc/passwd", "/etc/"),
        ("/a", "/"),
        ("~/.bashrc", "~/"),
        ("src/dir/", "src/"),
    ],
)
def test_path_scope(display: str, scope: str) -> None:
    assert path_scope(display) == scope
    assert directory_scope(display) == scope


@pytest.mark.parametrize(
    ("words", "scope"),
    [
        (("npm", "test", "--ci"), "npm test"),
        (("ls",), "ls"),
        (("git", None, "x"), "git"),
        ((None, "x"), ""),
        (("my tool", "run", "x"), "'my tool' run"),
    ],
)
def test_command_scope(words: Sequence[str | None], scope: str) -> None:
    assert command_scope(words) == scope


@pytest.mark.parametrize(
    ("granted", "scope", "covers"),
    [
        ("*", "anything", True),
        ("src/", "src/", True),
        ("src/", "src/a/", True),
        ("src/", "srcx/", False),
        ("./", "src/", True),
        ("./", "/etc/", False),
        ("./", "~/", False),
        ("./", "../", False),
        ("/tmp/x/", "/tmp/x/y/", True),
        ("example.com", "example.com", True),
        ("example.com", "api.example.com", False),
    ],
)
def test_scope_covers(granted: str, scope: str, covers: bool) -> None:
    assert scope_covers(granted, scope) is covers


@pytest.mark.parametrize(
    ("tool", "scope", "kind", "sentence"),
    [
        (
            "run_command",
            "npm test",
            "command",
            'run_command for commands starting with "npm test", for the rest of this session',
        ),
        (
            "write_file",
            "src/",
            "path",
            "write_file on any file in src/ and below, for the rest of this session",
        ),
        (
            "write_file",
            "./",
            "path",
            "write_file on any file in the project's top folder and below, "
            "for the rest of this session",
        ),
        (
            "web_fetch",
            "example.com",
            "url",
            "web_fetch on example.com, for the rest of this session",
        ),
        ("todo_write", "*", None, "every todo_write call for the rest of this session"),
        (
            "write_file",
            "src/",
            None,
            "write_file on any file in src/ and below, for the rest of this session",
        ),
    ],
)
def test_describe_scope(tool: str, scope: str, kind: Any, sentence: str) -> None:
    assert describe_scope(tool, scope, kind) == sentence


def test_describe_scopes_when_nothing_can_be_granted() -> None:
    assert describe_scopes("run_command", (), "command").startswith("nothing:")


def test_grants_live_in_memory_per_tool() -> None:
    grants = SessionGrants()
    grants.add("write_file", "src/", "path")
    grants.add("write_file", "src/", "path")
    assert len(grants) == 1
    assert grants.covering("write_file", "src/x/", "path") == "src/"
    assert grants.covering("edit_file", "src/x/", "path") is None
    assert grants.covering("write_file", "src/x/") == "src/"
    grants.add("run_command", "git status", "command")
    assert grants.covering("run_command", "git status -s", "command") == "git status"
    assert grants.covering("run_command", "git stash", "command") is None
    assert grants.covering_command("run_command", ("git", "status")) == "git status"
    assert grants.covering_command("run_command", ("git", None)) is None
    assert not grants.covers_everything("run_command")


@pytest.mark.parametrize(("setting", "decision"), [("allow", "allow_once"), ("deny", "deny")])
def test_without_approver(setting: Any, decision: str) -> None:
    got, reason = without_approver(PermissionsConfig(write_without_callback=setting))
    assert got == decision
    assert "write_without_callback" in reason


# --- PERM-4: rules mean what they say -----------------------------------------------------------


@pytest.mark.parametrize(
    ("words", "scope"),
    [
        (("find", ".", "-name", "x"), "find ."),
        (("find", ".", "-name", "x", "-delete"), "find . -name x -delete"),
        (("git", "-C", ".", "status"), "git status"),
        (("git", "--no-pager", "log", "-1"), "git log"),
        (("git", "-c", "core.pager=x", "log"), "git log"),  # the -c can never be granted
        (("sed", "-i", "s/a/b/", "f"), "sed -i"),
    ],
)
def test_command_scope_reaches_the_writing_options(words: Words, scope: str) -> None:
    assert command_scope(words) == scope


def test_grants_cover_a_command_the_way_a_prefix_rule_does() -> None:
    grants = SessionGrants()
    grants.add("run_command", "find .", "command")
    grants.add("run_command", "git status", "command")
    assert grants.covering_command("run_command", ("find", ".", "-name", "x")) == "find ."
    assert grants.covering_command("run_command", ("find", ".", "-delete")) is None
    assert grants.covering_command("run_command", ("git", "-C", ".", "status")) == "git status"
    assert grants.covering_command("run_command", ("git", "-c", "core.pager=x", "status")) is None
    assert grants.covering("run_command", "find . -delete", "command") is None


@pytest.mark.parametrize(
    ("config", "request_", "outcome", "reason"),
    [
        (
            {"allow": ["run_command(prefix:find)"]},
            cmd(("find", ".", "-delete")),
            "ask",
            'find -delete deletes files, which allow rule "run_command(prefix:find)" does not',
        ),
        (
            {"allow": ["run_command(prefix:find . -delete)"]},
            cmd(("find", ".", "-delete")),
            "allow",
            'allow rule "run_command(prefix:find . -delete)"',
        ),
        (
            {"allow": ["run_command(prefix:git status)"]},
            cmd(("git", "-C", ".", "status")),
            "allow",
            'allow rule "run_command(prefix:git status)"',
        ),
        (
            {"allow": ["run_command"], "deny": ["run_command(prefix:git commit)"]},
            cmd(("git", "-C", ".", "--no-pager", "commit", "-m", "x")),
            "deny",
            'deny rule "run_command(prefix:git commit)" matches',
        ),
        (
            {"allow": ["run_command"], "deny": ["run_command(prefix:git commit)"]},
            cmd(("git", None)),
            "ask",
            'deny rule "run_command(prefix:git commit)" cannot be checked ("git …" has words',
        ),
        (
            {"mode": "bypass", "deny": ["run_command(prefix:git push)"]},
            cmd(("git", "-C", None, "status")),
            "ask",
            "mode bypass, but deny rule",
        ),
        (
            {"allow": ["run_command"], "deny": ["run_command(prefix:rm)"]},
            cmd(("python3", "-c", "import shutil; shutil.rmtree('x')")),
            "ask",
            "python -c runs code, which the analyser does not read",
        ),
        (
            {"allow": ["run_command"], "deny": ["run_command(prefix:rm)"]},
            cmd(("git", "-c", "alias.x=!rm -rf y", "x")),
            "ask",
            "may make git run a program",
        ),
        (
            {"allow": ["run_command"]},
            cmd(("python3", "-c", "print(1)")),
            "allow",
            'allow rule "run_command"',
        ),
    ],
)
def test_rules_mean_what_they_say(
    config: dict[str, Any], request_: PermissionRequest, outcome: str, reason: str
) -> None:
    verdict = run(request_, **config)
    assert (verdict.outcome, reason in verdict.reason) == (outcome, True), verdict.reason
