"""Where tree-sitter and bash may disagree (PERM-4): the checks of the shell analyser's walk
(quotes, here-documents, hidden expansions, gaps between parts, syntax errors) and the reading
of redirections."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from tree_sitter import Node

from soong_agent.adapters.shell import bash_text
from soong_agent.adapters.shell.ts_nodes import (
    EXPANSIONS,
    NOT_FILES,
    REDIRECT_OPS,
    REDIRECT_TYPES,
    TEXT_HOLDERS,
    WRITE_OPS,
    WalkState,
)
from soong_agent.adapters.shell.ts_words import (
    heredoc_text,
    is_quoted_heredoc,
    literal_word,
    node_text,
    shortened,
)


def syntax_problem(root: Node) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_missing:
            return f"syntax error: missing {node.type!r}"
        if node.type == "ERROR":
            row, col = node.start_point
            return (
                f"syntax error at line {row + 1}, column {col + 1}: {shortened(node_text(node))!r}"
            )
        stack.extend(reversed(node.children))
    return "syntax error"


def check_quote_end(state: WalkState, node: Node) -> None:
    """`'…'` ends at the next `'`; `$'…'` at the next `'` no backslash escapes: tree-sitter
    must end them there too (it reads ``$'\\\\'`` as unterminated)."""
    text = node_text(node)
    ansi = node.type == "ansi_c_string"
    i = 2 if ansi else 1
    while i < len(text):
        if ansi and text[i] == "\\":
            i += 2
            continue
        if text[i] == "'":
            break
        i += 1
    if i != len(text) - 1:
        state.problem(f"{shortened(text)!r}: a quoted string the analyser cannot delimit")


def check_heredoc(state: WalkState, node: Node) -> None:
    """Tree-sitter must end a here-document where bash does: at the first line that is the
    delimiter with its quotes removed (leading tabs stripped for ``<<-``)."""
    start = next((c for c in node.children if c.type == "heredoc_start"), None)
    body = next((c for c in node.children if c.type == "heredoc_body"), None)
    end = next((c for c in node.children if c.type == "heredoc_end"), None)
    if start is None:
        return
    raw = node_text(start)
    if not bash_text.DELIMITER.fullmatch(raw):
        state.problem(f"the here-document delimiter {raw!r} is not modelled")
        return
    delimiter = bash_text.unescape_unquoted(raw.replace('"', "").replace("'", ""))
    if end is None or node_text(end).lstrip("\t") != delimiter:
        state.problem(f"the here-document {raw!r} does not end where bash ends it")
        return
    strip = any(c.type == "<<-" for c in node.children)
    for line in (node_text(body) if body is not None else "").split("\n"):
        if (line.lstrip("\t") if strip else line) == delimiter:
            state.problem(f"the here-document {raw!r} does not end where bash ends it")
            return


def check_hidden(state: WalkState, node: Node) -> None:
    """A word, string or unquoted here-document whose literal text would still expand in bash
    (an unescaped backtick or ``$(``, ``${``, ``$name`` tree-sitter left as text)."""
    if node.type == "heredoc_body" and is_quoted_heredoc(node):
        return
    if node.type == "concatenation":
        return  # its parts are checked one by one
    quoted = node.type in ("string", "heredoc_body")
    text = node_text(node)
    if node.type == "string":
        text = text[1:-1]
    start = node.start_byte + (1 if node.type == "string" else 0)
    cursor = 0
    for child in node.named_children:
        if child.type in EXPANSIONS:
            segment = text[cursor : max(cursor, child.start_byte - start)]
            if bash_text.expands(segment, quoted=quoted):
                break
            cursor = child.end_byte - start
    else:
        if not bash_text.expands(text[cursor:], quoted=quoted):
            return
    state.problem(f"{shortened(node_text(node))!r} holds an expansion the analyser does not place")


def check_gaps(state: WalkState, node: Node) -> None:
    """Between the parts of a command (or list, pipeline …) there must be only blanks: text
    tree-sitter skipped (an escaped tab, a carriage return) is text bash reads."""
    if node.type in TEXT_HOLDERS:
        return
    children = node.children
    for before, after in itertools.pairwise(children):
        gap = gap_text(node, before.end_byte, after.start_byte)
        if gap.strip(" \t\n"):
            state.problem(f"{shortened(node_text(node))!r} holds text the analyser does not read")
            return


def gap_text(node: Node, start: int, end: int) -> str:
    text = node.text or b""
    return text[start - node.start_byte : end - node.start_byte].decode("utf-8", "replace")


@dataclass(slots=True)
class Redirects:
    """What the redirections of one command do."""

    writes: list[str] = field(default_factory=list)  # files written
    reads: list[str] = field(default_factory=list)  # files read through `<`, `<&`, `<>`
    words: list[str | None] = field(default_factory=list)  # words after a target: arguments
    stdin: list[str | None] = field(default_factory=list)  # heredoc / herestring texts

    def collect(self, node: Node) -> None:
        kind = node.type
        if kind == "file_redirect":
            self._file(node)
        elif kind == "heredoc_redirect":
            self.stdin.append(heredoc_text(node))
            for child in node.children:  # `cat <<EOF > out` nests the file redirection here
                if child.type in REDIRECT_TYPES:
                    self.collect(child)
        elif kind == "herestring_redirect":
            values = [c for c in node.named_children if c.type != "file_descriptor"]
            self.stdin.append(literal_word(values[0]) if len(values) == 1 else None)

    def _file(self, node: Node) -> None:
        op = next((c.type for c in node.children if c.type in REDIRECT_OPS), None)
        targets = [c for c in node.named_children if c.type not in ("file_descriptor", "ERROR")]
        self.words.extend(literal_word(c) for c in targets[1:])
        if op is None or not targets:
            return
        target = literal_word(targets[0])
        if op in (">&", "<&") and target is not None and (target.isdigit() or target == "-"):
            return  # `2>&1`: a descriptor copy, not a file
        if op in ("<", "<&", "<>"):
            self.reads.append("?" if target is None else target)
        if op not in WRITE_OPS and op != ">&":
            return
        if target is None:
            self.writes.append("?")
        elif target not in NOT_FILES:
            self.writes.append(target)
