"""Program option tables (PERM-4), a data table: what makes a reader write or execute.

Pure data and small functions over one simple command's words (literal text; `None` for a word
that is not literal). Three things live here:

- `risks(words)`: the words of a call that make a reader write or run something, each a `Risk`
  at the position of the word that does it: ``find -delete`` / ``-fprint``, ``rg --pre``,
  ``sed -i`` and the ``w``/``W``/``e``/``r`` commands and ``s///w`` / ``s///e`` flags of its
  script, any awk program that is not trivially safe, ``python -c`` / ``perl -e`` / ``node -e``
  …, ``tar -x`` / ``--to-command``, git's writing sub-commands and options, ``sort -o`` …
  A ``prefix:`` allow rule (or a session grant) covers a call only when every risk of the call
  lies inside the words the rule names: ``prefix:find`` covers ``find . -name x`` but not
  ``find . -delete``; ``prefix:find . -delete`` covers that. A word that is not literal where an
  option could be is a risk too (``find . $ARGS`` may be ``-delete``).
- `normalised(words)`: the words with a program's global options taken out (``git -C . -c k=v
  --no-pager commit`` reads as ``git commit``), so that rules match the sub-command whatever
  global options come first.
- `WRAPPERS`, `SHELLS` and `FIND_EXEC`: the commands that run another command given as their
  arguments (``sudo``, ``env``, ``timeout``, ``xargs`` …), which the shell analyser opens so that
  the command they run is checked on its own.

Programs that execute by nature (``make``, ``npm run``, ``yarn run``, ``pnpm run``, a script
given to an interpreter) have no entry: only a rule naming them covers them, and the commands
they run through ``xargs``, ``find -exec`` or a wrapper are checked as commands of their own.

A data table, longer than the 400-line limit on purpose (the first line says so, which
tests/architecture/test_module_shape.py reads): one table per program, kept together so the
coverage can be read and reviewed in one place.
"""

from __future__ import annotations

import posixpath
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

Words = Sequence[str | None]
Effect = Literal["writes", "executes", "unclear"]

Check = Callable[[Sequence[str | None]], list["Risk"]]
Flagged = dict[str, tuple[Effect, str]]  # option → what it does (effect, words for the reason)

UNCOVERABLE = sys.maxsize
"""The index of a risk no ``prefix:`` rule can cover (it sits in words a normalisation drops)."""


@dataclass(frozen=True, slots=True)
class Risk:
    """One word that turns a call into a writer or an executor.

    Attributes:
        index: the position of that word in the command's words.
        effect: ``writes`` (files), ``executes`` (runs a program or code), ``unclear`` (the
            analyser cannot tell: a word that is not literal, a script it does not read).
        reason: what it does, for the verdict's reason (``find -delete deletes files``).
        opaque: it runs program text given on the command line that no analyser reads
            (``python -c``, awk's ``system()``, ``git -c alias.x=!…``): a deny rule naming a
            command cannot see what that text runs.
    """

    index: int
    effect: Effect
    reason: str
    opaque: bool = False


@dataclass(frozen=True, slots=True)
class Normalised:
    """A command's words with global options taken out.

    Attributes:
        words: the words that remain (``git commit -m x`` for ``git -C . commit -m x``).
        kept: for each remaining word, its position in the original words.
        certain: False when a word that is not literal stands where a global option could be
            (``git $OPTS commit``): what remains may not be what runs.
    """

    words: tuple[str | None, ...]
    kept: tuple[int, ...]
    certain: bool = True


def program_name(word: str | None) -> str | None:
    """The program a command word names: its last path part, version suffixes folded
    (``/usr/bin/python3.12`` → ``python``, ``gawk`` → ``awk``)."""
    if word is None:
        return None
    base = posixpath.basename(word)
    return _ALIASES.get(base) or _VERSIONED.sub(r"\1", base)


def risks(words: Words) -> tuple[Risk, ...]:
    """The risks of one simple command (empty for programs without a table)."""
    name = program_name(words[0]) if words else None
    check = _CHECKS.get(name) if name is not None else None
    return tuple(check(words)) if check is not None else ()


def normalised(words: Words) -> Normalised:
    """`words` without the program's global options (only git has them in the table)."""
    name = program_name(words[0]) if words else None
    if name == "git":
        return _git_normalised(words)
    return Normalised(tuple(words), tuple(range(len(words))))


def embedded_commands(words: Words) -> list[tuple[Literal["argv", "line"], str | None]]:
    """Commands a reader's options name, for the shell analyser to list as commands of their
    own (so deny rules see them): ``rg --pre PROG`` runs PROG on each file (``argv``);
    ``tar --to-command=CMD``, ``git -c core.pager=CMD`` run CMD through a shell (``line``).
    `None`: the option's value is not literal."""
    name = program_name(words[0]) if words else None
    found: list[tuple[Literal["argv", "line"], str | None]] = []
    if name == "rg":
        for opt in _scan(words, _RG_SYNTAX).options:
            if opt.name == "--pre" and opt.value != "":
                found.append(("argv", opt.value))
    elif name == "tar":
        for opt in _scan(words, _TAR_SYNTAX).options:
            if opt.name in _TAR_SHELLED or opt.name in ("-I", "-F"):
                value = opt.value
                if opt.name == "--checkpoint-action":
                    if value is None or not value.startswith("exec="):
                        continue
                    value = value[len("exec=") :]
                found.append(("line", value))
            elif opt.name == "--rsh-command":
                found.append(("argv", opt.value))
    elif name == "git":
        at, _, _, _ = _git_globals(words)
        for i, word in enumerate(words[1:at], start=1):
            if word not in ("-c", "--config-env") or i + 1 >= len(words):
                continue
            if words[i + 1] is None:
                found.append(("line", None))  # any key: maybe one whose value git runs
                continue
            key, _, value = (words[i + 1] or "").partition("=")
            if key.lower().startswith("alias.") and not value.startswith("!"):
                continue  # an alias for another git sub-command: not a shell line
            if _GIT_SHELLED.match(key):
                found.append(("line", value.removeprefix("!") if words[i + 1] else None))
    return found


