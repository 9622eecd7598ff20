"""Sensitive-path patterns (SBX-1), shared by the local and the in-memory sandbox."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from soong_agent.domain.permissions import SensitivePaths, compile_sensitive

PROJECT, HOME = "/work/proj", "/home/ann"


def paths(
    *entries: str, resolve: Callable[[str], str] | None = None, fold_case: bool = False
) -> SensitivePaths:
    return SensitivePaths(entries, project=PROJECT, home=HOME, resolve=resolve, fold_case=fold_case)


@pytest.mark.parametrize(
    ("entry", "path", "hit"),
    [
        ("~/.ssh", "/home/ann/.ssh", True),
        ("~/.ssh", "/home/ann/.ssh/id_rsa", True),
        ("~/.ssh", "/home/ann/.sshx", False),
        ("/srv/agent/sessions.sqlite", "/srv/agent/sessions.sqlite-wal", True),
        ("/srv/agent/sessions.sqlite", "/srv/agent/sessions.sqlite-journal", True),
        ("/srv/agent/sessions.sqlite", "/srv/agent/sessions.sqlite.bak", False),
        ("private", "/work/proj/private/x", False),  # no slash: a name pattern, not a path
        ("./private", "/work/proj/private/x", True),  # relative paths start at the project
        ("/srv/*/secret", "/srv/a/secret/key", True),
        ("/srv/*/secret", "/srv/a/b/secret", False),  # `*` stays inside one folder
        ("/srv/**/secret", "/srv/a/b/secret", True),
    ],
)
def test_path_entries_cover_the_path_and_below(entry: str, path: str, hit: bool) -> None:
    rule = compile_sensitive(entry, project=PROJECT, home=HOME)
    assert rule is not None
    assert rule.covers(path) is hit


def test_name_entries_match_any_component_below_a_root() -> None:
    sensitive = paths(".env", ".env.*")
    assert sensitive.rule_for("/work/proj/.env") is not None
    assert sensitive.rule_for("/work/proj/app/.env.local/x") is not None
    assert sensitive.rule_for("/work/proj/app/env") is None
    inside_env = SensitivePaths([".env"], project="/work/.env/proj", home=HOME)
    assert inside_env.rule_for("/work/.env/proj/a.txt") is None  # only names below the root
    assert inside_env.rule_for("/elsewhere/.env/a.txt") is not None  # outside: every name


def test_resolved_forms_and_case_folding() -> None:
    linked = paths("/link/config.toml", resolve=lambda p: p.replace("/link", "/real"))
    assert linked.rule_for("/real/config.toml") is not None
    assert "/real/config.toml" in linked.literal_prefixes
    folded = paths(".env", "~/.SSH", fold_case=True)
    assert folded.rule_for("/work/proj/.ENV") is not None
    assert folded.rule_for("/home/ann/.ssh/id_rsa") is not None
    assert paths(".env").rule_for("/work/proj/.ENV") is None


def test_blank_entries_are_ignored() -> None:
    assert compile_sensitive("  ", project=PROJECT, home=HOME) is None
    assert not paths("", " ")
