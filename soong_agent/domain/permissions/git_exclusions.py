"""The pathspecs that keep sensitive files out of a git command's output (SBX-1), and which of
them a command still lacks."""

from __future__ import annotations

from collections.abc import Sequence

from soong_agent.domain.permissions.sensitive import SensitiveRule
from soong_agent.domain.permissions.targets import is_within, relative_parts


def exclusions(rules: Sequence[SensitiveRule], project: str) -> tuple[str, ...]:
    """The pathspecs that keep every sensitive file of the project out of a git command's
    output, anchored at the top of the repository (taken to be the project)."""
    out: list[str] = []
    for rule in rules:
        if rule.name_glob is not None:
            name = rule.pattern.strip()
            out += [f":(exclude,top,glob)**/{name}", f":(exclude,top,glob)**/{name}/**"]
            continue
        for prefix in rule.prefixes:
            if is_within(prefix, project) and prefix != project:
                out.append(":(exclude,top,literal)" + "/".join(relative_parts(prefix, project)))
        if not rule.prefixes and rule.paths is not None:  # a path entry with a glob
            absolute = "/" + rule.paths.pattern.removesuffix("/**")
            top = project.rstrip("/") + "/"
            if absolute.startswith(top):
                rel = absolute[len(top) :]
                out += [f":(exclude,top,glob){rel}", f":(exclude,top,glob){rel}/**"]
    return tuple(dict.fromkeys(out))


def _magic(word: str) -> tuple[frozenset[str], str]:
    if word.startswith((":!", ":^")):
        return frozenset({"exclude"}), word[2:]
    close = word.find(")")
    names = frozenset(m.strip() for m in word[2:close].split(","))
    return names, word[close + 1 :]


def missing_exclusions(required: Sequence[str], given: Sequence[str]) -> list[str]:
    """The required exclusion pathspecs that `given` does not hold (magic in any order; a
    literal exclusion of a folder also covers the literal paths below it)."""
    have = [_magic(word) for word in given]
    missing: list[str] = []
    for want in required:
        names, pattern = _magic(want)
        if any(n == names and p == pattern for n, p in have):
            continue
        if "literal" in names and any(
            {"exclude", "top", "literal"} <= n
            and (pattern == p or pattern.startswith(p.rstrip("/") + "/"))
            for n, p in have
        ):
            continue
        missing.append(want)
    return missing