# --- wrappers the shell analyser opens ---------------------------------------------------------

SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "rbash"})
SHELL_VALUE_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


@dataclass(frozen=True, slots=True)
class Wrapper:
    """A command that runs another command given as its arguments.

    Attributes:
        value_options: options followed by a value (separate, or attached to a short one).
        flags: options without a value; an option in neither set makes the wrapped command
            impossible to tell (the analysis asks).
        positionals: arguments before the command (``timeout 5 cmd``, ``chrt 10 cmd``).
        assignments: ``NAME=value`` words may come before the command (``env A=1 cmd``).
        no_command: options after which nothing is run (``taskset -p PID``, ``chrt -p``).
        optional_attached: short options whose value, when given, is attached (``xargs -i{}``).
    """

    value_options: frozenset[str] = frozenset()
    flags: frozenset[str] = frozenset()
    positionals: int = 0
    assignments: bool = False
    no_command: frozenset[str] = frozenset()
    optional_attached: frozenset[str] = frozenset()


def _set(*items: str) -> frozenset[str]:
    return frozenset(items)


WRAPPERS: dict[str, Wrapper] = {
    "env": Wrapper(
        _set("-u", "--unset", "-C", "--chdir"),
        _set("-i", "--ignore-environment", "-0", "--null", "-v", "--debug"),
        assignments=True,
    ),
    "nice": Wrapper(_set("-n", "--adjustment")),
    "nohup": Wrapper(),
    "timeout": Wrapper(
        _set("-s", "--signal", "-k", "--kill-after"),
        _set("--foreground", "--preserve-status", "-v", "--verbose"),
        positionals=1,
    ),
    "sudo": Wrapper(
        _set(
            *("-u", "--user", "-g", "--group", "-C", "--close-from", "-h", "--host"),
            *("-p", "--prompt", "-r", "--role", "-t", "--type", "-U", "--other-user"),
            *("-D", "--chdir", "-R", "--chroot", "-T", "--command-timeout"),
        ),
        _set(
            *("-A", "--askpass", "-b", "--background", "-E", "--preserve-env", "-H"),
            *("--set-home", "-i", "--login", "-k", "--reset-timestamp", "-n"),
            *("--non-interactive", "-P", "--preserve-groups", "-S", "--stdin", "-s"),
            *("--shell", "-B", "--bell", "-N", "--no-update"),
        ),
        no_command=_set("-l", "--list", "-v", "--validate", "-K", "--remove-timestamp", "-V"),
    ),
    "doas": Wrapper(_set("-u", "-C"), _set("-n", "-s", "-L")),
    "command": Wrapper(flags=_set("-p"), no_command=_set("-v", "-V")),  # -v: only looks up
    "builtin": Wrapper(),
    "exec": Wrapper(_set("-a"), _set("-c", "-l")),
    "time": Wrapper(
        _set("-f", "--format", "-o", "--output"),
        _set("-p", "--portability", "-v", "--verbose", "-a", "--append", "-q", "--quiet"),
    ),
    "xargs": Wrapper(
        _set(
            *("-a", "--arg-file", "-d", "--delimiter", "-E", "-I", "-L", "-n", "--max-args"),
            *("-P", "--max-procs", "-s", "--max-chars", "--process-slot-var"),
            *("--max-lines", "--replace", "--eof"),
        ),
        _set(
            *("-0", "--null", "-o", "--open-tty", "-p", "--interactive", "-r"),
            *("--no-run-if-empty", "-t", "--verbose", "-x", "--exit"),
        ),
        optional_attached=_set("-i", "-l", "-e"),
    ),
    "stdbuf": Wrapper(_set("-i", "-o", "-e", "--input", "--output", "--error")),
    "ionice": Wrapper(
        _set("-c", "--class", "-n", "--classdata", "-p", "--pid", "-P", "--pgid", "-u", "--uid"),
        _set("-t", "--ignore"),
    ),
    "chrt": Wrapper(
        _set("-T", "--sched-runtime", "-P", "--sched-period", "-D", "--sched-deadline"),
        _set(
            *("-a", "--all-tasks", "-b", "--batch", "-d", "--deadline", "-f", "--fifo"),
            *("-i", "--idle", "-o", "--other", "-r", "--rr", "-R", "--reset-on-fork"),
            *("-v", "--verbose"),
        ),
        positionals=1,
        no_command=_set("-p", "--pid", "-m", "--max"),
    ),
    "taskset": Wrapper(
        flags=_set("-a", "--all-tasks", "-c", "--cpu-list"),
        positionals=1,
        no_command=_set("-p", "--pid"),
    ),
    "setsid": Wrapper(flags=_set("-c", "--ctty", "-f", "--fork", "-w", "--wait")),
    "coproc": Wrapper(),
    "chroot": Wrapper(_set("--userspec", "--groups"), _set("--skip-chdir"), positionals=1),
    "busybox": Wrapper(),
    "unbuffer": Wrapper(flags=_set("-p")),
    "fakeroot": Wrapper(
        _set("-l", "--lib", "--faked", "-s", "-i"), _set("-u", "--unknown-is-real")
    ),
    "torsocks": Wrapper(_set("-u", "-p", "-a", "-P"), _set("-i", "-d", "-q", "--shell")),
}
"""Commands that run the command given as their arguments, by their option syntax."""


# --- option scanning ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Opt:
    index: int  # the word holding the option
    name: str  # `-i`, `--in-place`, `-delete`
    value: str | None = None  # its value, when it has one that is literal
    value_index: int | None = None  # the word holding the value


