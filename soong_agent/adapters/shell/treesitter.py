r"""`ShellAnalyzer` on tree-sitter-bash: every simple command a command line would run.

The line is parsed with the tree-sitter-bash grammar and the syntax tree is walked: each
`command` node becomes a `SimpleCommand` whatever it sits in (lists, pipelines, subshells,
`$(…)`, backticks, process substitution, `if`/`while`/`for`/`case` bodies, functions, unquoted
heredocs). Nested interpreters are opened too: `eval ARGS` and `sh -c STRING` (bash, zsh, dash …)
are analysed as lines of their own, and the command run by `xargs`, `find -exec`, `env`,
`sudo`, `timeout`, `nice`, `nohup`, `command`, `exec`, `time` … appears as a simple command of
its own next to the wrapper.

Words are literal text the way bash reads it (PERM-4): quotes removed, backslash escapes
resolved, `$'…'` decoded, line continuations (backslash-newline) removed wherever bash removes
them (unquoted, inside double quotes and unquoted here-documents; kept inside single quotes,
`$'…'`, comments and quoted here-documents), glob characters and `~` kept (they are expanded
later, by bash and by the sandbox). A word holding an expansion (`$x`, `${…}`, `$(…)`,
backticks, brace expansion `{a,b}`, `$"…"` translation) is `None`. The text of a backtick
substitution is unescaped the way bash does it (``\\``, ``\```, ``\$``) and analysed as a line
of its own; inside double quotes, one holding a backslash or a quote is not modelled. Output
redirections into files (`>`, `>>`, `&>`, `>|`, `>&file`) are `writes_to` (`?` when the target
is not literal; `/dev/null` is not a write). Options of readers that run a command
(`rg --pre PROG`, `tar --to-command=CMD`, `git -c core.pager=CMD`, see
`domain.permissions.programs.embedded_commands`) appear as commands of their own too.

The analysis is not `ok` (and says why in `problems`) for a syntax error, a command name that is
not literal, a variable assignment (`PATH=… cmd`, `PATH=…; cmd`, `export PATH=…`,
`read PATH`, `printf -v PATH`, `$((PATH=0))`, `${PATH:=…}`: any can change what runs), a
builtin that changes how later lines are read or run (`shopt -s expand_aliases`/`extglob`,
`set -k`, `hash -p`, `enable -f`, `mapfile -C`), a nested interpreter whose script is not
literal, a wrapper whose options it cannot read, a line whose continuations or expansions it
cannot place the way bash does (tree-sitter and bash disagreeing), or nesting deeper than
`max_nesting`.

Bash's rules over plain text (continuations, decoding, builtins, wrappers) live in
`bash_text`. Longer than our ~400-line habit on purpose: one walk over one grammar, with the
checks of where tree-sitter and bash disagree next to the node kinds they are about.
"""

from __future__ import annotations

import itertools
import posixpath
from dataclasses import dataclass, field
from functools import lru_cache

import tree_sitter_bash
from tree_sitter import Language, Node, Parser, Tree

from soong_agent.adapters.shell import bash_text
from soong_agent.domain.permissions.programs import (
    SHELL_VALUE_OPTIONS,
    SHELLS,
    WRAPPERS,
    embedded_commands,
)
from soong_agent.ports.shell import ShellAnalysis, SimpleCommand

Words = tuple[str | None, ...]

_MAX_TREE_DEPTH = 200
_SHOWN = 60
_ENV_SPLIT = ("-S", "--split-string")

