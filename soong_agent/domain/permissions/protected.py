"""Protected paths (PERM-4): the project's control files, which always ask outside bypass mode.

Some files are not data but code or settings that something runs later, outside any approval:
git hooks and config (``.git/``), the agent's own project folder (``.soong-agent/``), editor
settings that run tasks (``.vscode/``, ``.idea/``), CI workflows (``.github/workflows/``),
direnv's ``.envrc`` and the shell's rc files. A write to one of them asks in every permission
mode but ``bypass``, even when the mode (``accept_edits``), an allow rule or a session grant
would allow it; ``plan`` mode still denies it like every write.

`permissions.protected_paths` lists them in the syntax of `tools.sensitive_paths`: an entry
without a slash is a name matched at any depth below the project (``.git`` also protects a
nested repository's ``.git``); one with a slash, a leading ``~`` or an absolute one names a
path and everything below it (relative ones from the project); ``*`` and ``**`` glob. The
matching here is pure: the caller passes the absolute path in its lexical form and with every
symlink followed (the sandbox resolves), so a symlink to ``.git`` or named like it is caught.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from soong_agent.domain.permissions.sensitive import SensitivePaths

DEFAULT_PROTECTED_PATHS: tuple[str, ...] = (
    ".git",
    ".soong-agent",
    ".vscode",
    ".idea",
    ".github/workflows",
    ".envrc",
    "~/.bashrc",
    "~/.zshrc",
    "~/.profile",
    "~/.bash_profile",
)
"""The default `permissions.protected_paths`."""


class ProtectedPaths:
    """The compiled `permissions.protected_paths` of one project.

    Names are compared without case (a case-insensitive disk would open ``.GIT/config`` as
    ``.git/config``); `resolve` (the sandbox's symlink resolution) also protects the real path
    of a literal entry that is itself a symlink (``~/.bashrc`` into a dotfiles folder).
    """

    def __init__(
        self,
        entries: Sequence[str],
        *,
        project: str,
        home: str,
        resolve: Callable[[str], str] | None = None,
    ) -> None:
        self._paths = SensitivePaths(
            entries, project=project, home=home, resolve=resolve, fold_case=True
        )

    def __bool__(self) -> bool:
        return bool(self._paths)

    def entry_for(self, lexical: str, resolved: str | None = None) -> str | None:
        """The entry an absolute path falls under (either form), or None when it is not
        protected."""
        rule = self._paths.rule_for(lexical, resolved)
        return None if rule is None else rule.pattern.strip()


def protected_reason(shown: str, entry: str) -> str:
    """The reason given when a call touches a protected path."""
    return (
        f"{shown} is a protected path (matches {entry!r} in permissions.protected_paths): "
        "writing it asks in every mode but bypass"
    )
