"""The one rule for text no UTF-8 can hold (`soong_agent.ports.text`, issue 39 item 2)."""

from __future__ import annotations

import json
import os

import pytest

from soong_agent.ports.text import (
    escaped_bytes_path,
    first_surrogate,
    has_surrogate,
    safe_json_text,
    safe_text,
)


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        (os.fsdecode(b"caf\xe9.txt"), "caf\\xe9.txt"),  # a file name's byte: its escape
        ("\udcff\udc80", "\\xff\\x80"),
        ("a\ud800b", "a\ufffdb"),  # a broken escape from a model: the replacement character
        ("\udfff", "\ufffd"),
        ("\ud83d\ude00", "😀"),  # a pair standing apart: its character
        ("\udcc3\udca9", "é"),  # carried bytes that together are UTF-8: that character
        ("\ud800" + os.fsdecode(b"\xe9"), "\U000100e9"),  # high + low: a pair, whatever made it
        ("plain é \x00 \ufeff", "plain é \x00 \ufeff"),  # everything UTF-8 can hold stays
    ],
)
def test_lone_surrogates_are_written_out_by_one_rule(given: str, shown: str) -> None:
    assert safe_text(given) == shown
    safe_text(given).encode("utf-8")


def test_text_without_surrogates_is_the_same_object() -> None:
    for text in ("ascii", "é😀", ""):
        assert safe_text(text) is text
        assert safe_json_text(text)[0] is text


def test_the_escape_of_a_file_name_leads_back_to_its_bytes() -> None:
    name = os.fsdecode(b"d\xe9/caf\xe9.txt")
    assert escaped_bytes_path(safe_text(name)) == name
    assert escaped_bytes_path("plain.txt") is None
    assert escaped_bytes_path("a\\x41.txt") is None  # only 0x80..0xff: what UTF-8 leaves out


def test_surrogates_are_found_and_named() -> None:
    assert has_surrogate("a\ud800") and not has_surrogate("é") and not has_surrogate("a")
    assert first_surrogate("ab\udce9") == "U+DCE9" and first_surrogate("é") is None


@pytest.mark.parametrize(
    ("raw", "parsed", "lone"),
    [
        ('{"path": "caf\\udce9.txt"}', {"path": "caf\\xe9.txt"}, ["U+DCE9"]),  # an escape
        ('{"path": "caf\udce9.txt"}', {"path": "caf\\xe9.txt"}, ["U+DCE9"]),  # a character
        ('{"c": "a\\ud800"}', {"c": "a\ufffd"}, ["U+D800"]),
        ('{"c": "a\\\\ud800"}', {"c": "a\\ud800"}, []),  # an escaped backslash: plain text
        ('{"c": "a\\\\\\ud800"}', {"c": "a\\\ufffd"}, ["U+D800"]),
        ('{"c": "\\ud83d\\ude00"}', {"c": "😀"}, []),  # a pair escaped: one character
    ],
)
def test_arguments_text_is_made_safe_and_its_lone_surrogates_named(
    raw: str, parsed: dict[str, str], lone: list[str]
) -> None:
    text, found = safe_json_text(raw)
    text.encode("utf-8")
    assert json.loads(text) == parsed
    assert found == lone
