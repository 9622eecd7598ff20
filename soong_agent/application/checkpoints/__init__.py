"""Checkpoints and rewind (RWD-1): what each user turn changed, kept before it changed it
(`keeper`), read back as a session's history (`history`), and put back (`rewind`)."""