_WRITE_OPS = frozenset({">", ">>", "&>", "&>>", ">|", "<>"})
_REDIRECT_OPS = _WRITE_OPS | {"<", ">&", "<&", ">&-", "<&-"}
_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_REDIRECT_TYPES = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
# node kinds whose text bash reads literally: a backslash-newline in them stays
_LITERAL_KINDS = frozenset({"raw_string", "ansi_c_string", "comment"})
# node kinds whose text between their parts is literal text, not blanks
_TEXT_HOLDERS = frozenset(
    {
        *("string", "heredoc_body", "heredoc_redirect", "comment", "raw_string", "word"),
        *("ansi_c_string", "translated_string", "heredoc_start", "heredoc_end", "regex"),
        *("heredoc_content", "string_content", "concatenation", "test_command"),
    }
)
# node kinds that expand inside a word, a double-quoted string or a here-document
_EXPANSIONS = frozenset(
    {
        *("command_substitution", "expansion", "simple_expansion", "arithmetic_expansion"),
        *("process_substitution", "translated_string", "ansi_c_string", "raw_string"),
    }
)
# what tree-sitter may put among a command's words (a `subshell` there is a bash syntax error)
_ARGUMENTS = frozenset(
    {
        *("word", "string", "raw_string", "ansi_c_string", "concatenation", "number"),
        *("simple_expansion", "expansion", "command_substitution", "process_substitution"),
        *("arithmetic_expansion", "translated_string", "brace_expression"),
    }
)
_ARITHMETIC_ASSIGN = frozenset(
    {"=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "^=", "|=", "++", "--"}
)
_ARITHMETIC = frozenset({"arithmetic_expansion", "compound_statement"})


# after a `$`, what starts an expansion in bash (a name, a digit, a special parameter, braces …)
# a here-document delimiter the analyser reads: plain characters, escapes, '…' and "…"
@lru_cache(maxsize=1)
def _bash() -> Language:
    return Language(tree_sitter_bash.language())


@dataclass(slots=True)
class _State:
    parser: Parser
    max_nesting: int
    commands: list[SimpleCommand] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)


class TreeSitterShellAnalyzer:
    """Parses bash command lines with tree-sitter-bash; see the module docstring."""

    def __init__(self, *, max_nesting: int = 8) -> None:
        self._max_nesting = max_nesting

    def analyze(self, command: str) -> ShellAnalysis:
        """The simple commands of `command`; never raises for bad input."""
        state = _State(parser=Parser(_bash()), max_nesting=self._max_nesting)
        try:
            _analyze_line(state, command, nesting=0)
        except RecursionError:
            state.problem("the command line is nested too deeply to analyse")
        except Exception as exc:  # a parser surprise must not end the run: the line just asks
            state.problem(f"the command line could not be analysed ({type(exc).__name__})")
        return ShellAnalysis(
            tuple(state.commands), ok=not state.problems, problems=tuple(state.problems)
        )


def _analyze_line(state: _State, line: str, *, nesting: int) -> None:
    if nesting > state.max_nesting:
        state.problem(f"shells nested more than {state.max_nesting} levels deep")
        return
    if "\x00" in line:
        state.problem("the command line contains a NUL character")
    data = line.encode("utf-8", "replace")
    tree = state.parser.parse(data)
    if b"\\\n" in data:
        tree = _join_continuations(state, data, tree)
    root = tree.root_node
    if b"$$(" in (root.text or b""):  # bash: `$$` then `(`; tree-sitter: `$` then `$(…)`
        state.problem("`$$(` is read differently by bash and the analyser")
    if root.has_error:
        state.problem(_syntax_problem(root))
    _walk(state, root, nesting, 0)


# --- line continuations --------------------------------------------------------------------------


