"""Permission decisions of a run (PERM-1..5, PLAN-2): the gate, command review, plan mode."""