@dataclass(frozen=True, slots=True)
class _Syntax:
    """How one program spells its options (GNU getopt by default)."""

    values: frozenset[str] = frozenset()  # options taking a value (`-e X`, `-eX`, `--expr=X`)
    optional: frozenset[str] = frozenset()  # short options whose optional value is attached
    stop_at_operand: bool = False  # options end at the first operand (interpreters, git)


@dataclass(slots=True)
class _Scan:
    options: list[_Opt]
    operands: list[int]  # positions of operand words
    unknown: list[int]  # positions of words that are not literal where an option could be


def _scan(words: Words, syntax: _Syntax) -> _Scan:
    scan = _Scan([], [], [])
    i, n, ended = 1, len(words), False
    while i < n:
        word = words[i]
        if word is None:
            (scan.operands if ended else scan.unknown).append(i)
            i += 1
            continue
        if ended or word == "-" or not word.startswith("-"):
            scan.operands.append(i)
            if syntax.stop_at_operand:
                ended = True
            i += 1
            continue
        if word == "--":
            ended = True
            i += 1
            continue
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if eq:
                scan.options.append(_Opt(i, name, value, i))
            elif name in syntax.values and i + 1 < n:
                scan.options.append(_Opt(i, name, words[i + 1], i + 1))
                i += 1
            else:
                scan.options.append(_Opt(i, name))
            i += 1
            continue
        i = _short_cluster(words, i, syntax, scan)
    return scan


def _short_cluster(words: Words, i: int, syntax: _Syntax, scan: _Scan) -> int:
    word = words[i] or ""
    for j in range(1, len(word)):
        name = "-" + word[j]
        rest = word[j + 1 :]
        if name in syntax.optional:
            scan.options.append(_Opt(i, name, rest, i))
            return i + 1
        if name in syntax.values:
            if rest:
                scan.options.append(_Opt(i, name, rest, i))
                return i + 1
            if i + 1 < len(words):
                scan.options.append(_Opt(i, name, words[i + 1], i + 1))
                return i + 2
            scan.options.append(_Opt(i, name))
            return i + 1
        scan.options.append(_Opt(i, name))
    return i + 1


def _unknown(scan: _Scan, program: str) -> list[Risk]:
    return [
        Risk(i, "unclear", f"a word of {program} that is not literal may be one of its options")
        for i in scan.unknown
    ]


def _flagged(scan: _Scan, table: Flagged, program: str) -> list[Risk]:
    found = _unknown(scan, program)
    for opt in scan.options:
        hit = table.get(opt.name)
        if hit is not None:
            effect, what = hit
            found.append(Risk(opt.index, effect, f"{program} {opt.name} {what}"))
    return found


# --- find, rg, sort, tree, curl, yq, uniq, xxd -------------------------------------------------

_FIND: Flagged = {
    "-delete": ("writes", "deletes files"),
    "-fprint": ("writes", "writes a file"),
    "-fprint0": ("writes", "writes a file"),
    "-fprintf": ("writes", "writes a file"),
    "-fls": ("writes", "writes a file"),
    **{name: ("executes", "runs a command") for name in FIND_EXEC},
}


def _find(words: Words) -> list[Risk]:
    found: list[Risk] = []
    for i, word in enumerate(words[1:], start=1):
        if word is None:
            found.append(Risk(i, "unclear", "a word of find that is not literal may be -delete"))
        elif word in _FIND:
            effect, what = _FIND[word]
            found.append(Risk(i, effect, f"find {word} {what}"))
    return found


_RG_SYNTAX = _Syntax(
    values=_set(
        *("-A", "-B", "-C", "-d", "-E", "-e", "-f", "-g", "-j", "-M", "-m", "-r", "-t", "-T"),
        *("--after-context", "--before-context", "--context", "--max-depth", "--encoding"),
        *("--regexp", "--file", "--glob", "--iglob", "--threads", "--max-columns"),
        *("--max-count", "--replace", "--type", "--type-not", "--type-add", "--type-clear"),
        *("--ignore-file", "--colors", "--color", "--context-separator", "--sort", "--sortr"),
        *("--path-separator", "--max-filesize", "--dfa-size-limit", "--regex-size-limit"),
        *("--engine", "--generate", "--hyperlink-format", "--field-context-separator"),
        *("--field-match-separator", "--pre", "--pre-glob", "--hostname-bin"),
    )
)
_RG: Flagged = {
    "--pre": ("executes", "runs a program on every file searched"),
    "--pre-glob": ("executes", "chooses the files --pre runs a program on"),
    "--hostname-bin": ("executes", "runs a program"),
    "-z": ("executes", "runs decompression programs"),
    "--search-zip": ("executes", "runs decompression programs"),
}

_SORT_SYNTAX = _Syntax(
    values=_set(
        *("-o", "--output", "-k", "--key", "-t", "--field-separator", "-S", "--buffer-size"),
        *("-T", "--temporary-directory", "--parallel", "--batch-size", "--files0-from"),
        "--compress-program",
    )
)
_SORT: Flagged = {
    "-o": ("writes", "writes a file"),
    "--output": ("writes", "writes a file"),
    "--compress-program": ("executes", "runs a program"),
}
_TREE_SYNTAX = _Syntax(values=_set("-o", "-L", "-P", "-I", "--filelimit", "--timefmt", "--charset"))
_TREE: Flagged = {"-o": ("writes", "writes a file")}
_CURL_WRITES = _set(
    *("-o", "--output", "-O", "--remote-name", "--remote-name-all", "-J", "--remote-header-name"),
    *("-D", "--dump-header", "-c", "--cookie-jar", "--trace", "--trace-ascii", "--libcurl"),
    *("--stderr", "--output-dir", "--etag-save", "--hsts", "--alt-svc", "-T", "--upload-file"),
)
_CURL_SYNTAX = _Syntax(
    values=_set(
        *("-o", "--output", "-D", "--dump-header", "-c", "--cookie-jar", "--trace"),
        *("--trace-ascii", "--libcurl", "--stderr", "--output-dir", "--etag-save", "--hsts"),
        *("--alt-svc", "-T", "--upload-file", "-K", "--config", "-d", "--data", "-H"),
        *("--header", "-X", "--request", "-u", "--user", "-A", "--user-agent", "-e"),
        *("--referer", "-b", "--cookie", "-F", "--form", "-m", "--max-time", "-x"),
        *("--proxy", "-w", "--write-out", "--data-binary", "--data-raw"),
        *("--data-urlencode", "--connect-timeout", "--retry", "-r", "--range", "-E"),
        *("--cert", "--key", "--cacert", "--resolve", "--connect-to", "-U"),
    )
)
_CURL: Flagged = {
    **{name: ("writes", "writes a file") for name in _CURL_WRITES},
    "-K": ("unclear", "reads options from a file"),
    "--config": ("unclear", "reads options from a file"),
}
_YQ_SYNTAX = _Syntax(values=_set("-o", "--output-format", "-p", "--input-format", "--indent", "-I"))
_YQ: Flagged = {
    "-i": ("writes", "edits files in place"),
    "--inplace": ("writes", "edits files in place"),
}


