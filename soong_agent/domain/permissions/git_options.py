"""git's option tables (SBX-1): which options take a value, print a patch or only names, which
subcommands read objects or can never be bounded, and how the subcommand is found after git's
global options. Read by `git_objects`."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

GLOBAL_VALUE_OPTIONS = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"}
)
LITERAL_PATHSPECS = frozenset({"--literal-pathspecs", "--noglob-pathspecs"})
HEX = re.compile(r"^([0-9a-fA-F]{4,64})(.*)$")
# Suffixes that make git take an object as a commit or tree, never a blob.
PEELED = re.compile(r"^(\^\{(commit|tree)\}|([~^][0-9]*)+|\^[!@]|\^-[0-9]*)$")

# Diff-family options that print file contents, and those that print only names or counts.
PATCH = frozenset(
    {
        *("-p", "-u", "--patch", "--patch-with-stat", "--patch-with-raw", "--cc", "-c"),
        *("--combined-all-paths", "--word-diff", "--color-words", "--binary", "--text", "-a"),
        *("--ext-diff", "--textconv", "--function-context", "-W", "--full-diff"),
    }
)
PATCH_PREFIXES = ("--word-diff=", "--color-words=", "-U", "--unified=", "--inter-hunk-context=")
NO_PATCH = frozenset(
    {
        *("-s", "--no-patch", "--stat", "--numstat", "--shortstat", "--name-only"),
        *("--name-status", "--raw", "--summary", "--dirstat", "--compact-summary", "--quiet"),
    }
)
NO_PATCH_PREFIXES = ("--stat=", "--dirstat=", "--stat-width=", "--stat-count=")
# Options whose value is the next word, by subcommand (a flag read as taking a value would hide
# the word after it).
LOG_VALUES = frozenset(
    {
        *("-n", "--max-count", "--skip", "-G", "-S", "-O", "--author", "--committer", "--grep"),
        *("--since", "--until", "--after", "--before", "-L", "-o", "--output-directory"),
    }
)
VALUE_OPTIONS: dict[str, frozenset[str]] = {
    "grep": frozenset(
        {
            *("-e", "-f", "-A", "-B", "-C", "--context", "--after-context", "--before-context"),
            *("--max-depth", "--threads", "-m", "--max-count"),
        }
    ),
    "archive": frozenset({"-o", "--output", "--prefix", "--remote", "--exec", "--format"}),
    "blame": frozenset({"-L", "-S", "--contents", "--ignore-rev", "--ignore-revs-file"}),
    "annotate": frozenset({"-L", "-S", "--contents", "--ignore-rev", "--ignore-revs-file"}),
    "cat-file": frozenset(),
    "stash": frozenset(),
    "ls-tree": frozenset(),
    "rev-parse": frozenset(),
}
GREP_NAMES_ONLY = frozenset(
    {
        *("-l", "-L", "-c", "-q", "--count", "--quiet", "--files-with-matches"),
        *("--files-without-match", "--name-only"),
    }
)
NEVER_BOUNDED = {
    "bundle": "git bundle packs every object of the history into one file",
    "fast-export": "git fast-export prints every object of the history",
    "pack-objects": "git pack-objects packs objects whatever file they hold",
    "unpack-file": "git unpack-file writes an object's content to a file",
    "upload-pack": "git upload-pack sends every object of the history",
    "upload-archive": "git upload-archive sends a whole tree",
}
OBJECT_READERS = frozenset(
    {
        *("show", "cat-file", "archive", "diff", "diff-tree", "difftool", "grep", "log"),
        *("whatchanged", "ls-tree", "rev-parse", "format-patch", "reflog", "range-diff"),
    }
)
CONFIG_SETTERS = frozenset(
    {
        *("--add", "--unset", "--unset-all", "--replace-all", "--rename-section"),
        *("--remove-section", "--edit", "-e"),
    }
)
CONFIG_READERS = frozenset(
    {
        *("--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l"),
        *("--get-color", "--get-colorbool"),
    }
)
CONFIG_VALUES = frozenset({"--file", "-f", "--blob", "--type", "--default", "--comment"})
CONFIG_FILES = {"--global": "~/.gitconfig", "--system": "/etc/gitconfig"}


def is_git(words: Sequence[str | None]) -> bool:
    """Whether a simple command runs git."""
    return bool(words) and words[0] is not None and posixpath.basename(words[0]) == "git"


def git_subcommand(words: Sequence[str | None]) -> tuple[int, str | None]:
    """(index of the subcommand, its name) after git's global options; the name is None when
    it is not literal or missing."""
    i = 1
    while i < len(words):
        word = words[i]
        if word is None:
            return i, None
        if word in GLOBAL_VALUE_OPTIONS:
            i += 2
            continue
        if word.startswith("-"):
            i += 1
            continue
        return i, word
    return i, None