def _join_continuations(state: _State, data: bytes, tree: Tree) -> Tree:
    r"""The tree of `data` with backslash-newlines removed where bash removes them.

    Bash drops a backslash-newline before it splits words, except inside single quotes,
    `$'…'`, comments and quoted here-documents, so ``ec\<newline>ho`` is ``echo`` and
    ``"$\<newline>(cmd)"`` runs ``cmd``. The first parse says where each one sits; the text
    without the removable ones is parsed again, and both parses must agree on which
    continuations are literal, else the line is not understood.
    """
    literal = _literal_spans(tree.root_node)
    removed: list[int] = []
    kept: list[int] = []
    for at in bash_text.continuations(data):
        (kept if _inside(at, literal) else removed).append(at)
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
    spans = _literal_spans(again.root_node)
    for shift, at in enumerate(removed):
        point = at - 2 * shift
        if any(begin < point < end for begin, end in spans):
            state.problem("a line continuation the analyser cannot place the way bash does")
    for at in kept:
        moved = at - 2 * sum(1 for r in removed if r < at)
        if not _inside(moved, spans):
            state.problem("a line continuation the analyser cannot place the way bash does")
    return again


def _literal_spans(root: Node) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        kind = node.type
        if kind in _LITERAL_KINDS or (kind == "heredoc_body" and _quoted_heredoc(node)):
            spans.append((node.start_byte, node.end_byte))
            continue
        if kind == "heredoc_body" or (kind == "command_substitution" and _is_backticks(node)):
            # bash reads an unquoted here-document, and `…`, as plain text first: no quote
            # inside them keeps a continuation
            continue
        stack.extend(node.children)
    return spans


def _inside(at: int, spans: list[tuple[int, int]]) -> bool:
    return any(begin <= at < end for begin, end in spans)


def _quoted_heredoc(body: Node) -> bool:
    redirect = body.parent
    if redirect is None:
        return False
    start = next((c for c in redirect.children if c.type == "heredoc_start"), None)
    return start is not None and any(q in _text(start) for q in "'\"\\")


def _syntax_problem(root: Node) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_missing:
            return f"syntax error: missing {node.type!r}"
        if node.type == "ERROR":
            row, col = node.start_point
            return f"syntax error at line {row + 1}, column {col + 1}: {_shorten(_text(node))!r}"
        stack.extend(reversed(node.children))
    return "syntax error"


# --- the walk ------------------------------------------------------------------------------------


def _walk(state: _State, node: Node, nesting: int, depth: int) -> None:
    if depth > _MAX_TREE_DEPTH:
        state.problem("the command line is nested too deeply to analyse")
        return
    kind = node.type
    _check_gaps(state, node)
    if kind == "command":
        _command(state, node, nesting, depth)
        return
    if kind == "redirected_statement":
        _redirected(state, node, nesting, depth)
        return
    if kind in ("declaration_command", "unset_command"):
        _declaration(state, node, nesting, depth)
        return
    if kind == "command_substitution" and _is_backticks(node):
        _backticks(state, node, nesting)
        return
    if kind == "heredoc_redirect":
        _check_heredoc(state, node)
    elif kind in ("ansi_c_string", "raw_string"):
        _check_quote_end(state, node)
    elif kind == "simple_expansion" and not bash_text.PARAMETER.fullmatch(_text(node)):
        state.problem(f"{_text(node)!r} is not a parameter bash expands")
    if kind == "variable_assignment":
        name = node.child_by_field_name("name")
        shown = _text(name) if name is not None else _text(node)
        state.problem(f"assignment to {shown} can change what later commands run")
    elif kind == "expansion" and any(c.type in (":=", "=") for c in node.children):
        state.problem(f"{_shorten(_text(node))} assigns a variable")
    elif kind == "expansion" and _quoted_in_quotes(node):
        # inside "…", quotes in ${x-'…'} are literal text: tree-sitter reads them as quotes
        state.problem(f"{_shorten(_text(node))!r}: single quotes in ${{…}} inside double quotes")
    elif kind in _ARITHMETIC_ASSIGN and not node.is_named and _in_arithmetic(node):
        state.problem("an arithmetic expression assigns a variable")
    elif kind in ("word", "string", "heredoc_body", "concatenation"):
        _check_hidden(state, node)
    for child in node.children:
        _walk(state, child, nesting, depth + 1)


