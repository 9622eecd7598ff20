"""What a simple command runs in turn (PERM-4): ``eval`` and ``sh -c`` scripts, the commands
of wrappers (``xargs``, ``env``, ``sudo`` …), ``find -exec`` and ``trap`` actions, analysed as
lines or commands of their own."""

from __future__ import annotations

import posixpath

from soong_agent.adapters.shell import bash_text
from soong_agent.adapters.shell.ts_nodes import (
    ENV_SPLIT,
    WalkState,
    Words,
)
from soong_agent.adapters.shell.ts_words import (
    shortened,
)
from soong_agent.domain.permissions.programs import (
    SHELL_VALUE_OPTIONS,
    SHELLS,
    WRAPPERS,
    embedded_commands,
)
from soong_agent.ports.shell import SimpleCommand


def add_command(
    state: WalkState,
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
        state.problem(f"the command name is not literal in {shortened(shown)!r}")
        return
    base = posixpath.basename(name)
    args = words[1:]
    problem = bash_text.builtin_problem(base, args)
    if problem is not None:
        state.problem(f"{problem} in {shortened(shown)!r}")
    if base == "eval":
        if any(arg is None for arg in args):
            state.problem(f"eval of text that is not literal in {shortened(shown)!r}")
        elif args:
            state.analyze_line(state, " ".join(a for a in args if a is not None), nesting + 1)
    elif base in SHELLS:
        _shell(state, args, nesting, shown, stdin)
    elif base == "trap":
        _trap(state, args, nesting, shown)
    elif base == "find":
        for executed in bash_text.find_exec(args):
            _nested(state, executed, nesting, shown)
    elif base == "env" and any(a is not None and a.startswith(ENV_SPLIT) for a in args):
        state.problem(f"env -S (split string) is not analysed in {shortened(shown)!r}")
    elif base in WRAPPERS:
        inner = bash_text.wrapped(WRAPPERS[base], args, nice=base == "nice")
        if inner is None:
            state.problem(f"cannot tell which command {base} runs in {shortened(shown)!r}")
        elif inner:
            _nested(state, inner, nesting, shown, () if base == "xargs" else stdin)
    for how, text in embedded_commands(words):
        if text is None:
            state.problem(f"a command named by an option is not literal in {shortened(shown)!r}")
        elif how == "argv":
            _nested(state, (text, None), nesting, shown)
        elif nesting + 1 > state.max_nesting:
            state.problem(f"commands nested more than {state.max_nesting} levels deep")
        else:
            state.analyze_line(state, text, nesting + 1)


def _nested(
    state: WalkState, words: Words, nesting: int, shown: str, stdin: tuple[str | None, ...] = ()
) -> None:
    if nesting + 1 > state.max_nesting:
        state.problem(f"commands nested more than {state.max_nesting} levels deep")
        return
    add_command(state, SimpleCommand(words), nesting + 1, shown, stdin=stdin)


def _shell(
    state: WalkState, args: Words, nesting: int, shown: str, stdin: tuple[str | None, ...]
) -> None:
    """`sh -c SCRIPT …` runs SCRIPT; `sh`, `sh -s …` run the heredoc/herestring they are fed."""
    saw_c = saw_s = False
    i = 0
    while i < len(args):
        arg = args[i]
        if arg is None:
            if not saw_c:
                state.problem(f"cannot tell what the shell runs in {shortened(shown)!r}")
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
            state.problem(f"the script of a shell -c is not literal in {shortened(shown)!r}")
        else:
            state.analyze_line(state, script, nesting + 1)
        return
    if i < len(args) and not saw_s:
        return  # `bash script.sh`: runs a file
    for text in stdin:
        if text is None:
            state.problem(f"the script fed to a shell is not literal in {shortened(shown)!r}")
        else:
            state.analyze_line(state, text, nesting + 1)


def _trap(state: WalkState, args: Words, nesting: int, shown: str) -> None:
    """`trap ACTION SIGNAL…`: ACTION is a command line run later."""
    if len(args) < 2:
        return
    action = args[0]
    if action is None:
        state.problem(f"the trap action is not literal in {shortened(shown)!r}")
    elif not action.startswith("-") and action:
        state.analyze_line(state, action, nesting + 1)
