"""The policy's decision: one ordered type, ``allow < ask < deny``; the strictest wins.

Like codex's execpolicy, when several rules (or several simple commands of one command line)
give a verdict, the strictest one decides: a deny beats an ask, an ask beats an allow. The
user's answer to an ask is the approval port's `Decision` (``allow_once``, ``allow_for_session``,
``deny``); `policy.without_approver` gives it when nobody can be asked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, assert_never

Outcome = Literal["allow", "ask", "deny"]
"""What the policy says before anyone is asked, ordered by `rank`: allow < ask < deny."""

PermissionMode = Literal["default", "accept_edits", "plan", "bypass"]
"""`permissions.mode` (and the SDK's `permission_mode`)."""

DecidedBy = Literal["rule", "mode", "grant", "readonly_default", "policy"]


def rank(outcome: Outcome) -> int:
    """How strict `outcome` is: allow 0, ask 1, deny 2."""
    match outcome:
        case "allow":
            return 0
        case "ask":
            return 1
        case "deny":
            return 2
        case _:
            assert_never(outcome)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the policy says before asking anyone, and why.

    `reason` names what decided: the rule (``deny rule "run_command(prefix:rm)" …``), the mode
    (``mode plan is read-only …``), the grant (``allowed for this session: …``) or
    ``permissions.readonly_default``. `decided_by` says which of those it was; `rule` is the
    deciding rule's text when one rule decided.
    """

    outcome: Outcome
    reason: str
    decided_by: DecidedBy = "policy"
    rule: str | None = None

    @property
    def rank(self) -> int:
        """The strictness of the outcome (see `rank`)."""
        return rank(self.outcome)


def strictest(verdicts: Iterable[Verdict]) -> Verdict | None:
    """The strictest of `verdicts` (the first of them on a tie); None when there are none."""
    chosen: Verdict | None = None
    for verdict in verdicts:
        if chosen is None or verdict.rank > chosen.rank:
            chosen = verdict
    return chosen


_MODE_RANK: dict[str, int] = {"bypass": 0, "accept_edits": 1, "default": 2, "plan": 3}
"""How strict each permission mode is: bypass < accept_edits < default < plan."""


def strictest_mode(first: PermissionMode, *others: PermissionMode | None) -> PermissionMode:
    """The strictest of the modes given (None: no say): what a run is held to when its
    configuration, its agent definition and the run that started it each set a mode. A run
    may tighten what binds it, never loosen it."""
    chosen = first
    for mode in others:
        if mode is not None and _MODE_RANK[mode] > _MODE_RANK[chosen]:
            chosen = mode
    return chosen