def _check_quote_end(state: _State, node: Node) -> None:
    """`'…'` ends at the next `'`; `$'…'` at the next `'` no backslash escapes: tree-sitter
    must end them there too (it reads ``$'\\\\'`` as unterminated)."""
    text = _text(node)
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
        state.problem(f"{_shorten(text)!r}: a quoted string the analyser cannot delimit")


def _check_heredoc(state: _State, node: Node) -> None:
    """Tree-sitter must end a here-document where bash does: at the first line that is the
    delimiter with its quotes removed (leading tabs stripped for ``<<-``)."""
    start = next((c for c in node.children if c.type == "heredoc_start"), None)
    body = next((c for c in node.children if c.type == "heredoc_body"), None)
    end = next((c for c in node.children if c.type == "heredoc_end"), None)
    if start is None:
        return
    raw = _text(start)
    if not bash_text.DELIMITER.fullmatch(raw):
        state.problem(f"the here-document delimiter {raw!r} is not modelled")
        return
    delimiter = bash_text.unescape_unquoted(raw.replace('"', "").replace("'", ""))
    if end is None or _text(end).lstrip("\t") != delimiter:
        state.problem(f"the here-document {raw!r} does not end where bash ends it")
        return
    strip = any(c.type == "<<-" for c in node.children)
    for line in (_text(body) if body is not None else "").split("\n"):
        if (line.lstrip("\t") if strip else line) == delimiter:
            state.problem(f"the here-document {raw!r} does not end where bash ends it")
            return


def _in_arithmetic(node: Node) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.type in _ARITHMETIC:
            return True
        if parent.type in ("command", "program", "test_command"):
            return False
        parent = parent.parent
    return False


def _check_hidden(state: _State, node: Node) -> None:
    """A word, string or unquoted here-document whose literal text would still expand in bash
    (an unescaped backtick or ``$(``, ``${``, ``$name`` tree-sitter left as text)."""
    if node.type == "heredoc_body" and _quoted_heredoc(node):
        return
    if node.type == "concatenation":
        return  # its parts are checked one by one
    quoted = node.type in ("string", "heredoc_body")
    text = _text(node)
    if node.type == "string":
        text = text[1:-1]
    start = node.start_byte + (1 if node.type == "string" else 0)
    cursor = 0
    for child in node.named_children:
        if child.type in _EXPANSIONS:
            segment = text[cursor : max(cursor, child.start_byte - start)]
            if bash_text.expands(segment, quoted=quoted):
                break
            cursor = child.end_byte - start
    else:
        if not bash_text.expands(text[cursor:], quoted=quoted):
            return
    state.problem(f"{_shorten(_text(node))!r} holds an expansion the analyser does not place")


def _backticks(state: _State, node: Node, nesting: int) -> None:
    r"""`` `…` ``: bash takes the text up to the next backtick that is not escaped, turns
    ``\\``, ``\``` and ``\$`` into the character escaped, and runs the result as a command
    line. Inside double quotes only backticks without backslashes or quotes are modelled (bash
    reads the others in ways tree-sitter does not follow)."""
    text = _text(node)
    # the text after "`" (or "$`": a literal `$` before it); tree-sitter may start the node at
    # blanks before it
    opening = node.children[0].end_byte - node.start_byte
    inner = text[opening:-1] if text.endswith("`") and len(text) > opening else None
    end = bash_text.backtick_end(text, opening)
    if inner is None or end != len(text) - 1:
        state.problem(f"{_shorten(text)!r}: a backtick substitution the analyser cannot delimit")
        return
    if _in_double_quotes(node):
        if any(ch in inner for ch in "\\'\""):
            state.problem(f"{_shorten(text)!r}: backslashes or quotes inside backticks in quotes")
            return
        _analyze_line(state, inner, nesting=nesting + 1)
        return
    _analyze_line(state, bash_text.unescape_backticks(inner), nesting=nesting + 1)


