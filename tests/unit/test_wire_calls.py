"""Stored tool calls are sent back in a shape strict servers accept."""

from __future__ import annotations

import pytest

from soong_agent.adapters.providers.calls import arguments_object, arguments_text, wire_name


@pytest.mark.parametrize(
    ("raw", "text", "obj"),
    [
        ('{"path": "a"}', '{"path": "a"}', {"path": "a"}),
        ("", "{}", {}),
        ('{"path": ', "{}", {}),  # cut short by the model
        ('"just text"', "{}", {}),
        ("[1, 2]", "{}", {}),
        ("null", "{}", {}),
        ("[" * 100_000, "{}", {}),  # too deep to parse
    ],
)
def test_arguments_are_always_an_object(raw: str, text: str, obj: dict[str, object]) -> None:
    assert arguments_text(raw) == text
    assert arguments_object(raw) == obj


@pytest.mark.parametrize(
    ("name", "sent"),
    [
        ("read_file", "read_file"),
        ("", "unnamed_tool"),
        ("functions.read_file:0", "functions_read_file_0"),
        ("a" * 80, "a" * 64),
        ("mcp__srv__tool-1", "mcp__srv__tool-1"),
    ],
)
def test_names_match_the_pattern_the_apis_check(name: str, sent: str) -> None:
    assert wire_name(name) == sent
