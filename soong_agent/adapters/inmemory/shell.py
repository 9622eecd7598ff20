"""A small shell analyser for tests: lists, pipes, quotes and redirections; nothing more.

It reads the plain part of bash (words, quotes, backslashes, comments, `;` `&` `&&` `||` `|`
and newlines, file redirections) the way bash does, and says the line is not `ok` whenever it
meets anything else rather than guess: command substitution, subshells and groups, here
documents, compound commands (`if`, `for` …), functions, assignments, builtins that change how
later commands run, and commands that run other command lines (`sh -c`, `eval`, `xargs`,
`find -exec`, `sudo`, `env` …), whose inner commands it does not open. A line that is `ok` lists
every command it runs; the shared contract suite holds it to that, next to tree-sitter's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from soong_agent.ports.shell import ShellAnalysis, SimpleCommand

_OPERATORS = sorted(
    (
        *("&&", "||", ";;", "|&", "&>>", "&>", ">>", ">|", ">&", "<&", "<<<", "<<-", "<<"),
        *("<>", "<(", ">(", ">", "<", "|", "&", ";", "(", ")"),
    ),
    key=len,
    reverse=True,
)
_OPERATOR_START = frozenset("&|;<>()")
_SEPARATORS = frozenset({";", "&", "&&", "||", "|", "|&", "\n"})
_JOINS = frozenset({"&&", "||", "|", "|&"})
_WRITES = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
_REDIRECTS = _WRITES | {"<", ">&", "<&", "<<<"}
_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_PARAMETER = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|[0-9?#@*!$-])")
_BRACE_EXPANSION = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")
_RESERVED = frozenset(
    {
        *("if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case"),
        *("esac", "function", "select", "in", "{", "}", "[[", "]]", "!", "time", "coproc"),
    }
)
_RUNS_OTHERS = frozenset(
    {
        *("eval", "exec", "source", ".", "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash"),
        *("fish", "rbash", "csh", "tcsh", "xargs", "env", "sudo", "doas", "su", "timeout"),
        *("nice", "nohup", "command", "builtin", "stdbuf", "ionice", "setsid", "chroot"),
        *("busybox", "watch", "parallel", "ssh", "script", "trap", "flock", "strace"),
    }
)
_CHANGES_LATER = frozenset(
    {
        *("export", "declare", "typeset", "local", "readonly", "alias", "unalias", "unset"),
        *("set", "shopt", "enable", "hash"),
    }
)
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


@dataclass(slots=True)
class _Word:
    text: str = ""
    literal: bool = True
    quoted: bool = False
    raw: str = ""  # the unquoted source characters, for brace-expansion detection


@dataclass(slots=True)
class _Lexer:
    line: str
    tokens: list[_Word | str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    word: _Word | None = None

    def problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)

    def _current(self) -> _Word:
        if self.word is None:
            self.word = _Word()
        return self.word

    def _end_word(self) -> None:
        if self.word is not None:
            if self.word.literal and _BRACE_EXPANSION.search(self.word.raw):
                self.word.literal = False
            self.tokens.append(self.word)
            self.word = None

    def run(self) -> None:
        line, i = self.line, 0
        while i < len(line):
            c = line[i]
            if c in " \t\r":
                self._end_word()
                i += 1
            elif c == "\n":
                self._end_word()
                self.tokens.append("\n")
                i += 1
            elif c == "#" and self.word is None:
                end = line.find("\n", i)
                i = len(line) if end == -1 else end
            elif c == "\\":
                if i + 1 >= len(line):
                    self.problem("syntax error: the line ends with a backslash")
                    i += 1
                elif line[i + 1] == "\n":
                    i += 2  # a line continuation
                else:
                    word = self._current()
                    word.text += line[i + 1]
                    word.quoted = True
                    i += 2
            elif c == "'":
                end = line.find("'", i + 1)
                if end == -1:
                    self.problem("syntax error: a single quote is not closed")
                    end = len(line)
                word = self._current()
                word.text += line[i + 1 : end]
                word.quoted = True
                i = end + 1
            elif c == '"':
                i = self._double_quoted(i + 1)
            elif c in "$`":
                i = self._expansion(i)
            elif c in _OPERATOR_START:
                i = self._operator(i)
            else:
                word = self._current()
                word.text += c
                word.raw += c
                i += 1
        self._end_word()

    def _double_quoted(self, i: int) -> int:
        word = self._current()
        word.quoted = True
        line = self.line
        while i < len(line) and line[i] != '"':
            c = line[i]
            if c == "\\" and i + 1 < len(line) and line[i + 1] in '$`"\\\n':
                if line[i + 1] != "\n":
                    word.text += line[i + 1]
                i += 2
                continue
            if c in "$`":
                i = self._expansion(i)
                continue
            word.text += c
            i += 1
        if i >= len(line):
            self.problem("syntax error: a double quote is not closed")
        return i + 1

    def _expansion(self, i: int) -> int:
        """Skip a `$…` or backtick expansion starting at `i`; the word it is in is not literal."""
        word = self._current()
        word.literal = False
        line = self.line
        if line[i] == "`" or line.startswith("$(", i):
            self.problem("command substitution is not analysed by this analyser")
        if line[i] == "`":
            end = line.find("`", i + 1)
            return len(line) if end == -1 else end + 1
        pairs = {"(": ")", "{": "}"}
        close = pairs.get(line[i + 1 : i + 2])
        if close is None:  # `$name`, `$1`, `$?` …
            match = _PARAMETER.match(line, i)
            return match.end() if match else i + 1
        depth, j = 0, i + 1
        while j < len(line):
            if line[j] == line[i + 1]:
                depth += 1
            elif line[j] == close:
                depth -= 1
                if depth == 0:
                    inner = line[i + 2 : j]
                    if "$(" in inner or "`" in inner:
                        self.problem("command substitution is not analysed by this analyser")
                    return j + 1
            j += 1
        self.problem(f"syntax error: {line[i : i + 2]!r} is not closed")
        return len(line)

    def _operator(self, i: int) -> int:
        op = next(o for o in _OPERATORS if self.line.startswith(o, i))
        word = self.word
        if (
            op[0] in "<>"
            and word is not None
            and word.text.isdigit()
            and not word.quoted
            and word.literal
        ):
            self.word = None  # `2>file`: the digits name a file descriptor, not a word
        self._end_word()
        self.tokens.append(op)
        return i + len(op)


class SimpleShellAnalyzer:
    """A `ShellAnalyzer` that understands plain command lines only; see the module docstring."""

    def analyze(self, command: str) -> ShellAnalysis:
        """The simple commands of `command`; never raises for bad input."""
        lexer = _Lexer(command)
        if "\x00" in command:
            lexer.problem("the command line contains a NUL character")
        lexer.run()
        commands = _commands(lexer)
        problems = tuple(lexer.problems)
        return ShellAnalysis(tuple(commands), ok=not problems, problems=problems)


@dataclass(slots=True)
class _Command:
    words: list[str | None] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    touched: bool = False  # anything but a separator was seen since the last separator


def _commands(lexer: _Lexer) -> list[SimpleCommand]:
    commands: list[SimpleCommand] = []
    current = _Command()
    dangling: str | None = None  # `&&`, `||` or `|` still waiting for its second command
    tokens = lexer.tokens
    i = 0

    def finish() -> None:
        nonlocal current, dangling
        if current.words or current.writes or current.reads:
            commands.append(
                SimpleCommand(tuple(current.words), tuple(current.writes), tuple(current.reads))
            )
            _check(lexer, current.words)
        if current.touched:
            dangling = None
        current = _Command()

    while i < len(tokens):
        token = tokens[i]
        i += 1
        if isinstance(token, _Word):
            current.touched = True
            plain = token.literal and not token.quoted
            if not current.words and plain and _ASSIGNMENT.match(token.text):
                lexer.problem(f"the assignment {token.text!r} can change what a command runs")
                continue
            current.words.append(token.text if token.literal else None)
        elif token in _SEPARATORS:
            if not current.touched and token != "\n":
                lexer.problem(f"syntax error near {token!r}")
            finish()
            if token in _JOINS:
                dangling = token
        elif token in _REDIRECTS:
            current.touched = True
            target = tokens[i] if i < len(tokens) else None
            if not isinstance(target, _Word):
                lexer.problem(f"syntax error: {token!r} has no target")
                continue
            i += 1
            name = target.text if target.literal else "?"
            if token in _WRITES or (token == ">&" and not (name.isdigit() or name == "-")):
                if name not in _NOT_FILES:
                    current.writes.append(name)
            elif token == "<":
                current.reads.append(name)
        else:
            current.touched = True
            lexer.problem(f"the shell construct {token!r} is not analysed by this analyser")
    finish()
    if dangling is not None:
        lexer.problem(f"syntax error: the line ends with {dangling!r}")
    return commands


def _check(lexer: _Lexer, words: list[str | None]) -> None:
    """Problems of one simple command: what its name says the analyser cannot follow."""
    if not words:
        return
    name = words[0]
    if name is None:
        lexer.problem("the command name is not literal")
        return
    base = name.rsplit("/", 1)[-1]
    if name in _RESERVED:
        lexer.problem(f"the shell keyword {name!r} is not analysed by this analyser")
    elif base in _RUNS_OTHERS or (base == "find" and _FIND_EXEC.intersection(words[1:])):
        lexer.problem(f"{base!r} runs other commands, which this analyser does not open")
    elif base in _CHANGES_LATER:
        lexer.problem(f"{base!r} can change what later commands run")
