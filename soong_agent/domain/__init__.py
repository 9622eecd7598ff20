"""Pure policies over the ports vocabulary: no I/O, no clock, no randomness."""
