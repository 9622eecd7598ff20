"""The tree-sitter-bash node kinds the shell analyser tells apart, and the state of one walk."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import tree_sitter_bash
from tree_sitter import Language, Parser

from soong_agent.ports.shell import SimpleCommand

Words = tuple[str | None, ...]

MAX_TREE_DEPTH = 200
SHOWN = 60
ENV_SPLIT = ("-S", "--split-string")

WRITE_OPS = frozenset({">", ">>", "&>", "&>>", ">|", "<>"})
REDIRECT_OPS = WRITE_OPS | {"<", ">&", "<&", ">&-", "<&-"}
NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
REDIRECT_TYPES = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
# node kinds whose text bash reads literally: a backslash-newline in them stays
LITERAL_KINDS = frozenset({"raw_string", "ansi_c_string", "comment"})
# node kinds whose text between their parts is literal text, not blanks
TEXT_HOLDERS = frozenset(
    {
        *("string", "heredoc_body", "heredoc_redirect", "comment", "raw_string", "word"),
        *("ansi_c_string", "translated_string", "heredoc_start", "heredoc_end", "regex"),
        *("heredoc_content", "string_content", "concatenation", "test_command"),
    }
)
# node kinds that expand inside a word, a double-quoted string or a here-document
EXPANSIONS = frozenset(
    {
        *("command_substitution", "expansion", "simple_expansion", "arithmetic_expansion"),
        *("process_substitution", "translated_string", "ansi_c_string", "raw_string"),
    }
)
# what tree-sitter may put among a command's words (a `subshell` there is a bash syntax error)
ARGUMENTS = frozenset(
    {
        *("word", "string", "raw_string", "ansi_c_string", "concatenation", "number"),
        *("simple_expansion", "expansion", "command_substitution", "process_substitution"),
        *("arithmetic_expansion", "translated_string", "brace_expression"),
    }
)
ARITHMETIC_ASSIGN = frozenset(
    {"=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "^=", "|=", "++", "--"}
)
ARITHMETIC = frozenset({"arithmetic_expansion", "compound_statement"})


# after a `$`, what starts an expansion in bash (a name, a digit, a special parameter, braces …)
# a here-document delimiter the analyser reads: plain characters, escapes, '…' and "…"
@lru_cache(maxsize=1)
def bash_language() -> Language:
    return Language(tree_sitter_bash.language())


@dataclass(slots=True)
class WalkState:
    """One analysis: the commands and problems found so far; `analyze_line` analyses a line
    nested in the one being walked (a script given to ``sh -c``, ``eval``'s words …)."""

    parser: Parser
    max_nesting: int
    analyze_line: Callable[[WalkState, str, int], None]
    commands: list[SimpleCommand] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        """Note why the line is not ok (once)."""
        if text not in self.problems:
            self.problems.append(text)
