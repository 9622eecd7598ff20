"""The memory policy: what may be remembered, and in which category (MEM-2).

A memory is something worth knowing in a later session that cannot be found again by reading
the project: who the user is and what they prefer (``user``), how they want the work done —
corrections and guidance (``feedback``), and where to find things outside the project — URLs,
dashboards, trackers, documents (``reference``).

Never stored, each with its reason (`MemoryRejection`): file structure and directory listings
and code signatures (read the code again), current task progress (the todo list or a plan holds
it), branch or pull request names (they go stale), the details of a fix (the code and the commit
history hold them accurately) and secrets. Secrets are not left to the model's judgement: the
text goes through the runtime's `SecretRedactor`, and if that changes anything, it holds a
secret; a credential written out in words (``password is hunter22``) is refused too.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from soong_agent.domain.memory import rules
from soong_agent.domain.memory.paths import check_category, name_problem
from soong_agent.ports.memory import MEMORY_CATEGORIES, Memory, MemoryCategory, MemoryPathRefused
from soong_agent.ports.secrets import SecretRedactor

RejectionCode = Literal[
    "invalid_name",
    "category",
    "description",
    "empty",
    "too_long",
    "secret",
    "file_structure",
    "code_signature",
    "task_progress",
    "branch_or_pr",
    "fix_details",
]

MAX_DESCRIPTION_CHARS = 200
MAX_BODY_CHARS = 4_000

_MARK = re.compile(r"\[redacted:([^\]]+)\]")


@functools.cache
def _category_signs() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Signs of a ``reference`` and of a ``feedback`` memory; compiled at the first use."""
    return (
        re.compile(
            r"https?://|\bwww\.|\b(?:dashboards?|runbooks?|wiki|confluence|notion|jira|linear|"
            r"grafana|kibana|datadog|sentry|slack channel|channel|bug tracker|issue tracker|"
            r"tracked in|documented (?:at|in)|docs? (?:are|is|live|lives) (?:at|in))\b",
            re.IGNORECASE,
        ),
        re.compile(
            r"\b(?:don't|do not|never|always|avoid|stop|instead of|rather than|make sure|should|"
            r"must|please|prefers? .{1,40}? over|"
            r"(?:asked|told|wants|corrected) (?:me|us|the agent)|"
            r"(?:dislikes?|hates?|likes?) (?:it )?when)\b",
            re.IGNORECASE,
        ),
    )


@dataclass(frozen=True, slots=True)
class MemoryRejection:
    """One reason a memory is not stored."""

    code: RejectionCode
    reason: str


@dataclass(frozen=True, slots=True)
class MemoryVerdict:
    """The policy's answer for one candidate: the memory as it would be stored (trimmed, its
    category settled) and why not, if it must not be."""

    memory: Memory
    rejections: tuple[MemoryRejection, ...] = ()

    @property
    def accepted(self) -> bool:
        return not self.rejections

    @property
    def codes(self) -> list[str]:
        return [r.code for r in self.rejections]

    @property
    def reasons(self) -> list[str]:
        return [r.reason for r in self.rejections]

    def reason(self) -> str:
        """Every reason, on one line."""
        return "; ".join(self.reasons)


def categorise(text: str) -> MemoryCategory:
    """The category a memory's text fits best: ``reference`` when it points somewhere outside
    the project (a URL, a dashboard, a tracker), ``feedback`` when it says how to work (do,
    don't, always, never, instead of), else ``user`` (who the user is, what they know)."""
    reference, feedback = _category_signs()
    if reference.search(text):
        return "reference"
    if feedback.search(text):
        return "feedback"
    return "user"