def _table(syntax: _Syntax, table: Flagged, program: str) -> Check:
    def check(words: Words) -> list[Risk]:
        return _flagged(_scan(words, syntax), table, program)

    return check


def _rg(words: Words) -> list[Risk]:
    return _flagged(_scan(words, _RG_SYNTAX), _RG, "rg")


def _second_operand_writes(program: str, syntax: _Syntax) -> Check:
    """``uniq IN OUT``, ``xxd IN OUT``: a second operand is a file written."""

    def check(words: Words) -> list[Risk]:
        scan = _scan(words, syntax)
        found = _unknown(scan, program)
        if len(scan.operands) >= 2:
            found.append(Risk(scan.operands[1], "writes", f"{program} writes its second operand"))
        return found

    return check


# --- sed ---------------------------------------------------------------------------------------

_SED_SYNTAX = _Syntax(
    values=_set("-e", "-f", "-l", "--expression", "--file", "--line-length"),
    optional=_set("-i"),
)
_SED_SIMPLE = frozenset("=dDgGhHlnNpPxzF")
_SED_LABEL = frozenset("btT:")
_SED_TEXT = frozenset("aic")
_SED_FILE = {"w": "writes a file", "W": "writes a file", "r": "reads a file", "R": "reads a file"}


def _sed(words: Words) -> list[Risk]:
    scan = _scan(words, _SED_SYNTAX)
    found = _unknown(scan, "sed")
    scripts: list[tuple[int, str | None]] = []
    sandbox = False
    for opt in scan.options:
        if opt.name in ("-i", "--in-place"):
            found.append(Risk(opt.index, "writes", f"sed {opt.name} edits files in place"))
        elif opt.name in ("-f", "--file"):
            found.append(Risk(opt.index, "unclear", "sed -f runs a script from a file"))
        elif opt.name in ("-e", "--expression"):
            scripts.append((opt.value_index or opt.index, opt.value))
        elif opt.name == "--sandbox":
            sandbox = True
    given = any(opt.name in ("-e", "--expression", "-f", "--file") for opt in scan.options)
    if not given and scan.operands:
        scripts.append((scan.operands[0], words[scan.operands[0]]))
    if sandbox or not scripts:
        return found
    if any(text is None for _, text in scripts):
        index = next(i for i, text in scripts if text is None)
        return [*found, Risk(index, "unclear", "the sed script is not literal")]
    problem = sed_script_problem("\n".join(text or "" for _, text in scripts))
    if problem is not None:
        found.append(Risk(scripts[0][0], problem[0], f"the sed script {problem[1]}", opaque=True))
    return found


def sed_script_problem(script: str) -> tuple[Effect, str] | None:
    """What a sed script does besides reading and printing (None: nothing).

    Conservative: a script this reader does not follow is ``unclear``.
    """
    reader = _SedReader(script)
    try:
        return reader.run()
    except _SedUnclear as exc:
        return "unclear", f"is not understood ({exc})"


class _SedUnclear(Exception):
    pass


