"""Compaction of the active path (CTX-6), as pure functions over messages and token counts.

The application drives a ladder of rungs, each at most once, in the order of `LADDER`:

1. `micro` — old tool results (older than the recent window) become short stubs that keep the
   tool name, the arguments and the artifact id (`micro_compact`).
2. `summary` — the messages older than the recent window are summarised by the compact model
   (`select_for_summary`, `summary_problem`, `apply_summary`).
3. `micro_aggressive` — every old tool result is stubbed and the recent window is halved.
4. `slice_summary` — only the oldest slice of bounded size is summarised.
5. `hard_reset` — everything but the latest user request is replaced by one message carrying
   the carry-over set.

Invariants every function here keeps: a tool call and its result are never separated (the
units are `atomic_groups`), the original messages are never mutated (copies are returned), and
each summarising rung's output carries the `CarryOver` (latest user request, todo list / plan /
task board, files touched; the instruction chain stays in the system prompt).

The modules: `carry_over` (the carry-over set), `structure` (atomic groups, validity, the
recent window), `micro` (micro-compaction), `summaries` (selection, summary, hard reset) and
`ladder` (the rungs and the report). Every public name is re-exported here.
"""

from __future__ import annotations

from soong_agent.domain.compaction.carry_over import (
    CARRY_CLOSE,
    CARRY_OPEN,
    FILE_TOOLS,
    REQUEST_FOLLOWS,
    CarryOver,
    carry_over_missing,
    complete_carry_over,
    files_touched,
    latest_user_request,
    parse_carry_over,
    render_carry_over,
    skills_loaded,
)
from soong_agent.domain.compaction.ladder import (
    LADDER,
    CompactionLadder,
    CompactionReport,
    Outcome,
    Rung,
    next_rung,
)
from soong_agent.domain.compaction.micro import (
    STUB_PREFIX,
    MicroPlan,
    micro_compact,
    stub_text,
)
from soong_agent.domain.compaction.structure import (
    approx_tokens,
    atomic_groups,
    has_earlier_context,
    id_ranges,
    recent_window_start,
    validate_sequence,
)
from soong_agent.domain.compaction.summaries import (
    SummarySelection,
    apply_summary,
    hard_reset,
    select_for_summary,
    summary_problem,
)

__all__ = [
    "CARRY_CLOSE",
    "CARRY_OPEN",
    "FILE_TOOLS",
    "LADDER",
    "REQUEST_FOLLOWS",
    "STUB_PREFIX",
    "CarryOver",
    "CompactionLadder",
    "CompactionReport",
    "MicroPlan",
    "Outcome",
    "Rung",
    "SummarySelection",
    "apply_summary",
    "approx_tokens",
    "atomic_groups",
    "carry_over_missing",
    "complete_carry_over",
    "files_touched",
    "hard_reset",
    "has_earlier_context",
    "id_ranges",
    "latest_user_request",
    "micro_compact",
    "next_rung",
    "parse_carry_over",
    "recent_window_start",
    "render_carry_over",
    "select_for_summary",
    "skills_loaded",
    "stub_text",
    "summary_problem",
    "validate_sequence",
]
