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
`bash_text`; the node kinds and the walk's state in `ts_nodes`, words in `ts_words`, the checks
of where tree-sitter and bash disagree in `ts_checks`, continuations in `ts_lines`.
"""

from __future__ import annotations

from tree_sitter import Node, Parser

from soong_agent.adapters.shell import bash_text
from soong_agent.adapters.shell.ts_checks import (
    Redirects,
    check_gaps,
    check_heredoc,
    check_hidden,
    check_quote_end,
    syntax_problem,
)
from soong_agent.adapters.shell.ts_lines import join_continuations
from soong_agent.adapters.shell.ts_nodes import (
    ARGUMENTS,
    ARITHMETIC_ASSIGN,
    MAX_TREE_DEPTH,
    REDIRECT_TYPES,
    WalkState,
    bash_language,
)
from soong_agent.adapters.shell.ts_runs import add_command
from soong_agent.adapters.shell.ts_words import (
    group_literal,
    in_arithmetic,
    in_double_quotes,
    is_backticks,
    literal_word,
    node_text,
    quoted_in_quotes,
    shortened,
)
from soong_agent.ports.shell import ShellAnalysis, SimpleCommand


class TreeSitterShellAnalyzer:
    """Parses bash command lines with tree-sitter-bash; see the module docstring."""

    def __init__(self, *, max_nesting: int = 8) -> None:
        self._max_nesting = max_nesting

    def analyze(self, command: str) -> ShellAnalysis:
        """The simple commands of `command`; never raises for bad input."""
        state = WalkState(
            parser=Parser(bash_language()),
            max_nesting=self._max_nesting,
            analyze_line=_nested_line,
        )
        try:
            _analyze_line(state, command, nesting=0)
        except RecursionError:
            state.problem("the command line is nested too deeply to analyse")
        except Exception as exc:  # a parser surprise must not end the run: the line just asks
            state.problem(f"the command line could not be analysed ({type(exc).__name__})")
        return ShellAnalysis(
            tuple(state.commands), ok=not state.problems, problems=tuple(state.problems)
        )


def _nested_line(state: WalkState, line: str, nesting: int) -> None:
    _analyze_line(state, line, nesting=nesting)


def _analyze_line(state: WalkState, line: str, *, nesting: int) -> None:
    if nesting > state.max_nesting:
        state.problem(f"shells nested more than {state.max_nesting} levels deep")
        return
    if "\x00" in line:
        state.problem("the command line contains a NUL character")
    data = line.encode("utf-8", "replace")
    tree = state.parser.parse(data)
    if b"\\\n" in data:
        tree = join_continuations(state, data, tree)
    root = tree.root_node
    if b"$$(" in (root.text or b""):  # bash: `$$` then `(`; tree-sitter: `$` then `$(…)`
        state.problem("`$$(` is read differently by bash and the analyser")
    if root.has_error:
        state.problem(syntax_problem(root))
    _walk(state, root, nesting, 0)


# --- the walk ------------------------------------------------------------------------------------


def _walk(state: WalkState, node: Node, nesting: int, depth: int) -> None:
    if depth > MAX_TREE_DEPTH:
        state.problem("the command line is nested too deeply to analyse")
        return
    kind = node.type
    check_gaps(state, node)
    if kind == "command":
        _command(state, node, nesting, depth)
        return
    if kind == "redirected_statement":
        _redirected(state, node, nesting, depth)
        return
    if kind in ("declaration_command", "unset_command"):
        _declaration(state, node, nesting, depth)
        return
    if kind == "command_substitution" and is_backticks(node):
        _backticks(state, node, nesting)
        return
    if kind == "heredoc_redirect":
        check_heredoc(state, node)
    elif kind in ("ansi_c_string", "raw_string"):
        check_quote_end(state, node)
    elif kind == "simple_expansion" and not bash_text.PARAMETER.fullmatch(node_text(node)):
        state.problem(f"{node_text(node)!r} is not a parameter bash expands")
    if kind == "variable_assignment":
        name = node.child_by_field_name("name")
        shown = node_text(name) if name is not None else node_text(node)
        state.problem(f"assignment to {shown} can change what later commands run")
    elif kind == "expansion" and any(c.type in (":=", "=") for c in node.children):
        state.problem(f"{shortened(node_text(node))} assigns a variable")
    elif kind == "expansion" and quoted_in_quotes(node):
        # inside "…", quotes in ${x-'…'} are literal text: tree-sitter reads them as quotes
        state.problem(
            f"{shortened(node_text(node))!r}: single quotes in ${{…}} inside double quotes"
        )
    elif kind in ARITHMETIC_ASSIGN and not node.is_named and in_arithmetic(node):
        state.problem("an arithmetic expression assigns a variable")
    elif kind in ("word", "string", "heredoc_body", "concatenation"):
        check_hidden(state, node)
    for child in node.children:
        _walk(state, child, nesting, depth + 1)


def _backticks(state: WalkState, node: Node, nesting: int) -> None:
    r"""`` `…` ``: bash takes the text up to the next backtick that is not escaped, turns
    ``\\``, ``\``` and ``\$`` into the character escaped, and runs the result as a command
    line. Inside double quotes only backticks without backslashes or quotes are modelled (bash
    reads the others in ways tree-sitter does not follow)."""
    text = node_text(node)
    # the text after "`" (or "$`": a literal `$` before it); tree-sitter may start the node at
    # blanks before it
    opening = node.children[0].end_byte - node.start_byte
    inner = text[opening:-1] if text.endswith("`") and len(text) > opening else None
    end = bash_text.backtick_end(text, opening)
    if inner is None or end != len(text) - 1:
        state.problem(f"{shortened(text)!r}: a backtick substitution the analyser cannot delimit")
        return
    if in_double_quotes(node):
        if any(ch in inner for ch in "\\'\""):
            state.problem(f"{shortened(text)!r}: backslashes or quotes inside backticks in quotes")
            return
        _analyze_line(state, inner, nesting=nesting + 1)
        return
    _analyze_line(state, bash_text.unescape_backticks(inner), nesting=nesting + 1)