def _quoted_in_quotes(node: Node) -> bool:
    """``"${x-'…'}"``, ``"$(… ${x-$'…'})"``: quotes in ``${…}`` under double quotes, which bash
    reads in ways tree-sitter does not follow."""
    text = _text(node)
    if "'" in text and _in_double_quotes(node):
        return True
    if "$'" not in text and '$"' not in text:
        return False
    parent = node.parent
    while parent is not None:
        if parent.type == "string":
            return True
        parent = parent.parent
    return False


def _is_backticks(node: Node) -> bool:
    return bool(node.children) and node.children[0].type in ("`", "$`")


def _in_double_quotes(node: Node) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.type == "string":
            return True
        if parent.type in ("command_substitution", "process_substitution", "program"):
            return False
        parent = parent.parent
    return False


@dataclass(slots=True)
class _Redirects:
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
            self.stdin.append(_heredoc_text(node))
            for child in node.children:  # `cat <<EOF > out` nests the file redirection here
                if child.type in _REDIRECT_TYPES:
                    self.collect(child)
        elif kind == "herestring_redirect":
            values = [c for c in node.named_children if c.type != "file_descriptor"]
            self.stdin.append(_literal(values[0]) if len(values) == 1 else None)

    def _file(self, node: Node) -> None:
        op = next((c.type for c in node.children if c.type in _REDIRECT_OPS), None)
        targets = [c for c in node.named_children if c.type not in ("file_descriptor", "ERROR")]
        self.words.extend(_literal(c) for c in targets[1:])
        if op is None or not targets:
            return
        target = _literal(targets[0])
        if op in (">&", "<&") and target is not None and (target.isdigit() or target == "-"):
            return  # `2>&1`: a descriptor copy, not a file
        if op in ("<", "<&", "<>"):
            self.reads.append("?" if target is None else target)
        if op not in _WRITE_OPS and op != ">&":
            return
        if target is None:
            self.writes.append("?")
        elif target not in _NOT_FILES:
            self.writes.append(target)


def _command(
    state: _State, node: Node, nesting: int, depth: int, redirects: _Redirects | None = None
) -> None:
    own = redirects if redirects is not None else _Redirects()
    _check_gaps(state, node)
    groups: list[list[Node]] = []  # the words: nodes with nothing between them are one word
    named = False
    previous: Node | None = None
    for child in node.children:
        kind = child.type
        if kind == "variable_assignment":
            state.problem(
                f"the assignment {_shorten(_text(child))!r} before a command can change "
                "what it runs"
            )
        elif kind == "command_name":
            named = True
            inner = child.named_children
            groups.append(inner if len(inner) == 1 else [child])
        elif kind in _REDIRECT_TYPES:
            own.collect(child)
        elif kind == "comment":
            pass
        elif child.is_named and kind not in _ARGUMENTS:
            state.problem(f"{kind} {_shorten(_text(child))!r} where bash expects a word")
        elif (
            groups
            and previous is not None
            and previous.end_byte == child.start_byte
            and (previous.type not in _REDIRECT_TYPES and previous.type != "comment")
        ):
            groups[-1].append(child)  # `"r"\m`, `'a'\?`: tree-sitter splits what bash joins
        else:
            groups.append([child])  # a word; `$` (before "…"), or `==`, `=~` read as tokens
        previous = child
    words = [_group_literal(group) for group in groups]
    all_words = tuple(words + own.words)
    if not named and all_words:
        all_words = (None, *all_words)
    if all_words or own.writes or own.reads:
        command = SimpleCommand(all_words, tuple(own.writes), tuple(own.reads))
        _add(state, command, nesting, _text(node), stdin=tuple(own.stdin))
    for child in node.children:
        if child.type == "variable_assignment":
            for part in child.children:
                _walk(state, part, nesting, depth + 1)
        else:
            _walk(state, child, nesting, depth + 1)


