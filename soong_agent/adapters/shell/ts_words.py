"""Tree-sitter-bash nodes read as bash reads them: a word's literal text (None when it holds an
expansion), and where a node sits (in double quotes, in arithmetic, in backticks)."""

from __future__ import annotations

from tree_sitter import Node

from soong_agent.adapters.shell import bash_text
from soong_agent.adapters.shell.ts_nodes import (
    ARITHMETIC,
    SHOWN,
)


def node_text(node: Node) -> str:
    raw = node.text
    return raw.decode("utf-8", "replace") if raw is not None else ""


def shortened(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SHOWN else flat[: SHOWN - 1] + "…"


def is_translated(previous: Node | None, child: Node) -> bool:
    return (
        previous is not None
        and previous.type == "$"
        and not previous.is_named
        and previous.end_byte == child.start_byte
        and child.type == "string"
    )


def literal_word(node: Node) -> str | None:
    """The literal text of a word node, or None when it holds an expansion."""
    kind = node.type
    text = node_text(node)
    if not node.is_named:
        return None if kind == "$" else text  # `==`, `=~`: tree-sitter's test operators
    if kind == "word":
        if bash_text.BRACE_EXPANSION.search(text) or bash_text.expands(text, quoted=False):
            return None
        return bash_text.unescape_unquoted(text)
    if kind == "number":
        return text
    if kind == "variable_assignment":  # `export NAME=value`
        name, value = node.child_by_field_name("name"), node.child_by_field_name("value")
        if name is None:
            return None
        shown = "" if value is None else literal_word(value)
        return None if shown is None else f"{node_text(name)}={shown}"
    if kind == "raw_string":
        return text[1:-1]
    if kind == "string":
        return double_quoted_text(node)
    if kind == "ansi_c_string":
        return bash_text.ansi_c(text[2:-1])
    if kind == "concatenation":
        parts: list[str] = []
        unquoted = ""
        previous: Node | None = None
        for child in node.children:
            part = literal_word(child) if child.is_named else None
            if part is None or is_translated(previous, child):
                return None
            parts.append(part)
            if child.type == "word":
                unquoted += node_text(child)
            else:
                unquoted += "\x00" * len(part)  # quoted text cannot form a brace expansion
            previous = child
        if bash_text.BRACE_EXPANSION.search(unquoted):
            return None
        return "".join(parts)
    return None


def double_quoted_text(node: Node) -> str | None:
    """A double-quoted string without expansions, read from its text (tree-sitter leaves the
    blanks of a string out of its nodes)."""
    if any(child.type not in ('"', "string_content", "$") for child in node.children):
        return None
    content = node_text(node)[1:-1]
    if bash_text.expands(content, quoted=True):
        return None
    return bash_text.unescape_double_quoted(content)


def in_double_quotes(node: Node) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.type == "string":
            return True
        if parent.type in ("command_substitution", "process_substitution", "program"):
            return False
        parent = parent.parent
    return False


def is_backticks(node: Node) -> bool:
    return bool(node.children) and node.children[0].type in ("`", "$`")


def in_arithmetic(node: Node) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.type in ARITHMETIC:
            return True
        if parent.type in ("command", "program", "test_command"):
            return False
        parent = parent.parent
    return False


def is_quoted_heredoc(body: Node) -> bool:
    redirect = body.parent
    if redirect is None:
        return False
    start = next((c for c in redirect.children if c.type == "heredoc_start"), None)
    return start is not None and any(q in node_text(start) for q in "'\"\\")


def heredoc_text(node: Node) -> str | None:
    """The text a heredoc feeds, or None when it holds expansions."""
    start = next((c for c in node.children if c.type == "heredoc_start"), None)
    body = next((c for c in node.children if c.type == "heredoc_body"), None)
    if body is None:
        return ""
    text = node_text(body)
    if start is not None and any(q in node_text(start) for q in "'\"\\"):
        return text  # a quoted delimiter: the body is literal
    if any(c.type != "heredoc_content" for c in body.named_children) or any(
        ch in text for ch in "$`\\"
    ):
        return None
    return text


def group_literal(nodes: list[Node]) -> str | None:
    """The literal text of the nodes of one word, or None when any part expands."""
    if len(nodes) == 1 and nodes[0].type != "$":
        return literal_word(nodes[0]) if nodes[0].type != "command_name" else None
    parts: list[str] = []
    unquoted = ""
    previous: Node | None = None
    for node in nodes:
        if node.type == "$" or is_translated(previous, node):
            return None
        part = literal_word(node) if node.is_named else node_text(node)
        if part is None:
            return None
        parts.append(part)
        unquoted += node_text(node) if node.type == "word" else "\x00" * len(part)
        previous = node
    if bash_text.BRACE_EXPANSION.search(unquoted):
        return None
    return "".join(parts)


def quoted_in_quotes(node: Node) -> bool:
    """``"${x-'…'}"``, ``"$(… ${x-$'…'})"``: quotes in ``${…}`` under double quotes, which bash
    reads in ways tree-sitter does not follow."""
    text = node_text(node)
    if "'" in text and in_double_quotes(node):
        return True
    if "$'" not in text and '$"' not in text:
        return False
    parent = node.parent
    while parent is not None:
        if parent.type == "string":
            return True
        parent = parent.parent
    return False
