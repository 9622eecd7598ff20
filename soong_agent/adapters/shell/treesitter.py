"""`ShellAnalyzer` on tree-sitter-bash: every simple command a command line would run.

The line is parsed with the tree-sitter-bash grammar and the syntax tree is walked: each
`command` node becomes a `SimpleCommand` whatever it sits in (lists, pipelines, subshells,
`$(…)`, backticks, process substitution, `if`/`while`/`for`/`case` bodies, functions, unquoted
heredocs). Nested interpreters are opened too: `eval ARGS` and `sh -c STRING` (bash, zsh, dash …)
are analysed as lines of their own, and the command run by `xargs`, `find -exec`, `env`,
`sudo`, `timeout`, `nice`, `nohup`, `command`, `exec`, `time` … appears as a simple command of
its own next to the wrapper.

Words are literal text (quotes removed, backslash escapes resolved, glob characters kept); a word
holding an expansion (`$x`, `${…}`, `$(…)`, backticks, brace expansion `{a,b}`) is `None`.
Output redirections into files (`>`, `>>`, `&>`, `>|`, `>&file`) are `writes_to` (`?` when the
target is not literal; `/dev/null` is not a write).

The analysis is not `ok` (and says why in `problems`) for a syntax error, a command name that is
not literal, a variable assignment (`PATH=… cmd` or `PATH=…; cmd` can change what runs), a
nested interpreter whose script is not literal, or nesting deeper than `max_nesting`.

Longer than our ~400-line habit on purpose: one walk over one grammar, whose node kinds and
wrapper commands belong together.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from functools import lru_cache

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from soong_agent.ports.shell import ShellAnalysis, SimpleCommand

Words = tuple[str | None, ...]

_MAX_TREE_DEPTH = 200
_SHOWN = 60

_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "rbash"})
_SHELL_VALUE_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})


@dataclass(frozen=True, slots=True)
class _Wrapper:
    """A command that runs another command given as its arguments."""

    value_options: frozenset[str] = frozenset()  # options followed by a separate value
    positionals: int = 0  # positional arguments before the command (`timeout 5 cmd`)
    assignments: bool = False  # `env A=1 cmd`


_WRAPPERS: dict[str, _Wrapper] = {
    "env": _Wrapper(frozenset({"-u", "--unset", "-C", "--chdir"}), assignments=True),
    "nice": _Wrapper(frozenset({"-n", "--adjustment"})),
    "nohup": _Wrapper(),
    "timeout": _Wrapper(frozenset({"-s", "--signal", "-k", "--kill-after"}), positionals=1),
    "sudo": _Wrapper(
        frozenset(
            {
                *("-u", "--user", "-g", "--group", "-C", "--close-from", "-h", "--host"),
                *("-p", "--prompt", "-r", "--role", "-t", "--type", "-U", "--other-user"),
                *("-D", "--chdir", "-R", "--chroot", "-T", "--command-timeout"),
            }
        )
    ),
    "doas": _Wrapper(frozenset({"-u", "-C"})),
    "command": _Wrapper(),
    "builtin": _Wrapper(),
    "exec": _Wrapper(frozenset({"-a"})),
    "time": _Wrapper(frozenset({"-f", "--format", "-o", "--output"})),
    "xargs": _Wrapper(
        frozenset(
            {
                *("-a", "--arg-file", "-d", "--delimiter", "-E", "-I", "-L", "-n"),
                *("--max-args", "-P", "--max-procs", "-s", "--max-chars", "--process-slot-var"),
            }
        )
    ),
    "stdbuf": _Wrapper(frozenset({"-i", "-o", "-e", "--input", "--output", "--error"})),
    "ionice": _Wrapper(frozenset({"-c", "--class", "-n", "--classdata"})),
    "setsid": _Wrapper(),
    "coproc": _Wrapper(),
    "chroot": _Wrapper(frozenset({"--userspec", "--groups"}), positionals=1),
    "busybox": _Wrapper(),
}
_ENV_SPLIT = ("-S", "--split-string")
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})

_WRITE_OPS = frozenset({">", ">>", "&>", "&>>", ">|", "<>"})
_REDIRECT_OPS = _WRITE_OPS | {"<", ">&", "<&", ">&-", "<&-"}
_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_BRACE_EXPANSION = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")
_REDIRECT_TYPES = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})


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
    tree = state.parser.parse(line.encode("utf-8", "replace"))
    root = tree.root_node
    if root.has_error:
        state.problem(_syntax_problem(root))
    _walk(state, root, nesting, 0)


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


def _walk(state: _State, node: Node, nesting: int, depth: int) -> None:
    if depth > _MAX_TREE_DEPTH:
        state.problem("the command line is nested too deeply to analyse")
        return
    kind = node.type
    if kind == "command":
        _command(state, node, nesting, depth)
        return
    if kind == "redirected_statement":
        _redirected(state, node, nesting, depth)
        return
    if kind in ("declaration_command", "unset_command"):
        _declaration(state, node, nesting, depth)
        return
    if kind == "variable_assignment":
        name = node.child_by_field_name("name")
        shown = _text(name) if name is not None else _text(node)
        state.problem(f"assignment to {shown} can change what later commands run")
    for child in node.children:
        _walk(state, child, nesting, depth + 1)


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
    words: list[str | None] = []
    named = False
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
            words.append(_literal(inner[0]) if len(inner) == 1 else None)
        elif kind in _REDIRECT_TYPES:
            own.collect(child)
        elif kind == "comment" or not child.is_named:
            continue
        else:
            words.append(_literal(child))
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
        if body is not None:
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
    if words:
        state.commands.append(SimpleCommand(tuple(words)))
    for child in node.children:
        if child.type == "variable_assignment":
            for part in child.children:
                _walk(state, part, nesting, depth + 1)
        else:
            _walk(state, child, nesting, depth + 1)


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
    if base == "eval":
        if any(arg is None for arg in args):
            state.problem(f"eval of text that is not literal in {_shorten(shown)!r}")
        elif args:
            _analyze_line(state, " ".join(a for a in args if a is not None), nesting=nesting + 1)
    elif base in _SHELLS:
        _shell(state, args, nesting, shown, stdin)
    elif base == "trap":
        _trap(state, args, nesting, shown)
    elif base == "find":
        for executed in _find_exec(args):
            _nested(state, executed, nesting, shown)
    elif base == "env" and any(a is not None and a.startswith(_ENV_SPLIT) for a in args):
        state.problem(f"env -S (split string) is not analysed in {_shorten(shown)!r}")
    elif base in _WRAPPERS:
        inner = _wrapped(_WRAPPERS[base], args)
        if inner is None:
            state.problem(f"cannot tell which command {base} runs in {_shorten(shown)!r}")
        elif inner:
            _nested(state, inner, nesting, shown, () if base == "xargs" else stdin)


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
        if arg in _SHELL_VALUE_OPTIONS:
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


def _find_exec(args: Words) -> list[Words]:
    """The commands of `find … -exec CMD … ;` (also `-execdir`, `-ok`, `-okdir`, `+`)."""
    found: list[Words] = []
    i = 0
    while i < len(args):
        if args[i] in _FIND_EXEC:
            j = i + 1
            while j < len(args) and args[j] not in (";", "+"):
                j += 1
            if j > i + 1:
                found.append(args[i + 1 : j])
            i = j
        i += 1
    return found


def _wrapped(spec: _Wrapper, args: Words) -> Words | None:
    """The command a wrapper runs (empty: none), or None when that cannot be told."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg is None:
            return None
        if arg == "--":
            i += 1
            break
        if spec.assignments and _ASSIGNMENT.match(arg):
            i += 1
            continue
        if arg.startswith("-") and len(arg) > 1:
            i += 2 if arg in spec.value_options else 1
            continue
        break
    i += spec.positionals
    return args[i:] if i < len(args) else ()


