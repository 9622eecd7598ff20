"""The context window of a run (CTX-4..6, PROMPT-2): budget, fitting, compaction, instructions."""
