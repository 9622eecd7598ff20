"""Noticing a stuck agent over its recent turns, and deciding how to steer it (pure logic).

A turn is summarised as a `TurnTrace`: each tool call's signature (name + normalised
arguments), a digest of what it got back, whether that was an error, and whether the turn made
no tool call at all. `StuckDetector.observe` looks at the trailing turns for:

- `repeated_call`: the same call, answered with the same result, `same_call` times in a row
  (the same `read_file` of a file that changed in between gets a different result: not stuck);
- `repeated_error`: the same error text returned `same_error` times in a row, whatever the call;
- `cycle`: an A-B-A-B… pattern of period 2 or 3, with identical results, repeated `cycle` times;
- `monologue`: `monologue` turns in a row without any tool call whose texts repeat;
- `compaction_loop`: compaction needed on `compaction` turns in a row (it frees nothing).

Each finding escalates (`Intervention`): a reminder first, then pruning of the looping span,
and once `max_interventions` is spent, the run stops with status ``stuck``. A turn that breaks
the pattern resets nothing already spent: the budget is per run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

StuckKind = Literal["repeated_call", "repeated_error", "cycle", "monologue", "compaction_loop"]
Action = Literal["reminder", "prune", "stop"]


@dataclass(frozen=True, slots=True)
class StuckSettings:
    """Thresholds (`runtime.stuck.*`); a threshold of 0 turns that check off."""

    same_call: int = 4
    same_error: int = 4
    cycle: int = 3
    monologue: int = 4
    compaction: int = 3
    max_interventions: int = 3

    @classmethod
    def off(cls) -> StuckSettings:
        """No check at all (for workloads that repeat on purpose)."""
        return cls(same_call=0, same_error=0, cycle=0, monologue=0, compaction=0)


class CallTrace(NamedTuple):
    """One tool call and what it got back, reduced to what comparisons need (a named tuple:
    one is made for every call of every turn)."""

    signature: str
    result: str
    is_error: bool
    error: str = ""
    name: str = ""
    arguments: str = ""

    @property
    def label(self) -> str:
        """`name(arguments)`, short, for messages (made only when a message needs it)."""
        return short_label(self.name, self.arguments)


@dataclass(slots=True)
class TurnTrace:
    """One model turn: its calls (empty for a text-only turn), its text digest, and whether a
    compaction was needed before it. Never changed once made (not frozen: one is made every
    turn, and a frozen dataclass costs twice as much to make)."""

    index: int
    calls: tuple[CallTrace, ...] = ()
    text: str = ""
    compacted: bool = False


@dataclass(frozen=True, slots=True)
class Finding:
    """What looks stuck, over which turns (`first`…`last`, inclusive), in one sentence."""

    kind: StuckKind
    detail: str
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class Intervention:
    """What to do about a finding, and the text the model gets."""

    action: Action
    finding: Finding
    message: str


def digest(text: str) -> str:
    """A short fingerprint of a text, stable within the process (traces are never stored).

    Its length and Python's string hash: no copy and no encoding of the text (a tool result
    may be 30 KB), and a text already used as a dict key (the recorder's scrubbing memo) has
    its hash cached. Two different texts share a fingerprint with a chance of 2**-64."""
    return f"{len(text):x}.{hash(text) & _MASK64:x}"


_MASK64 = (1 << 64) - 1


def call_signature(name: str, arguments: str) -> str:
    """`name` and its arguments with key order and whitespace normalised."""
    short = len(arguments) <= _REMEMBERED_CHARS
    if short:
        found = _SIGNATURES.get((name, arguments))
        if found is not None:
            return found
    try:
        normalised = json.dumps(
            json.loads(arguments or "{}"), sort_keys=True, separators=(",", ":")
        )
    except (ValueError, RecursionError):
        normalised = " ".join(arguments.split())
    signature = f"{name}:{normalised}"
    if short:
        if len(_SIGNATURES) >= _REMEMBERED:
            _SIGNATURES.clear()
        _SIGNATURES[(name, arguments)] = signature
    return signature


_SIGNATURES: dict[tuple[str, str], str] = {}
"""Signatures of recent short calls: a model that repeats a call (what stuck detection is about)
sends the same arguments text, normalised once. Bounded: cleared when full."""
_REMEMBERED = 256
_REMEMBERED_CHARS = 512


def short_label(name: str, arguments: str, limit: int = 80) -> str:
    text = f"{name}({' '.join((arguments or '').split())})"
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(slots=True)
class StuckDetector:
    """Watches one run's turns; `observe` returns what to do when it looks stuck."""

    settings: StuckSettings = field(default_factory=StuckSettings)
    turns: list[TurnTrace] = field(default_factory=list)
    spent: int = 0
    _last_finding_end: int = -1

    def observe(self, turn: TurnTrace) -> Intervention | None:
        """Record `turn`; an intervention when the trailing turns look stuck (each looping
        span is acted on once: the next finding needs new turns after it)."""
        self.turns.append(turn)
        if len(self.turns) > 64:
            del self.turns[:-64]
        finding = self._find()
        if finding is None or finding.first <= self._last_finding_end:
            return None
        self._last_finding_end = finding.last
        self.spent += 1
        if self.spent > self.settings.max_interventions:
            action: Action = "stop"
        elif self.spent == 1:
            action = "reminder"
        else:
            action = "prune"
        return Intervention(action, finding, _message(action, finding))

    # --- the checks ------------------------------------------------------------------------
    def _find(self) -> Finding | None:
        """The first of the checks (in this order: repeated call, repeated error, cycle,
        monologue, compaction loop) that finds something; each runs only when the last turn
        can end such a span (one call; an error; no call; a compaction)."""
        s = self.settings
        last = self.turns[-1]
        calls = last.calls
        single = len(calls) == 1
        found = self._repeated_call(s.same_call) if single else None
        if found is None and calls and calls[0].is_error:
            found = self._repeated_error(s.same_error)
        if found is None:
            if single:
                found = self._cycle(s.cycle)
            elif not calls:
                found = self._monologue(s.monologue)
        if found is None and last.compacted:
            found = self._compaction_loop(s.compaction)
        return found

    # Each check first looks at the last turn(s), where a run that makes progress differs, and
    # builds its finding only when the whole tail matches.

    def _repeated_call(self, count: int) -> Finding | None:
        turns = self.turns
        if count <= 0 or len(turns) < count:
            return None
        last = turns[-1].calls
        if len(last) != 1:
            return None
        signature, result = last[0].signature, last[0].result
        for back in range(2, count + 1):
            calls = turns[-back].calls
            if len(calls) != 1 or calls[0].result != result or calls[0].signature != signature:
                return None
        first = turns[-count]
        return Finding(
            "repeated_call",
            f"{first.calls[0].label} was called {count} times in a row and returned the same "
            "result each time",
            first.index,
            turns[-1].index,
        )

    def _repeated_error(self, count: int) -> Finding | None:
        turns = self.turns
        if count <= 0 or len(turns) < count:
            return None
        error: str | None = None
        for back in range(1, count + 1):
            calls = turns[-back].calls
            if not calls:
                return None
            for call in calls:
                if not call.is_error:
                    return None
                if error is None:
                    error = call.error
                elif call.error != error:
                    return None
        return Finding(
            "repeated_error",
            f"the same error came back {count} times in a row: {error}",
            turns[-count].index,
            turns[-1].index,
        )

    def _cycle(self, repeats: int) -> Finding | None:
        if repeats <= 0:
            return None
        turns = self.turns
        for period in (2, 3):
            span = period * repeats
            if len(turns) < span:
                continue
            # periodic: each of the trailing `span` turns is one call, the same (call and
            # result) as the turn `period` before it
            for back in range(1, span - period + 1):
                now, before = turns[-back].calls, turns[-back - period].calls
                if (
                    len(now) != 1
                    or len(before) != 1
                    or now[0].result != before[0].result
                    or now[0].signature != before[0].signature
                ):
                    break
            else:
                tail = turns[-span:]
                pattern = {(t.calls[0].signature, t.calls[0].result) for t in tail[:period]}
                if len(pattern) < 2:
                    continue  # one call repeated: that is `repeated_call`
                labels = " → ".join(t.calls[0].label for t in tail[:period])
                return Finding(
                    "cycle",
                    f"the calls {labels} repeated {repeats} times with the same results",
                    tail[0].index,
                    tail[-1].index,
                )
        return None

    def _monologue(self, count: int) -> Finding | None:
        turns = self.turns
        if count <= 0 or len(turns) < count or turns[-1].calls:
            return None
        tail = turns[-count:]
        if any(t.calls for t in tail):
            return None
        if len({t.text for t in tail}) > max(1, count // 2):
            return None  # the text moves on: it is writing, not looping
        return Finding(
            "monologue",
            f"{count} answers in a row without a tool call repeat themselves",
            tail[0].index,
            tail[-1].index,
        )

    def _compaction_loop(self, count: int) -> Finding | None:
        turns = self.turns
        if count <= 0 or len(turns) < count or not turns[-1].compacted:
            return None
        tail = turns[-count:]
        if not all(t.compacted for t in tail):
            return None
        return Finding(
            "compaction_loop",
            f"the context needed compacting before each of the last {count} model calls; "
            "compaction frees nothing",
            tail[0].index,
            tail[-1].index,
        )


def _message(action: Action, finding: Finding) -> str:
    if action == "reminder":
        return (
            "[soong-agent: you seem to be stuck] "
            f"{finding.detail}. Repeating it will not give a different result. Look at what "
            "you already got back, then change your approach: try a different tool or "
            "arguments, read the error carefully, or explain to the user what blocks you."
        )
    if action == "prune":
        return (
            "[soong-agent: a loop was removed from the context] "
            f"{finding.detail}; those turns were taken out of the conversation (they stay in the "
            "session's record). Do not try the same thing again: choose another approach, or "
            "stop and tell the user what blocks you."
        )
    return f"stopped: the agent was stuck ({finding.detail})"


def loop_summary(finding: Finding, labels: Sequence[str]) -> str:
    """The one paragraph that stands for a pruned span in the context."""
    tried = ", ".join(dict.fromkeys(labels)) or "the same step"
    return (
        f"[soong-agent: {finding.last - finding.first + 1} turns were pruned from the context "
        f"because they repeated themselves. What was tried: {tried}. {finding.detail}.]"
    )
