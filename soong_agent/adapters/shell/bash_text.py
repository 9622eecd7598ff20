"""Bash's rules over plain text and words, for the tree-sitter analyser (no syntax tree here).

Where a line continues (`continuations`), what still expands in text tree-sitter called literal
(`expands`), where a backtick substitution ends (`backtick_end`), how `$'…'`, unquoted and
double-quoted words and backtick text decode (`ansi_c`, `unescape_unquoted`,
`unescape_double_quoted`, `unescape_backticks`), which builtins change how later commands are
read or run (`builtin_problem`), and which command a wrapper or `find -exec` runs (`wrapped`,
`find_exec`). Each rule was checked against bash 5.2
(`tests/security/test_bash_quoting_property.py` runs random lines through both).
"""

from __future__ import annotations

import re

from soong_agent.domain.permissions.programs import FIND_EXEC, Wrapper

Words = tuple[str | None, ...]

ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
BRACE_EXPANSION = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")
_EXPANDS_AFTER_DOLLAR = re.compile(r"[A-Za-z0-9_{(@*#?$!\-'\"]")
_ANSI_SIMPLE = {
    *("a\a", "b\b", "e\x1b", "E\x1b", "f\f", "n\n", "r\r", "t\t", "v\v"),
    *("\\\\", "''", '""', "??"),
}
_ANSI = {pair[0]: pair[1] for pair in _ANSI_SIMPLE}
_OCTAL = frozenset("01234567")
_HEX = frozenset("0123456789abcdefABCDEF")
DELIMITER = re.compile(r"""(?:[A-Za-z0-9_.+:,@%^=/-]|\\[^\n]|'[^'\n]*'|"[^"\\$`\n]*")+""")
PARAMETER = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])")
_RISKY_SHOPT = frozenset({"expand_aliases", "extglob", "extdebug"})
_READ_VALUES = frozenset({"-d", "-i", "-n", "-N", "-p", "-t", "-u"})
_MAPFILE_VALUES = frozenset({"-d", "-n", "-O", "-s", "-u", "-c"})


def continuations(data: bytes) -> list[int]:
    """Positions of the backslashes that, with the newline after them, make a continuation
    (an odd run of backslashes before a newline)."""
    found: list[int] = []
    at = data.find(b"\\\n")
    while at >= 0:
        run = 1
        while at - run >= 0 and data[at - run] == 0x5C:
            run += 1
        if run % 2 == 1:
            found.append(at)
        at = data.find(b"\\\n", at + 1)
    return found


def expands(text: str, *, quoted: bool) -> bool:
    """Whether bash would expand something in `text` (or, unquoted, end the word at a newline)."""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "`" or (ch == "\n" and not quoted):
            return True
        if ch == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if _EXPANDS_AFTER_DOLLAR.match(nxt) and not (quoted and nxt in "'\""):
                return True
        i += 1
    return False


def backtick_end(text: str, start: int) -> int:
    """Where bash ends a backtick substitution opened before `start` (-1: it does not)."""
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "`":
            return i
        i += 1
    return -1


def builtin_problem(base: str, args: Words) -> str | None:
    """Why a builtin changes how the rest of the line is read or what it runs (None: it does
    not). Assignments to lower-case names are local to the shell and left alone."""
    if base in ("read", "mapfile", "readarray", "getopts", "printf"):
        return _assigning_builtin(base, args)
    if base == "let":
        return "let assigns variables"
    if base == "shopt" and any(a is None or a in _RISKY_SHOPT for a in args):
        return "shopt changes how later commands are read"
    if base == "set" and any(a is None or a in ("-k", "keyword") or _cluster(a, "k") for a in args):
        return "set -k turns later words into assignments"
    if base == "hash" and any(a is None or _cluster(a, "p") for a in args):
        return "hash -p changes which program a name runs"
    if base == "enable" and any(a is None or _cluster(a, "f") for a in args):
        return "enable -f loads a builtin from a file"
    return None


def _cluster(arg: str | None, letter: str) -> bool:
    return arg is not None and arg.startswith("-") and not arg.startswith("--") and letter in arg


