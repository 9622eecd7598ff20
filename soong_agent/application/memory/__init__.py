"""The memory jobs: recall before a run (MEM-4), extraction after it (MEM-3), consolidation
now and then. Each module is imported where it is used (nothing here), so a run without
memories loads none of them."""
