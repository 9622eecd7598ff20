"""Line continuations (backslash-newline) removed where bash removes them, before the walk."""

from __future__ import annotations

from tree_sitter import Node, Tree

from soong_agent.adapters.shell import bash_text
from soong_agent.adapters.shell.ts_nodes import (
    LITERAL_KINDS,
    WalkState,
)
from soong_agent.adapters.shell.ts_words import (
    is_backticks,
    is_quoted_heredoc,
)


def join_continuations(state: WalkState, data: bytes, tree: Tree) -> Tree:
    r"""The tree of `data` with backslash-newlines removed where bash removes them.

    Bash drops a backslash-newline before it splits words, except inside single quotes,
    `$'…'`, comments and quoted here-documents, so ``ec\<newline>ho`` is ``echo`` and
    ``"$\<newline>(cmd)"`` runs ``cmd``. The first parse says where each one sits; the text
    without the removable ones is parsed again, and both parses must agree on which
    continuations are literal, else the line is not understood.
    """
    literal = literal_spans(tree.root_node)
    removed: list[int] = []
    kept: list[int] = []
    for at in bash_text.continuations(data):
        (kept if inside_spans(at, literal) else removed).append(at)
    if not removed:
        return tree
    parts: list[bytes] = []
    start = 0
    for at in removed:
        parts.append(data[start:at])
        start = at + 2
    parts.append(data[start:])
    joined = b"".join(parts)
    again = state.parser.parse(joined)
    spans = literal_spans(again.root_node)
    for shift, at in enumerate(removed):
        point = at - 2 * shift
        if any(begin < point < end for begin, end in spans):
            state.problem("a line continuation the analyser cannot place the way bash does")
    for at in kept:
        moved = at - 2 * sum(1 for r in removed if r < at)
        if not inside_spans(moved, spans):
            state.problem("a line continuation the analyser cannot place the way bash does")
    return again


def literal_spans(root: Node) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        kind = node.type
        if kind in LITERAL_KINDS or (kind == "heredoc_body" and is_quoted_heredoc(node)):
            spans.append((node.start_byte, node.end_byte))
            continue
        if kind == "heredoc_body" or (kind == "command_substitution" and is_backticks(node)):
            # bash reads an unquoted here-document, and `…`, as plain text first: no quote
            # inside them keeps a continuation
            continue
        stack.extend(node.children)
    return spans


def inside_spans(at: int, spans: list[tuple[int, int]]) -> bool:
    return any(begin <= at < end for begin, end in spans)