def _command(
    state: WalkState, node: Node, nesting: int, depth: int, redirects: Redirects | None = None
) -> None:
    own = redirects if redirects is not None else Redirects()
    check_gaps(state, node)
    groups: list[list[Node]] = []  # the words: nodes with nothing between them are one word
    named = False
    previous: Node | None = None
    for child in node.children:
        kind = child.type
        if kind == "variable_assignment":
            state.problem(
                f"the assignment {shortened(node_text(child))!r} before a command can change "
                "what it runs"
            )
        elif kind == "command_name":
            named = True
            inner = child.named_children
            groups.append(inner if len(inner) == 1 else [child])
        elif kind in REDIRECT_TYPES:
            own.collect(child)
        elif kind == "comment":
            pass
        elif child.is_named and kind not in ARGUMENTS:
            state.problem(f"{kind} {shortened(node_text(child))!r} where bash expects a word")
        elif (
            groups
            and previous is not None
            and previous.end_byte == child.start_byte
            and (previous.type not in REDIRECT_TYPES and previous.type != "comment")
        ):
            groups[-1].append(child)  # `"r"\m`, `'a'\?`: tree-sitter splits what bash joins
        else:
            groups.append([child])  # a word; `$` (before "…"), or `==`, `=~` read as tokens
        previous = child
    words = [group_literal(group) for group in groups]
    all_words = tuple(words + own.words)
    if not named and all_words:
        all_words = (None, *all_words)
    if all_words or own.writes or own.reads:
        command = SimpleCommand(all_words, tuple(own.writes), tuple(own.reads))
        add_command(state, command, nesting, node_text(node), stdin=tuple(own.stdin))
    for child in node.children:
        if child.type == "variable_assignment":
            for part in child.children:
                _walk(state, part, nesting, depth + 1)
        else:
            _walk(state, child, nesting, depth + 1)


def _walk_to_last_part(state: WalkState, node: Node, nesting: int, depth: int) -> int:
    """Walk a list or pipeline like `_walk`; return where, in `state.commands`, the commands
    of its last part begin (a list's last part may itself be a list or a pipeline)."""
    if depth > MAX_TREE_DEPTH:
        state.problem("the command line is nested too deeply to analyse")
        return len(state.commands)
    check_gaps(state, node)
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


def _redirected(state: WalkState, node: Node, nesting: int, depth: int) -> None:
    body = node.child_by_field_name("body")
    redirects = Redirects()
    for child in node.children:
        if child.type in REDIRECT_TYPES:
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
            state.problem(f"words after the redirection of {shortened(node_text(node))!r}")
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
                state.problem(
                    f"a here-document with expansions feeds {shortened(node_text(node))!r}"
                )
            elif nesting + 1 > state.max_nesting:
                state.problem(f"commands nested more than {state.max_nesting} levels deep")
            else:
                _analyze_line(state, script, nesting=nesting + 1)
    for child in node.children:
        if child.type in REDIRECT_TYPES:
            _walk(state, child, nesting, depth + 1)


def _declaration(state: WalkState, node: Node, nesting: int, depth: int) -> None:
    words: list[str | None] = []
    for child in node.children:
        if not child.is_named and child.type.isalpha():
            words.append(child.type)  # the keyword: export, declare, local, readonly, unset …
        elif child.is_named and child.type != "comment":
            words.append(literal_word(child))
        if child.type == "variable_assignment":
            name = child.child_by_field_name("name")
            shown = node_text(name) if name is not None else node_text(child)
            state.problem(f"{words[0]} {shown}=… can change what later commands run")
    if words:
        state.commands.append(SimpleCommand(tuple(words)))
    for child in node.children:
        if child.type == "variable_assignment":
            for part in child.children:
                _walk(state, part, nesting, depth + 1)
        else:
            _walk(state, child, nesting, depth + 1)