class _SedReader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def skip_blank(self, newlines: bool = True) -> None:
        blanks = " \t\n;" if newlines else " \t"
        while self.peek() and self.peek() in blanks:
            self.i += 1

    def run(self) -> tuple[Effect, str] | None:
        while True:
            self.skip_blank()
            if not self.peek():
                return None
            self.address()
            self.skip_blank(newlines=False)
            while self.peek() == "!":
                self.i += 1
                self.skip_blank(newlines=False)
            found = self.command()
            if found is not None:
                return found

    def address(self) -> None:
        for part in range(2):
            if part == 1:
                if self.peek() != ",":
                    return
                self.i += 1
                if self.peek() in ("+", "~"):
                    self.i += 1
            ch = self.peek()
            if ch.isdigit():
                while self.peek().isdigit() or self.peek() == "~":
                    self.i += 1
            elif ch == "$":
                self.i += 1
            elif ch in ("/", "\\"):
                if ch == "\\":
                    self.i += 1
                self.delimited(self.peek())
                while self.peek() in ("I", "M"):
                    self.i += 1
            elif part == 1:
                raise _SedUnclear("an address range without an end")

    def delimited(self, delim: str) -> None:
        """Skip ``<delim>…<delim>`` (the opening one at the cursor)."""
        if not delim or delim in "\n\\":
            raise _SedUnclear("a bad delimiter")
        self.i += 1
        while True:
            ch = self.peek()
            if not ch or ch == "\n":
                raise _SedUnclear("an unterminated expression")
            self.i += 2 if ch == "\\" else 1
            if ch == delim:
                return

    def rest_of_line(self) -> str:
        end = self.text.find("\n", self.i)
        end = len(self.text) if end < 0 else end
        line = self.text[self.i : end]
        self.i = end
        return line

    def command(self) -> tuple[Effect, str] | None:
        ch = self.peek()
        self.i += 1
        if ch in "{}" or ch in _SED_SIMPLE:
            return None
        if ch == "#":
            self.rest_of_line()
            return None
        if ch in ("q", "Q", "l", "L"):
            while self.peek() in " \t" or self.peek().isdigit():
                self.i += 1
            return None
        if ch in _SED_LABEL:
            while self.peek() and self.peek() not in ";\n":
                self.i += 1
            return None
        if ch in _SED_TEXT:
            self.text_argument()
            return None
        if ch in _SED_FILE:
            effect: Effect = "writes" if ch in "wW" else "unclear"
            return effect, f"{_SED_FILE[ch]} (its {ch!r} command)"
        if ch == "e":
            return "executes", "runs a command (its 'e' command)"
        if ch == "v":
            self.rest_of_line()
            return None
        if ch == "y":
            delim = self.peek()
            self.delimited(delim)
            self.i -= 1
            self.delimited(delim)
            return None
        if ch == "s":
            return self.substitute()
        raise _SedUnclear(f"the command {ch!r}" if ch else "a missing command")

    def text_argument(self) -> None:
        """The text of ``a``, ``i``, ``c``: to the end of the line, backslash-newlines joined."""
        while self.peek():
            ch = self.peek()
            if ch == "\\":
                self.i += 2
                continue
            if ch == "\n":
                return
            self.i += 1

    def substitute(self) -> tuple[Effect, str] | None:
        delim = self.peek()
        self.delimited(delim)
        self.i -= 1
        self.delimited(delim)
        while True:
            ch = self.peek()
            if ch in ("g", "p", "i", "I", "m", "M") or ch.isdigit():
                self.i += 1
            elif ch == "w":
                return "writes", "writes a file (its s///w flag)"
            elif ch == "e":
                return "executes", "runs a command (its s///e flag)"
            elif not ch or ch in " \t\n;}#":
                return None
            else:
                raise _SedUnclear(f"the s flag {ch!r}")


# --- awk ---------------------------------------------------------------------------------------

_AWK_SYNTAX = _Syntax(
    values=_set(
        *("-F", "-v", "-f", "-e", "-E", "-i", "-l", "-W", "--field-separator", "--assign"),
        *("--file", "--source", "--exec", "--include", "--load"),
    ),
    optional=_set("-d", "-D", "-o", "-p", "-L"),
)
_AWK_SAFE_OPTIONS = _set(
    *("-F", "-v", "-e", "--source", "-b", "-c", "-C", "-g", "-h", "-M", "-n", "-N", "-O"),
    *("-P", "-r", "-s", "-S", "-t", "-V", "--field-separator", "--assign", "--sandbox"),
    *("--characters-as-bytes", "--traditional", "--posix", "--re-interval", "--version"),
    *("--copyright", "--gen-pot", "--bignum", "--use-lc-numeric", "--non-decimal-data"),
    *("--optimize", "--no-optimize", "--help", "--lint", "--lint-old", "--csv", "-k"),
)
# the words of an awk program that reach outside it: a program holding none of them only reads
# its input and prints (`>` also catches comparisons: such programs ask, which is safe)
_AWK_REACH = re.compile(r"system|getline|[|>@]|close|fflush|ENVIRON|PROCINFO")


def _awk(words: Words) -> list[Risk]:
    scan = _scan(words, _AWK_SYNTAX)
    found = _unknown(scan, "awk")
    sandbox = False
    programs: list[tuple[int, str | None]] = []
    from_file = False
    for opt in scan.options:
        if opt.name in ("-S", "--sandbox"):
            sandbox = True
        if opt.name in ("-e", "--source"):
            programs.append((opt.value_index or opt.index, opt.value))
        elif opt.name in ("-f", "--file", "-E", "--exec"):
            from_file = True
            found.append(Risk(opt.index, "unclear", f"awk {opt.name} runs a program from a file"))
        elif opt.name not in _AWK_SAFE_OPTIONS:
            effect: Effect = "writes" if opt.name in ("-d", "-o", "-p") else "unclear"
            found.append(Risk(opt.index, effect, f"awk {opt.name} is not a reading option"))
    if not programs and not from_file and scan.operands:
        programs.append((scan.operands[0], words[scan.operands[0]]))
    for index, text in programs:
        if text is None:
            found.append(Risk(index, "unclear", "the awk program is not literal"))
        elif not sandbox and _AWK_REACH.search(text):
            found.append(
                Risk(
                    index,
                    "executes",
                    "the awk program may run commands or write files (system, getline, "
                    "| or > redirections)",
                    opaque=True,
                )
            )
    return found


# --- interpreters ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Interpreter:
    syntax: _Syntax
    code: frozenset[str]  # options whose value is program text
    other: Flagged  # options that write or load code


_INTERPRETERS: dict[str, _Interpreter] = {
    "python": _Interpreter(
        _Syntax(values=_set("-c", "-m", "-W", "-X"), stop_at_operand=True), _set("-c"), {}
    ),
    "perl": _Interpreter(
        _Syntax(
            values=_set("-e", "-E", "-I", "-M", "-m"),
            optional=_set("-i", "-x", "-l", "-0", "-C", "-d", "-D", "-F", "-V"),
            stop_at_operand=True,
        ),
        _set("-e", "-E"),
        {"-i": ("writes", "edits files in place")},
    ),
    "ruby": _Interpreter(
        _Syntax(
            values=_set("-e", "-r", "-I", "-C", "-E", "--encoding"),
            optional=_set("-i", "-0", "-x", "-W", "-F", "-l"),
            stop_at_operand=True,
        ),
        _set("-e"),
        {"-i": ("writes", "edits files in place")},
    ),
    "node": _Interpreter(
        _Syntax(
            values=_set(
                *("-e", "--eval", "-p", "--print", "-r", "--require", "--import", "--loader"),
                *("--experimental-loader", "--input-type", "-C", "--conditions"),
            ),
            stop_at_operand=True,
        ),
        _set("-e", "--eval", "-p", "--print"),
        {
            name: ("executes", "loads a module first")
            for name in ("-r", "--require", "--import", "--loader", "--experimental-loader")
        },
    ),
    "php": _Interpreter(
        _Syntax(
            values=_set("-r", "-B", "-R", "-F", "-E", "-f", "-d", "-c", "-z", "-t"),
            stop_at_operand=True,
        ),
        _set("-r", "-B", "-R", "-E"),
        {
            "-F": ("executes", "runs a file for every input line"),
            "-d": ("unclear", "sets an ini entry (auto_prepend_file runs code)"),
            "-z": ("executes", "loads an extension"),
        },
    ),
}


