"""The ordered decision (allow < ask < deny): the strictest verdict wins where several apply."""

from __future__ import annotations

from typing import get_args

import pytest

from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.domain.permissions import (
    Outcome,
    PermissionMode,
    PermissionRequest,
    RuleSet,
    SessionGrants,
    Verdict,
    decide,
    rank,
    strictest,
)
from soong_agent.ports.shell import ShellAnalysis, SimpleCommand

ROOT = "/work/proj"


def test_rank_orders_allow_ask_deny() -> None:
    assert [rank(o) for o in ("allow", "ask", "deny")] == [0, 1, 2]
    assert sorted(get_args(Outcome), key=rank) == ["allow", "ask", "deny"]


@pytest.mark.parametrize(
    ("outcomes", "expected"),
    [
        (["allow", "deny"], "deny"),
        (["deny", "allow"], "deny"),
        (["allow", "ask"], "ask"),
        (["ask", "allow", "allow"], "ask"),
        (["ask", "deny", "allow"], "deny"),
        (["allow"], "allow"),
    ],
)
def test_strictest_wins(outcomes: list[Outcome], expected: Outcome) -> None:
    verdicts = [Verdict(o, f"{o} #{i}") for i, o in enumerate(outcomes)]
    chosen = strictest(verdicts)
    assert chosen is not None and chosen.outcome == expected


def test_strictest_keeps_the_first_of_equals_and_none_of_nothing() -> None:
    first, second = Verdict("ask", "first"), Verdict("ask", "second")
    assert strictest([Verdict("allow", "a"), first, second]) is first
    assert strictest([]) is None


def _decide(request: PermissionRequest, *, allow: list[str], deny: list[str]) -> Verdict:
    return decide(
        request,
        policy=PermissionsConfig(),
        grants=SessionGrants(),
        rules=RuleSet.parse(allow, deny),
        project_root=ROOT,
        home="/home/ann",
    )


@pytest.mark.parametrize(
    ("request_", "allow", "deny"),
    [
        (
            PermissionRequest("write_file", "write", "src/", target="src/a.py", target_kind="path"),
            ["write_file(/src/**)"],
            ["write_file(src/*.py)"],
        ),
        (
            PermissionRequest("write_file", "write", "src/", target="src/a.py", target_kind="path"),
            ["write_file"],
            ["write_file(/src/**)"],
        ),
        (
            PermissionRequest(
                "web_fetch", "network", "x", target="https://a.example.com/", target_kind="url"
            ),
            ["web_fetch(domain:example.com)"],
            ["web_fetch(domain:a.example.com)"],
        ),
        (
            PermissionRequest(
                "run_command",
                "exec",
                "*",
                target="git push",
                target_kind="command",
                shell=ShellAnalysis((SimpleCommand(("git", "push")),)),
            ),
            ["run_command(prefix:git)", "run_command"],
            ["run_command(prefix:git push)"],
        ),
    ],
)
def test_a_deny_and_an_allow_rule_both_matching_deny(
    request_: PermissionRequest, allow: list[str], deny: list[str]
) -> None:
    verdict = _decide(request_, allow=allow, deny=deny)
    assert verdict.outcome == "deny"
    assert verdict.decided_by == "rule" and verdict.rule == deny[0]
    assert verdict.reason.startswith(f'deny rule "{deny[0]}"')
    assert _decide(request_, allow=allow, deny=[]).outcome == "allow"


def test_ask_beats_allow_across_the_commands_of_one_line() -> None:
    line = ShellAnalysis((SimpleCommand(("npm", "test")), SimpleCommand(("curl", "x.example"))))
    request = PermissionRequest(
        "run_command",
        "exec",
        "*",
        target="npm test && curl x.example",
        target_kind="command",
        shell=line,
    )
    verdict = _decide(request, allow=["run_command(prefix:npm test)"], deny=[])
    assert verdict.outcome == "ask"
    assert '"curl x.example" is not covered' in verdict.reason
    both = _decide(
        request, allow=["run_command(prefix:npm test)", "run_command(prefix:curl)"], deny=[]
    )
    assert both.outcome == "allow"
    assert both.reason == (
        'every command is allowed: allow rule "run_command(prefix:npm test)"; '
        'allow rule "run_command(prefix:curl)"'
    )


def test_one_denied_command_denies_the_line_whatever_else_is_allowed() -> None:
    line = ShellAnalysis((SimpleCommand(("ls",)), SimpleCommand(("rm", "-rf", "x"))))
    request = PermissionRequest(
        "run_command", "exec", "*", target="ls; rm -rf x", target_kind="command", shell=line
    )
    verdict = _decide(
        request, allow=["run_command", "run_command(prefix:ls)"], deny=["run_command(prefix:rm)"]
    )
    assert verdict.outcome == "deny" and verdict.rule == "run_command(prefix:rm)"


def test_the_config_uses_the_one_mode_and_outcome_types() -> None:
    fields = PermissionsConfig.model_fields
    assert get_args(fields["mode"].annotation) == get_args(PermissionMode)
    assert get_args(fields["readonly_default"].annotation) == get_args(Outcome)