# --- words -------------------------------------------------------------------------------------


def _literal(node: Node) -> str | None:
    """The literal text of a word node, or None when it holds an expansion."""
    kind = node.type
    text = _text(node)
    if kind == "word":
        if _BRACE_EXPANSION.search(text):
            return None
        return _unescape_unquoted(text)
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
        body = text[2:-1]
        return body if "\\" not in body else None
    if kind == "concatenation":
        parts: list[str] = []
        unquoted = ""
        for child in node.children:
            part = _literal(child) if child.is_named else None
            if part is None:
                return None
            parts.append(part)
            if child.type == "word":
                unquoted += _text(child)
            else:
                unquoted += "\x00" * len(part)  # quoted text cannot form a brace expansion
        if _BRACE_EXPANSION.search(unquoted):
            return None
        return "".join(parts)
    return None


def _double_quoted(node: Node) -> str | None:
    parts: list[str] = []
    for child in node.children:
        kind = child.type
        if kind == '"':
            continue
        if kind == "string_content":
            parts.append(_unescape_double_quoted(_text(child)))
        elif kind == "$" and not child.is_named:
            parts.append("$")
        else:
            return None
    return "".join(parts)


def _unescape_unquoted(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _unescape_double_quoted(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\\n':
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _text(node: Node) -> str:
    raw = node.text
    return raw.decode("utf-8", "replace") if raw is not None else ""


def _shorten(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _SHOWN else flat[: _SHOWN - 1] + "…"