def _group_literal(nodes: list[Node]) -> str | None:
    """The literal text of the nodes of one word, or None when any part expands."""
    if len(nodes) == 1 and nodes[0].type != "$":
        return _literal(nodes[0]) if nodes[0].type != "command_name" else None
    parts: list[str] = []
    unquoted = ""
    previous: Node | None = None
    for node in nodes:
        if node.type == "$" or _translated(previous, node):
            return None
        part = _literal(node) if node.is_named else _text(node)
        if part is None:
            return None
        parts.append(part)
        unquoted += _text(node) if node.type == "word" else "\x00" * len(part)
        previous = node
    if bash_text.BRACE_EXPANSION.search(unquoted):
        return None
    return "".join(parts)


def _check_gaps(state: _State, node: Node) -> None:
    """Between the parts of a command (or list, pipeline …) there must be only blanks: text
    tree-sitter skipped (an escaped tab, a carriage return) is text bash reads."""
    if node.type in _TEXT_HOLDERS:
        return
    children = node.children
    for before, after in itertools.pairwise(children):
        gap = _gap(node, before.end_byte, after.start_byte)
        if gap.strip(" \t\n"):
            state.problem(f"{_shorten(_text(node))!r} holds text the analyser does not read")
            return


def _gap(node: Node, start: int, end: int) -> str:
    text = node.text or b""
    return text[start - node.start_byte : end - node.start_byte].decode("utf-8", "replace")


def _translated(previous: Node | None, child: Node) -> bool:
    return (
        previous is not None
        and previous.type == "$"
        and not previous.is_named
        and previous.end_byte == child.start_byte
        and child.type == "string"
    )


def _walk_to_last_part(state: _State, node: Node, nesting: int, depth: int) -> int:
    """Walk a list or pipeline like `_walk`; return where, in `state.commands`, the commands
    of its last part begin (a list's last part may itself be a list or a pipeline)."""
    if depth > _MAX_TREE_DEPTH:
        state.problem("the command line is nested too deeply to analyse")
        return len(state.commands)
    _check_gaps(state, node)
    children = node.children
    named = [i for i, child in enumerate(children) if child.is_named and child.type != "comment"]
    last = named[-1] if named else -1
    start = len(state.commands)
    for i, child in enumerate(children):
        if i == last and child.type in ("list", "pipeline"):
            start = _walk_to_last_part(state, child, nesting, depth + 1)
            continue
        if i == last:
            start = len(state.commands)
        _walk(state, child, nesting, depth + 1)
    return start


def _redirected(state: _State, node: Node, nesting: int, depth: int) -> None:
    body = node.child_by_field_name("body")
    redirects = _Redirects()
    for child in node.children:
        if child.type in _REDIRECT_TYPES:
            redirects.collect(child)
    if body is not None and body.type == "command":
        _command(state, body, nesting, depth + 1, redirects)
    else:
        before = len(state.commands)
        if body is not None and body.type in ("list", "pipeline"):
            # tree-sitter puts the redirection of `a && b > f` or `a | b > f` after the whole
            # list; bash binds it to the last part alone (`b`)
            before = _walk_to_last_part(state, body, nesting, depth + 1)
        elif body is not None:
            _walk(state, body, nesting, depth + 1)
        if redirects.words:
            state.problem(f"words after the redirection of {_shorten(_text(node))!r}")
        added = state.commands[before:]
        writes, reads = tuple(redirects.writes), tuple(redirects.reads)
        if (writes or reads) and added:
            state.commands[before:] = [
                SimpleCommand(c.words, (*c.writes_to, *writes), (*c.reads_from, *reads))
                for c in added
            ]
        elif writes or reads or redirects.words:
            state.commands.append(SimpleCommand(tuple(redirects.words), writes, reads))
        for script in redirects.stdin:
            # a heredoc fed to a list or pipeline reaches some command of it, maybe a shell:
            # read it as a script too (checking more commands than run is the safe side)
            if script is None:
                state.problem(f"a here-document with expansions feeds {_shorten(_text(node))!r}")
            elif nesting + 1 > state.max_nesting:
                state.problem(f"commands nested more than {state.max_nesting} levels deep")
            else:
                _analyze_line(state, script, nesting=nesting + 1)
    for child in node.children:
        if child.type in _REDIRECT_TYPES:
            _walk(state, child, nesting, depth + 1)