def _interpreter(program: str) -> Check:
    spec = _INTERPRETERS[program]

    def check(words: Words) -> list[Risk]:
        scan = _scan(words, spec.syntax)
        found = _unknown(scan, program)
        for opt in scan.options:
            if opt.name in spec.code:
                found.append(
                    Risk(opt.index, "executes", f"{program} {opt.name} runs code", opaque=True)
                )
            elif opt.name in spec.other:
                effect, what = spec.other[opt.name]
                found.append(Risk(opt.index, effect, f"{program} {opt.name} {what}"))
        return found

    return check


def _shell(words: Words) -> list[Risk]:
    """``sh -c SCRIPT``: the analyser reads SCRIPT, but ``-c`` is not a reading option."""
    found: list[Risk] = []
    i = 1
    while i < len(words):
        word = words[i]
        if word is None:
            found.append(Risk(i, "unclear", "a word of the shell that is not literal"))
            break
        if word == "--" or not word.startswith(("-", "+")):
            break
        if word in SHELL_VALUE_OPTIONS:
            i += 2
            continue
        if word.startswith("-") and not word.startswith("--") and "c" in word:
            found.append(Risk(i, "executes", f"{program_name(words[0])} -c runs a command line"))
        i += 1
    return found


# --- tar ---------------------------------------------------------------------------------------

_TAR_MODE_LETTERS: Flagged = {
    "x": ("writes", "extracts files"),
    "c": ("writes", "creates an archive"),
    "r": ("writes", "appends to an archive"),
    "u": ("writes", "updates an archive"),
    "A": ("writes", "appends archives"),
    "I": ("executes", "runs a compression program"),
    "F": ("executes", "runs a volume script"),
    "g": ("writes", "writes a snapshot file"),
}
_TAR_VALUE_LETTERS = frozenset("fCIFgKLNTXbHV")
_TAR_LONG: Flagged = {
    **{
        name: ("writes", "writes files or the archive")
        for name in (
            *("--extract", "--get", "--create", "--append", "--update", "--catenate"),
            *("--concatenate", "--delete", "--index-file", "--listed-incremental"),
            *("--volno-file", "--remove-files"),
        )
    },
    **{
        name: ("executes", "runs a program")
        for name in (
            *("--to-command", "--use-compress-program", "--checkpoint-action", "--info-script"),
            *("--new-volume-script", "--rsh-command", "--rmt-command"),
        )
    },
}
_TAR_SHELLED = _set(
    "--to-command", "--use-compress-program", "--checkpoint-action", "--info-script",
    "--new-volume-script",
)  # fmt: skip
_TAR_SYNTAX = _Syntax(
    values=_set(
        *(f"-{letter}" for letter in _TAR_VALUE_LETTERS),
        *("--file", "--directory", "--to-command", "--use-compress-program", "--info-script"),
        *("--new-volume-script", "--rsh-command", "--rmt-command", "--index-file"),
        *("--listed-incremental", "--volno-file", "--files-from", "--exclude-from"),
        *("--exclude", "--transform", "--xform", "--owner", "--group", "--mode", "--format"),
        *("--blocking-factor", "--label", "--newer", "--after-date", "--tape-length"),
    )
)


def _tar(words: Words) -> list[Risk]:
    found: list[Risk] = []
    first = words[1] if len(words) > 1 else None
    positions = list(range(len(words)))
    if first and not first.startswith("-"):
        # old style, `tar xzf FILE`: letters first, their values in the next words, in order
        found.extend(_tar_letters(first, 1))
        slots = [letter for letter in first if letter in _TAR_VALUE_LETTERS]
        for letter, value in zip(slots, words[2 : 2 + len(slots)], strict=False):
            if letter == "f" and (value is None or ":" in value):
                found.append(Risk(1, "executes", "tar f HOST:FILE runs a remote shell"))
        positions = [0, *range(2 + len(slots), len(words))]
    scan = _scan([words[i] for i in positions], _TAR_SYNTAX)
    found.extend(Risk(positions[r.index], r.effect, r.reason) for r in _unknown(scan, "tar"))
    for opt in scan.options:
        index = positions[opt.index]
        if opt.name in _TAR_LONG:
            effect, what = _TAR_LONG[opt.name]
            found.append(Risk(index, effect, f"tar {opt.name} {what}"))
        elif not opt.name.startswith("--"):
            found.extend(_tar_letters(opt.name[1:], index))
        if opt.name in ("-f", "--file") and opt.value is not None and ":" in opt.value:
            found.append(Risk(index, "executes", "tar -f HOST:FILE runs a remote shell"))
    return found


def _tar_letters(letters: str, index: int) -> list[Risk]:
    found: list[Risk] = []
    for letter in letters:
        hit = _TAR_MODE_LETTERS.get(letter)
        if hit is not None:
            found.append(Risk(index, hit[0], f"tar -{letter} {hit[1]}"))
    return found


# --- git ---------------------------------------------------------------------------------------