class MemoryPolicy:
    """Decides what is stored: `review` a candidate, store it only if the verdict accepts it.

    `categories` are the ones kept (`memory.categories`); a candidate of another is refused.
    """

    def __init__(
        self,
        redactor: SecretRedactor,
        *,
        categories: Iterable[MemoryCategory] = MEMORY_CATEGORIES,
        max_description_chars: int = MAX_DESCRIPTION_CHARS,
        max_body_chars: int = MAX_BODY_CHARS,
    ) -> None:
        self._redactor = redactor
        self.categories: tuple[MemoryCategory, ...] = tuple(categories)
        self._max_description = max_description_chars
        self._max_body = max_body_chars

    def category_for(
        self, category: str | None, text: str
    ) -> tuple[MemoryCategory | None, MemoryRejection | None]:
        """The category a memory goes to: the one given, or `categorise`'s guess when none is;
        a rejection when it is unknown or not kept."""
        if category is None:
            guess = categorise(text)
            if guess in self.categories:
                return guess, None
            return None, self._not_kept(guess)
        try:
            known = check_category(category)
        except MemoryPathRefused as exc:
            return None, MemoryRejection("category", exc.reason)
        if known not in self.categories:
            return None, self._not_kept(known)
        return known, None

    def _not_kept(self, category: MemoryCategory) -> MemoryRejection:
        kept = ", ".join(self.categories) or "none"
        return MemoryRejection(
            "category",
            f"category {category!r} is not kept (memory.categories: {kept})",
        )

    def review(
        self, *, name: str, description: str, body: str, category: str | None = None
    ) -> MemoryVerdict:
        """The verdict on a candidate memory; every rule it breaks is one rejection."""
        description = description.strip()
        body = body.strip()
        text = f"{description}\n{body}"
        settled, problem = self.category_for(category, text)
        rejections: list[MemoryRejection] = []
        bad_name = name_problem(name)
        if bad_name is not None:
            rejections.append(MemoryRejection("invalid_name", f"name {name!r}: {bad_name}"))
        if problem is not None:
            rejections.append(problem)
        rejections += self._shape(description, body)
        rejections += self.content_rejections(f"{name}\n{text}")
        memory = Memory(
            name=name,
            description=description,
            category=settled or "user",
            body=body,
        )
        return MemoryVerdict(memory, tuple(rejections))

    def review_memory(self, memory: Memory) -> MemoryVerdict:
        """`review` of a `Memory` (its category given)."""
        verdict = self.review(
            name=memory.name,
            description=memory.description,
            body=memory.body,
            category=memory.category,
        )
        return replace(verdict, memory=replace(verdict.memory, created=memory.created))

    def _shape(self, description: str, body: str) -> list[MemoryRejection]:
        found: list[MemoryRejection] = []
        if not description:
            found.append(MemoryRejection("description", "the description is empty"))
        elif "\n" in description:
            found.append(MemoryRejection("description", "the description is not one line"))
        elif len(description) > self._max_description:
            found.append(
                MemoryRejection(
                    "description",
                    f"the description has {len(description)} characters; at most "
                    f"{self._max_description}",
                )
            )
        if not body:
            found.append(MemoryRejection("empty", "the body is empty"))
        elif len(body) > self._max_body:
            found.append(
                MemoryRejection(
                    "too_long",
                    f"the body has {len(body)} characters; at most {self._max_body}: keep one "
                    "fact per memory",
                )
            )
        return found

    def content_rejections(self, text: str) -> list[MemoryRejection]:
        """Why `text` must not be remembered (empty: it may be)."""
        found: list[MemoryRejection] = []
        secret = self.secret_kinds(text)
        if secret is not None:
            found.append(
                MemoryRejection(
                    "secret",
                    f"it holds a secret ({secret}): secrets, passwords and credentials are "
                    "never stored",
                )
            )
        checks: tuple[tuple[RejectionCode, rules.Rule, str], ...] = (
            (
                "file_structure",
                rules.file_structure,
                "it describes file structure or lists a directory ({}): that can be read "
                "again from the project",
            ),
            (
                "code_signature",
                rules.code_signature,
                "it holds a code signature ({}): signatures can be read again from the code",
            ),
            (
                "task_progress",
                rules.task_progress,
                "it records the current task's progress ({}): that belongs in the todo list "
                "or a plan",
            ),
            (
                "branch_or_pr",
                rules.branch_or_pr,
                "it names a branch or a pull request ({}): those go stale quickly",
            ),
            (
                "fix_details",
                rules.fix_details,
                "it gives the details of a fix ({}): the code and the commit history hold "
                "those accurately",
            ),
        )
        for code, rule, reason in checks:
            evidence = rule(text)
            if evidence is not None:
                found.append(MemoryRejection(code, reason.format(repr(evidence))))
        return found

    def secret_kinds(self, text: str) -> str | None:
        """What kinds of secret `text` holds, e.g. ``aws_access_key`` (None: none found)."""
        redacted = self._redactor.redact(text)
        if redacted != text:
            kinds = sorted(set(_MARK.findall(redacted)) - set(_MARK.findall(text)))
            return ", ".join(kinds) or "a secret value"
        if rules.credential_value(text):
            return "a credential written out"
        return None