def _heredoc_text(node: Node) -> str | None:
    """The text a heredoc feeds, or None when it holds expansions."""
    start = next((c for c in node.children if c.type == "heredoc_start"), None)
    body = next((c for c in node.children if c.type == "heredoc_body"), None)
    if body is None:
        return ""
    text = _text(body)
    if start is not None and any(q in _text(start) for q in "'\"\\"):
        return text  # a quoted delimiter: the body is literal
    if any(c.type != "heredoc_content" for c in body.named_children) or any(
        ch in text for ch in "$`\\"
    ):
        return None
    return text


def _declaration(state: _State, node: Node, nesting: int, depth: int) -> None:
    words: list[str | None] = []
    for child in node.children:
        if not child.is_named and child.type.isalpha():
            words.append(child.type)  # the keyword: export, declare, local, readonly, unset …
        elif child.is_named and child.type != "comment":
            words.append(_literal(child))
        if child.type == "variable_assignment":
            name = child.child_by_field_name("name")
            shown = _text(name) if name is not None else _text(child)
            state.problem(f"{words[0]} {shown}=… can change what later commands run")
    if words:
        state.commands.append(SimpleCommand(tuple(words)))
    for child in node.children:
        if child.type == "variable_assignment":
            for part in child.children:
                _walk(state, part, nesting, depth + 1)
        else:
            _walk(state, child, nesting, depth + 1)


# --- what a command runs in turn -----------------------------------------------------------------


def _add(
    state: _State,
    command: SimpleCommand,
    nesting: int,
    shown: str,
    *,
    stdin: tuple[str | None, ...] = (),
) -> None:
    """Record a simple command and open what it runs in turn (eval, sh -c, wrappers, find).

    `stdin` holds the heredoc / herestring texts fed to the command (a shell runs them).
    """
    state.commands.append(command)
    words = command.words
    if not words:
        return
    name = words[0]
    if name is None:
        state.problem(f"the command name is not literal in {_shorten(shown)!r}")
        return
    base = posixpath.basename(name)
    args = words[1:]
    problem = bash_text.builtin_problem(base, args)
    if problem is not None:
        state.problem(f"{problem} in {_shorten(shown)!r}")
    if base == "eval":
        if any(arg is None for arg in args):
            state.problem(f"eval of text that is not literal in {_shorten(shown)!r}")
        elif args:
            _analyze_line(state, " ".join(a for a in args if a is not None), nesting=nesting + 1)
    elif base in SHELLS:
        _shell(state, args, nesting, shown, stdin)
    elif base == "trap":
        _trap(state, args, nesting, shown)
    elif base == "find":
        for executed in bash_text.find_exec(args):
            _nested(state, executed, nesting, shown)
    elif base == "env" and any(a is not None and a.startswith(_ENV_SPLIT) for a in args):
        state.problem(f"env -S (split string) is not analysed in {_shorten(shown)!r}")
    elif base in WRAPPERS:
        inner = bash_text.wrapped(WRAPPERS[base], args, nice=base == "nice")
        if inner is None:
            state.problem(f"cannot tell which command {base} runs in {_shorten(shown)!r}")
        elif inner:
            _nested(state, inner, nesting, shown, () if base == "xargs" else stdin)
    for how, text in embedded_commands(words):
        if text is None:
            state.problem(f"a command named by an option is not literal in {_shorten(shown)!r}")
        elif how == "argv":
            _nested(state, (text, None), nesting, shown)
        elif nesting + 1 > state.max_nesting:
            state.problem(f"commands nested more than {state.max_nesting} levels deep")
        else:
            _analyze_line(state, text, nesting=nesting + 1)