_GIT_GLOBAL_VALUES = _set(
    "-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env",
    "--list-cmds", "--attr-source",
)  # fmt: skip
_GIT_GLOBAL_FLAGS = _set(
    *("--no-pager", "-P", "-p", "--paginate", "--bare", "--literal-pathspecs"),
    *("--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs", "--no-replace-objects"),
    *("--no-optional-locks", "--no-lazy-fetch", "--no-advice", "--html-path", "--man-path"),
    *("--info-path", "--version", "--help", "-v", "-h", "--exec-path"),
)
# `-c` keys that change only how git shows things: any other key may make git run a program
# (alias.*, core.pager, core.editor, core.sshCommand, core.fsmonitor, core.hooksPath,
# *.helper, diff.external, *.textconv, filter.*, pager.*, include.path, protocol.allow …)
_GIT_SAFE_CONFIG = re.compile(
    "|".join(
        (
            r"(?:color|column|advice|i18n|pretty)\.[a-z0-9.-]+",
            r"user\.(?:name|email)",
            r"core\.(?:quotepath|abbrev|autocrlf|safecrlf|filemode|ignorecase|longpaths)",
            r"log\.(?:date|decorate|abbrevcommit|follow|showroot)",
            r"diff\.(?:renames|algorithm|colormoved|noprefix|mnemonicprefix|context)",
            r"status\.(?:short|branch|showuntrackedfiles)",
            r"grep\.(?:linenumber|patterntype|extendedregexp)",
            r"format\.pretty|init\.defaultbranch|safe\.directory|gc\.auto|maintenance\.auto",
            r"blame\.(?:date|coloring)|merge\.conflictstyle|pull\.rebase",
        )
    ),
    re.IGNORECASE,
)
# `-c` keys whose value git runs through a shell
_GIT_SHELLED = re.compile(
    r"^(?:alias\..+|core\.(?:pager|editor|sshcommand|fsmonitor|askpass)|sequence\.editor"
    r"|diff\.external|pager\..+|credential\.helper|credential\..+\.helper|gpg\.program"
    r"|diff\..+\.(?:textconv|command)|filter\..+\.(?:clean|smudge|process))$",
    re.IGNORECASE,
)
_GIT_READERS = _set(
    *("status", "log", "show", "diff", "blame", "annotate", "ls-files", "ls-tree"),
    *("ls-remote", "rev-parse", "rev-list", "grep", "describe", "shortlog", "cat-file"),
    *("show-ref", "for-each-ref", "name-rev", "merge-base", "cherry", "count-objects"),
    *("whatchanged", "diff-tree", "diff-files", "diff-index", "var", "check-ignore"),
    *("check-attr", "check-ref-format", "verify-commit", "verify-tag", "range-diff"),
    *("show-branch", "version", "help", "fsck", "branch", "tag", "remote", "stash"),
    *("config", "worktree", "submodule", "notes", "reflog", "symbolic-ref", "archive"),
    *("check-mailmap", "get-tar-commit-id", "show-index", "verify-pack", "fsck-objects"),
)
_GIT_DIFF_LIKE = _set(
    "log", "show", "diff", "whatchanged", "diff-tree", "diff-files", "diff-index", "range-diff"
)  # fmt: skip
# sub-commands whose first operand says what they do: these operands only read
_GIT_READING_ACTIONS: dict[str, frozenset[str]] = {
    "remote": _set("show", "get-url", "-v", "--verbose"),
    "stash": _set("list", "show"),
    "worktree": _set("list"),
    "submodule": _set("status", "summary"),
    "notes": _set("list", "show"),
    "reflog": _set("show", "exists"),
}
_GIT_LIST_FLAGS = _set(
    *("-a", "--all", "-r", "--remotes", "-v", "-vv", "--verbose", "-l", "--list", "-q"),
    *("--show-current", "--no-color", "--no-column", "-i", "--ignore-case", "--quiet"),
    *("--color", "--column", "--sort", "--format", "--contains", "--no-contains", "--merged"),
    *("--no-merged", "--points-at", "--abbrev", "--no-abbrev", "-n"),
)
_GIT_CONFIG_READS = _set(
    *("--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color"),
    *("--get-colorbool", "--list", "-l", "get", "list"),
)
_GIT_CONFIG_WRITES = _set(
    *("--unset", "--unset-all", "--add", "--replace-all", "--rename-section"),
    *("--remove-section", "-e", "--edit", "set", "unset", "rename-section"),
    *("remove-section", "edit"),
)
_GIT_CONFIG_VALUES = _set("-f", "--file", "--blob", "--default", "--type", "--comment")


def _git_globals(words: Words) -> tuple[int, list[int], list[Risk], bool]:
    """Where git's sub-command is, the global option words before it, their risks, and
    whether every word before it was literal."""
    i = 1
    dropped: list[int] = []
    found: list[Risk] = []
    while i < len(words):
        word = words[i]
        if word is None:
            return i, dropped, found, False
        if not word.startswith("-"):
            break
        name, eq, value = word.partition("=")
        if name in _GIT_GLOBAL_VALUES:
            value_index = i if eq else i + 1
            shown = value if eq else (words[i + 1] if i + 1 < len(words) else "")
            dropped.extend(range(i, min(value_index, len(words) - 1) + 1))
            if name in ("-c", "--config-env"):
                key = (shown or "").split("=", 1)[0]
                if shown is None or not _GIT_SAFE_CONFIG.match(key):
                    found.append(
                        Risk(
                            i,
                            "executes",
                            f"git {name} {key or '…'} may make git run a program",
                            opaque=True,
                        )
                    )
            elif shown is None:
                return i, dropped, found, False
            i = value_index + 1
            continue
        if name == "--exec-path" and eq:
            found.append(Risk(i, "executes", "git --exec-path=DIR runs programs from DIR"))
        elif name not in _GIT_GLOBAL_FLAGS:
            found.append(Risk(i, "unclear", f"git {name} is not a known global option"))
        dropped.append(i)
        i += 1
    return i, dropped, found, True


