"""Hypothesis strategies for what a model, a server or a project's files can hand the agent:
texts with lone surrogates, NUL and control characters, byte order marks, UTF-8 sequences cut
in half (as Python decodes them, surrogateescape), huge values; JSON of every type, nested far
deeper than a parser recurses; arguments texts that are not JSON at all."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

ODD_CHARACTERS = (
    "\x00",  # NUL
    "\x1b",  # ESC (a terminal escape's start)
    "\x7f",
    "\r",
    "\u2028",  # line separator
    "\ufeff",  # byte order mark
    "\ufffd",
    "\ud800",  # lone high surrogate
    "\udbff",
    "\udc80",  # lone low surrogate (also: the byte 0x80 as surrogateescape carries it)
    "\udce9",  # the byte 0xe9 of b"caf\xe9"
    "\udfff",
    "\ud83d\ude00",  # a pair standing apart (one emoji)
    "😀",
    "é",
    "\\",
    '"',
    "\\x",
    "\\xe9",
    "\\udc80",  # the escape's text (valid JSON inside a string when its backslash is doubled)
)

split_utf8 = st.sampled_from(
    [b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xff", b"\xfe\xff", b"\xef\xbb\xbf", b"caf\xe9"]
).map(lambda raw: raw.decode("utf-8", "surrogateescape"))

bad_text = st.lists(
    st.one_of(
        st.sampled_from(ODD_CHARACTERS),
        split_utf8,
        st.text(max_size=12),
        st.characters(categories=["Cs", "Cc", "Cf", "Co"]),  # surrogates, controls, formats
    ),
    max_size=8,
).map("".join)

huge_text = st.sampled_from(["x" * 1_000_000, "é" * 300_000, "\udce9" * 100_000])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    bad_text,
)

json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(bad_text, inner, max_size=4)
    ),
    max_leaves=5,
)


def nested(depth: int, kind: str) -> str:
    return ("[" * depth + "]" * depth) if kind == "list" else ('{"a":' * depth + "1" + "}" * depth)


deep_json = st.builds(
    nested, st.integers(min_value=1, max_value=6_000), st.sampled_from(["list", "dict"])
)


def dumped(value: Any, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)


def object_text(fields: dict[str, Any], ascii_only: bool) -> str:
    return json.dumps(fields, ensure_ascii=ascii_only)


def arguments_for(names: list[str]) -> st.SearchStrategy[str]:
    """Arguments texts for a tool whose argument names are `names`: the right names with
    values of any type, wrong and unknown names, deep nesting in a value, and texts that
    are not a JSON object at all."""
    field_names = st.sampled_from(names) if names else bad_text
    fields = st.dictionaries(st.one_of(field_names, field_names, bad_text), json_values, max_size=5)
    deep_field = st.builds(
        lambda name, deep: json.dumps({name: 0}).replace("0", deep),
        field_names,
        deep_json,
    )
    return st.one_of(
        st.builds(object_text, fields, st.booleans()),
        st.builds(dumped, json_values, st.booleans()),
        deep_field,
        deep_json,
        bad_text,
        st.builds(
            lambda text, cut: text[:cut],
            st.builds(object_text, fields, st.booleans()),
            st.integers(min_value=0, max_value=40),
        ),
    )
