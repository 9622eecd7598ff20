"""What the sandbox refused a command, read from the command's output (SBX-3).

The kernel does not tell the parent which access of a child it refused, but every program
that hits a refusal says so in a few standard ways (``cat: /x: Permission denied``,
``touch: cannot touch '/etc/x': Read-only file system``, Python's
``PermissionError: [Errno 13] Permission denied: '/x'``, ``[Errno 111] Connection refused``).
`find_denials` reads those lines, takes the paths they name, and keeps the ones the policy
explains:

- a path at or below a denied path, refused in any way (bubblewrap hides a denied folder's
  content behind an empty one, so ``No such file or directory`` counts there): a read
  (or a write, for EROFS) of a sensitive path;
- a path outside every writable folder refused with an error the mechanism gives for writes
  (bubblewrap: EROFS; Landlock: EACCES, EPERM): a write outside the write roots;
- without a network grant, a refused or unreachable connection or a failed name lookup, and
  under Landlock an ``Operation not permitted`` from ``socket``: a connection.

Anything else (a genuinely missing file, a permission the user lacks anyway) is left alone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from soong_agent.adapters.ossandbox.paths import is_within
from soong_agent.ports.ossandbox import DenialKind, Mechanism, SandboxDenial, SandboxPolicy

MAX_DENIALS = 5
"""At most this many denials are reported per command."""

_FILE_ERRORS = (
    ("Read-only file system", "EROFS"),
    ("Permission denied", "EACCES"),
    ("Operation not permitted", "EPERM"),
    ("No such file or directory", "ENOENT"),
    ("Device or resource busy", "EBUSY"),
)
_NETWORK_ERRORS = (
    ("Network is unreachable", "ENETUNREACH"),
    ("Connection refused", "ECONNREFUSED"),
    ("Couldn't connect to server", "ECONNREFUSED"),
    ("Temporary failure in name resolution", "EAI_AGAIN"),
    ("Could not resolve host", "EAI_AGAIN"),
    ("Name or service not known", "EAI_NONAME"),
    ("Address family not supported", "EAFNOSUPPORT"),
)
_WRITE_ERRORS: dict[Mechanism, frozenset[str]] = {
    "bubblewrap": frozenset({"EROFS", "EBUSY"}),
    "landlock": frozenset({"EACCES", "EPERM", "EXDEV"}),
    "none": frozenset(),
}
_QUOTED = re.compile(r"'([^'\n]+)'|\"([^\"\n]+)\"|‘([^’\n]+)’|`([^'`\n]+)'")
_BARE_PATH = re.compile(r"(?<![\w.~/-])((?:/|\./|\.\./|~/)[^\s:'\"‘’`,;)]*)")
_PROC_RULE = (
    "the /proc files of processes outside the sandbox (the agent's environment and memory) "
    "are closed to commands"
)
_WRITE_WORDS = re.compile(
    r"cannot (?:create|touch|remove|move|overwrite|make)|for writing|Errno 30", re.IGNORECASE
)
_SOCKET_HINT = re.compile(r"\bsocket\b|\bconnect\b|urlopen|requests\.|http", re.IGNORECASE)


def _candidates(line: str) -> Iterator[str]:
    """The paths a refusal line names, likeliest first: quoted ones, then the field just
    before the error (``bash: line 1: /etc/x: Read-only file system``), then other fields
    and bare paths; the first field (the program's name) is never one."""
    for match in _QUOTED.finditer(line):
        yield next(g for g in match.groups() if g)
    fields = [f.strip() for f in line.split(": ")]
    middle = [f for f in fields[1:-1] if f and " " not in f and not f.startswith("[Errno")]
    yield from reversed(middle)
    rest = line.split(": ", 1)[1] if ": " in line else ""
    yield from _BARE_PATH.findall(rest)


def _absolute(path: str, cwd: str) -> str:
    if path.startswith("~/"):
        path = os.path.expanduser(path)
    return os.path.normpath(os.path.join(cwd, path))


def find_denials(
    output: str, policy: SandboxPolicy, cwd: str, mechanism: Mechanism
) -> tuple[SandboxDenial, ...]:
    """The refusals in `output` that `policy` under `mechanism` explains (see the module)."""
    if mechanism == "none" or not output:
        return ()
    phrases = [p for p, _ in _FILE_ERRORS]
    if not policy.network:
        phrases += [p for p, _ in _NETWORK_ERRORS]
    if not any(p in output for p in phrases):
        return ()
    network_rule = (
        "no direct network: commands reach the hosts of tools.network only through the "
        "proxy the proxy variables (HTTP_PROXY, ALL_PROXY) name"
        if policy.proxied
        else "no network: the command has no network grant"
    )
    writable = policy.writable()
    write_rule = "commands may write only in " + ", ".join(writable)
    found: dict[tuple[DenialKind, str | None], SandboxDenial] = {}

    def add(kind: DenialKind, error: str, path: str | None, rule: str) -> None:
        if len(found) < MAX_DENIALS:
            found.setdefault((kind, path), SandboxDenial(kind, mechanism, error, path, rule))

    for line in output.splitlines()[-400:]:
        file_error = next((code for text, code in _FILE_ERRORS if text in line), None)
        if file_error is not None:
            matched = False
            for candidate in dict.fromkeys(_candidates(line)):
                path = _absolute(candidate, cwd)
                if any(path == e for e in policy.read_exceptions):
                    continue
                denied = next((d for d in policy.deny_paths if is_within(path, d)), None)
                if denied is not None:
                    writing = file_error in {"EROFS", "EBUSY"} or _WRITE_WORDS.search(line)
                    kind: DenialKind = "write" if writing else "read"
                    reason = policy.reason_for(denied)
                    add(kind, file_error, path, f"sensitive path, hidden from commands ({reason})")
                    matched = True
                    break
                if mechanism == "landlock" and is_within(path, "/proc") and file_error == "EACCES":
                    add("read", file_error, path, _PROC_RULE)
                    matched = True
                    break
                if file_error in _WRITE_ERRORS[mechanism] and not any(
                    is_within(path, root) for root in writable
                ):
                    add("write", file_error, path, write_rule)
                    matched = True
                    break
            if (
                not matched
                and not policy.network
                and mechanism == "landlock"
                and file_error == "EPERM"
                and _SOCKET_HINT.search(output)
            ):
                add("network", "EPERM", None, network_rule)
            continue
        if not policy.network:
            net_error = next((code for text, code in _NETWORK_ERRORS if text in line), None)
            if net_error is not None:
                add("network", net_error, None, network_rule)
    return tuple(found.values())