def _git_normalised(words: Words) -> Normalised:
    _, dropped, _, certain = _git_globals(words)
    gone = set(dropped)
    kept = tuple(i for i in range(len(words)) if i not in gone)
    return Normalised(tuple(words[i] for i in kept), kept, certain)


def _git(words: Words) -> list[Risk]:
    at, _, found, certain = _git_globals(words)
    if not certain:
        found.append(Risk(at, "unclear", "a word of git that is not literal"))
        return found
    if at >= len(words):
        return found
    sub = words[at]
    if sub not in _GIT_READERS:
        found.append(Risk(at, "writes", f"git {sub} changes the repository or runs programs"))
        return found
    rest = words[at + 1 :]
    if any(word is None for word in rest):
        index = at + 1 + next(k for k, word in enumerate(rest) if word is None)
        found.append(Risk(index, "unclear", f"a word of git {sub} that is not literal"))
        return found
    literal = [word or "" for word in rest]
    problem = _git_sub_problem(sub or "", literal)
    if problem is not None:
        offset, effect, what = problem
        found.append(Risk(at + 1 + offset, effect, f"git {sub} {what}"))
    return found


def _git_sub_problem(sub: str, args: list[str]) -> tuple[int, Effect, str] | None:
    """The first argument that makes a reading sub-command write or run something."""
    for k, arg in enumerate(args):
        if arg == "--":
            break
        name = arg.partition("=")[0]
        if sub in _GIT_DIFF_LIKE and name in ("--output", "--ext-diff"):
            what = "writes a file" if name == "--output" else "runs the external diff program"
            return k, ("writes" if name == "--output" else "executes"), f"{name} {what}"
        if sub == "grep" and (name in ("-O", "--open-files-in-pager") or arg.startswith("-O")):
            return k, "executes", f"{name} runs a pager"
        if sub == "archive" and name in ("-o", "--output", "--remote", "--exec"):
            return k, "writes", f"{name} writes a file or runs a remote command"
        if sub == "help" and name in ("-w", "--web", "-i", "--info", "-m", "--man"):
            return k, "executes", f"{name} runs a viewer"
    if sub in ("branch", "tag"):
        return _git_list_problem(sub, args)
    if sub == "config":
        return _git_config_problem(args)
    if sub == "symbolic-ref":
        operands = [k for k, arg in enumerate(args) if not arg.startswith("-")]
        flags = [k for k, arg in enumerate(args) if arg in ("-d", "--delete")]
        if flags or len(operands) > 1:
            return (flags or operands)[-1], "writes", "changes a reference"
        return None
    actions = _GIT_READING_ACTIONS.get(sub)
    if actions is not None:
        first = next(((k, arg) for k, arg in enumerate(args) if arg != "-v"), None)
        if sub == "remote" and first is None:
            return None
        if sub == "reflog" and (first is None or first[1].startswith("-")):
            return None
        if first is None:
            return 0, "writes", "(without an action) changes the repository"
        if first[1] not in actions:
            return first[0], "writes", f"{first[1]} changes the repository or runs programs"
    return None


def _git_list_problem(sub: str, args: list[str]) -> tuple[int, Effect, str] | None:
    listing = any(arg in ("-l", "--list") for arg in args)
    for k, arg in enumerate(args):
        name = arg.partition("=")[0]
        if name.startswith("-"):
            if name not in _GIT_LIST_FLAGS and not re.fullmatch(r"-n\d*", name):
                return k, "writes", f"{arg} changes the repository"
        elif not listing:
            return k, "writes", f"{arg} creates a {sub}"
    return None


def _git_config_problem(args: list[str]) -> tuple[int, Effect, str] | None:
    operands: list[int] = []
    skip = False
    reads = False
    for k, arg in enumerate(args):
        if skip:
            skip = False
            continue
        name = arg.partition("=")[0]
        if name in _GIT_CONFIG_WRITES:
            return k, "writes", f"{arg} changes the configuration"
        if name in _GIT_CONFIG_READS:
            reads = True
        elif name in _GIT_CONFIG_VALUES and "=" not in arg:
            skip = True
        elif not arg.startswith("-"):
            operands.append(k)
    if not reads and len(operands) >= 2:
        return operands[1], "writes", "NAME VALUE changes the configuration"
    return None


# --- the table ---------------------------------------------------------------------------------

_ALIASES = {
    "gawk": "awk",
    "mawk": "awk",
    "nawk": "awk",
    "gsed": "sed",
    "gfind": "find",
    "gtar": "tar",
    "bsdtar": "tar",
    "nodejs": "node",
    "pypy": "python",
    "pypy3": "python",
    "egrep": "grep",
    "fgrep": "grep",
    "rbash": "bash",
}
_VERSIONED = re.compile(r"^(python|perl|ruby|php|node)[0-9][0-9.]*$")

_CHECKS: dict[str, Check] = {
    "find": _find,
    "rg": _rg,
    "grep": lambda words: [],  # no option of grep writes or runs anything
    "sed": _sed,
    "awk": _awk,
    "tar": _tar,
    "git": _git,
    "sort": _table(_SORT_SYNTAX, _SORT, "sort"),
    "tree": _table(_TREE_SYNTAX, _TREE, "tree"),
    "curl": _table(_CURL_SYNTAX, _CURL, "curl"),
    "yq": _table(_YQ_SYNTAX, _YQ, "yq"),
    "uniq": _second_operand_writes("uniq", _Syntax(values=_set("-f", "-s", "-w"))),
    "xxd": _second_operand_writes("xxd", _Syntax(values=_set("-c", "-g", "-l", "-o", "-s"))),
    **{name: _interpreter(name) for name in _INTERPRETERS},
    **{name: _shell for name in SHELLS},
}
"""The programs with a table, by `program_name`."""