def _nested(
    state: _State, words: Words, nesting: int, shown: str, stdin: tuple[str | None, ...] = ()
) -> None:
    if nesting + 1 > state.max_nesting:
        state.problem(f"commands nested more than {state.max_nesting} levels deep")
        return
    _add(state, SimpleCommand(words), nesting + 1, shown, stdin=stdin)


def _shell(
    state: _State, args: Words, nesting: int, shown: str, stdin: tuple[str | None, ...]
) -> None:
    """`sh -c SCRIPT …` runs SCRIPT; `sh`, `sh -s …` run the heredoc/herestring they are fed."""
    saw_c = saw_s = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg is None:
            if not saw_c:
                state.problem(f"cannot tell what the shell runs in {_shorten(shown)!r}")
                return
            break
        if arg == "--":
            i += 1
            break
        if arg in SHELL_VALUE_OPTIONS:
            i += 2
            continue
        if arg.startswith("--"):
            i += 1
            continue
        if len(arg) > 1 and arg[0] in "-+":
            saw_c = saw_c or (arg[0] == "-" and "c" in arg[1:])
            saw_s = saw_s or (arg[0] == "-" and "s" in arg[1:])
            i += 1
            continue
        break
    if saw_c:
        if i >= len(args):
            return
        script = args[i]
        if script is None:
            state.problem(f"the script of a shell -c is not literal in {_shorten(shown)!r}")
        else:
            _analyze_line(state, script, nesting=nesting + 1)
        return
    if i < len(args) and not saw_s:
        return  # `bash script.sh`: runs a file
    for text in stdin:
        if text is None:
            state.problem(f"the script fed to a shell is not literal in {_shorten(shown)!r}")
        else:
            _analyze_line(state, text, nesting=nesting + 1)


def _trap(state: _State, args: Words, nesting: int, shown: str) -> None:
    """`trap ACTION SIGNAL…`: ACTION is a command line run later."""
    if len(args) < 2:
        return
    action = args[0]
    if action is None:
        state.problem(f"the trap action is not literal in {_shorten(shown)!r}")
    elif not action.startswith("-") and action:
        _analyze_line(state, action, nesting=nesting + 1)


# --- words ---------------------------------------------------------------------------------------


def _literal(node: Node) -> str | None:
    """The literal text of a word node, or None when it holds an expansion."""
    kind = node.type
    text = _text(node)
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
        shown = "" if value is None else _literal(value)
        return None if shown is None else f"{_text(name)}={shown}"
    if kind == "raw_string":
        return text[1:-1]
    if kind == "string":
        return _double_quoted(node)
    if kind == "ansi_c_string":
        return bash_text.ansi_c(text[2:-1])
    if kind == "concatenation":
        parts: list[str] = []
        unquoted = ""
        previous: Node | None = None
        for child in node.children:
            part = _literal(child) if child.is_named else None
            if part is None or _translated(previous, child):
                return None
            parts.append(part)
            if child.type == "word":
                unquoted += _text(child)
            else:
                unquoted += "\x00" * len(part)  # quoted text cannot form a brace expansion
            previous = child
        if bash_text.BRACE_EXPANSION.search(unquoted):
            return None
        return "".join(parts)
    return None


def _double_quoted(node: Node) -> str | None:
    """A double-quoted string without expansions, read from its text (tree-sitter leaves the
    blanks of a string out of its nodes)."""
    if any(child.type not in ('"', "string_content", "$") for child in node.children):
        return None
    content = _text(node)[1:-1]
    if bash_text.expands(content, quoted=True):
        return None
    return bash_text.unescape_double_quoted(content)


def _text(node: Node) -> str:
    raw = node.text
    return raw.decode("utf-8", "replace") if raw is not None else ""


def _shorten(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _SHOWN else flat[: _SHOWN - 1] + "…"
