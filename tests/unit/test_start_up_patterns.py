"""Patterns compiled at their first use, not at start-up (issue 10): sensitive path entries and
the memory rules give the same answers and report a bad entry when they always did."""

from __future__ import annotations

import re

import pytest

from soong_agent.domain.memory import policy, rules
from soong_agent.domain.permissions import SensitivePaths, compile_sensitive
from soong_agent.domain.permissions.git_objects import exclusions

PROJECT, HOME = "/work/proj", "/home/ann"
DEFAULTS = ("~/.ssh", ".env", ".env.*", "/srv/agent/sessions.sqlite", "/srv/*/secret")


def test_building_sensitive_paths_compiles_no_path_pattern() -> None:
    sensitive = SensitivePaths(DEFAULTS, project=PROJECT, home=HOME)
    path_rules = [rule for rule in sensitive.rules if rule.below]
    assert len(path_rules) == 3
    assert all(rule._paths is None for rule in path_rules)
    assert sensitive.rule_for("/home/ann/.ssh/id_rsa") is path_rules[0]
    assert path_rules[0]._paths is not None  # compiled by the first check that needed it


def test_a_second_sandbox_shares_the_compiled_rules() -> None:
    first = SensitivePaths(DEFAULTS, project=PROJECT, home=HOME)
    second = SensitivePaths(DEFAULTS, project=PROJECT, home=HOME)
    assert first.rules == second.rules
    for one, other in zip(first.rules, second.rules, strict=True):
        assert one.paths is other.paths  # one compiled rule per entry in the process
    elsewhere = SensitivePaths(["~/.ssh"], project=PROJECT, home="/home/bob")
    assert elsewhere.rules[0].paths is not first.rules[0].paths
    assert elsewhere.rule_for("/home/bob/.ssh/key") is not None
    assert elsewhere.rule_for("/home/ann/.ssh/key") is None


def test_the_path_rule_is_what_it_was() -> None:
    rule = compile_sensitive("/srv/*/secret", project=PROJECT, home=HOME)
    assert rule is not None and rule.paths is not None
    assert rule.paths.pattern == "srv/*/secret/**"
    assert rule.paths.text == "/srv/*/secret"
    inside = compile_sensitive("./*/secret", project=PROJECT, home=HOME)
    assert inside is not None
    assert exclusions([inside], PROJECT) == (  # git's pathspecs are made from the rule
        ":(exclude,top,glob)*/secret",
        ":(exclude,top,glob)*/secret/**",
    )
    name = compile_sensitive(".env", project=PROJECT, home=HOME)
    assert name is not None and name.paths is None and not name.covers("/work/proj/.env")


def test_an_entry_that_cannot_compile_is_reported_when_the_sandbox_is_built() -> None:
    with pytest.raises(re.error):
        SensitivePaths(["/srv/[z-a]/key"], project=PROJECT, home=HOME)


@pytest.mark.parametrize(
    ("check", "text", "found"),
    [
        (rules.file_structure, "src/\n├── main.py\n└── util.py", True),
        (rules.file_structure, "- src/a.py\n- src/b.py\n- tests/c.py", True),
        (rules.file_structure, "The user prefers small pull requests.", False),
        (rules.code_signature, "def handle(request):", True),
        (rules.task_progress, "Currently working on the parser.", True),
        (rules.branch_or_pr, "The branch is feature/login-42.", True),
        (rules.branch_or_pr, "We merge into main.", False),
        (rules.fix_details, "The root cause was a stale cache.", True),
    ],
)
def test_memory_rules_answer_as_before(check: rules.Rule, text: str, found: bool) -> None:
    assert (check(text) is not None) is found


def test_memory_categories_and_credentials() -> None:
    assert policy.categorise("Dashboards are at https://grafana.example.com") == "reference"
    assert policy.categorise("Never push to main without review.") == "feedback"
    assert policy.categorise("Ann is a data engineer.") == "user"
    assert rules.credential_value("the password is hunter22")
    assert not rules.credential_value("the password is stored in the vault")