def _assigning_builtin(base: str, args: Words) -> str | None:
    targets: list[str | None] = []
    operands: list[str | None] = []
    values = _READ_VALUES if base == "read" else _MAPFILE_VALUES
    i = 0
    while i < len(args):
        arg = args[i]
        if arg is None:
            return f"{base} with a word that is not literal may assign any variable"
        if base in ("getopts", "printf") or not arg.startswith("-") or arg == "-":
            operands.append(arg)
        elif base == "read" and arg.startswith("-") and "a" in arg[1:]:
            targets.append(args[i + 1] if i + 1 < len(args) and arg.endswith("a") else arg)
            i += 1
        elif base in ("mapfile", "readarray") and _cluster(arg, "C"):
            return f"{base} -C runs a callback"
        elif arg in values:
            i += 1
        i += 1
    if base == "printf":
        if operands[:1] == ["-v"]:
            targets.append(operands[1] if len(operands) > 1 else None)
        elif any(a == "-v" or (a or "").startswith("-v") for a in operands[:1]):
            targets.append((operands[0] or "")[2:])
    elif base == "getopts":
        targets.extend(operands[1:2])
    else:
        targets.extend(operands)
    for target in targets:
        if target is None or target != target.lower():
            return f"{base} assigns {target or 'a variable'}, which can change what runs"
    return None


def find_exec(args: Words) -> list[Words]:
    """The commands of `find … -exec CMD … ;` (also `-execdir`, `-ok`, `-okdir`, `+`)."""
    found: list[Words] = []
    i = 0
    while i < len(args):
        if args[i] in FIND_EXEC:
            j = i + 1
            while j < len(args) and args[j] not in (";", "+"):
                j += 1
            if j > i + 1:
                found.append(args[i + 1 : j])
            i = j
        i += 1
    return found


def wrapped(spec: Wrapper, args: Words, *, nice: bool = False) -> Words | None:
    """The command a wrapper runs (empty: none), or None when that cannot be told."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg is None:
            return None
        if arg == "--":
            i += 1
            break
        if spec.assignments and ASSIGNMENT.match(arg):
            i += 1
            continue
        if not arg.startswith("-") or len(arg) == 1:
            break
        if arg in spec.no_command or arg.partition("=")[0] in spec.no_command:
            return ()
        if nice and re.fullmatch(r"-\d+", arg):
            i += 1  # `nice -19 cmd`: the old way to give the adjustment
            continue
        step = _wrapper_option(spec, args, i)
        if step is None:
            return None
        i += step
    i += spec.positionals
    return args[i:] if i < len(args) else ()


def _wrapper_option(spec: Wrapper, args: Words, i: int) -> int | None:
    """How many words the option at `i` takes (None: an option the table does not know)."""
    arg = args[i] or ""
    if arg.startswith("--"):
        name = arg.partition("=")[0]
        if name in spec.value_options:
            return 1 if "=" in arg else 2
        return 1 if name in spec.flags else None
    for j in range(1, len(arg)):
        name = "-" + arg[j]
        if name in spec.no_command:
            return None
        if name in spec.optional_attached:
            return 1
        if name in spec.value_options:
            return 1 if j + 1 < len(arg) else 2
        if name not in spec.flags:
            return None
    return 1


def unescape_backticks(inner: str) -> str:
    r"""The command line of an unquoted `` `…` ``: ``\\``, ``\``` and ``\$`` become the
    character escaped; other backslashes stay."""
    out: list[str] = []
    i = 0
    while i < len(inner):
        ch = inner[i]
        if ch == "\\" and i + 1 < len(inner) and inner[i + 1] in "\\`$":
            out.append(inner[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def ansi_c(body: str) -> str | None:
    """The text of ``$'…'`` as bash decodes it; None when it would hold a NUL (bash cuts the
    word there) or a byte outside ASCII (its meaning depends on the locale)."""
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\" or i + 1 >= len(body):
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        value: int | None = None
        if nxt in _ANSI:
            out.append(_ANSI[nxt])
            i += 2
            continue
        if nxt in _OCTAL:
            digits = _run(body, i + 1, _OCTAL, 3)
            value, i = int(digits, 8), i + 1 + len(digits)
        elif nxt in "xuU":
            digits = _run(body, i + 2, _HEX, {"x": 2, "u": 4, "U": 8}[nxt])
            if not digits:
                out.append("\\" + nxt)
                i += 2
                continue
            value, i = int(digits, 16), i + 2 + len(digits)
        elif nxt == "c" and i + 2 < len(body):
            target = body[i + 2]
            i += 3
            if target == "\\" and body[i : i + 1] == "\\":
                i += 1
            value = 0x7F if target == "?" else ord(target.upper()) & 0x1F
        else:
            out.append("\\" + nxt)
            i += 2
            continue
        if value == 0 or value > 0x7F:
            return None
        out.append(chr(value))
    return "".join(out)


def _run(text: str, start: int, allowed: frozenset[str], limit: int) -> str:
    end = start
    while end < len(text) and end - start < limit and text[end] in allowed:
        end += 1
    return text[start:end]


def unescape_unquoted(text: str) -> str:
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


def unescape_double_quoted(text: str) -> str:
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
