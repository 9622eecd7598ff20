"""The tables of `PostgresMailbox` (schema step 4) and the channel its deliveries notify.

An inbox is a row of `inboxes`, the row its writers lock, and its lines in `inbox_lines` (see
`line_logs`): each a mail or a read mark, as the file mailbox writes them, numbered ``seq`` in
the inbox in the transaction that writes it (a mail's own number is in its JSON).

A send notifies the team's channel (`channel`) with the recipient's name, when its transaction
commits: a process waiting for that member's mail (LISTEN) wakes at once.
"""

from __future__ import annotations

import hashlib

from soong_agent.adapters.postgres.ddl import Step
from soong_agent.adapters.postgres.line_logs import LineTables

TABLES = LineTables("inboxes", "inbox_lines", ("team", "member"))

STEPS = (Step(4, "team inboxes: mails and read marks", TABLES.create()),)

CHANNEL_PREFIX = "soong_agent_mail_"
NOTIFY = "SELECT pg_notify(%s, %s)"


def channel(team: str) -> str:
    """The team's notification channel: a fixed prefix and a digest of the team's name (a
    channel name holds at most 63 bytes; a team name up to 128 characters)."""
    return CHANNEL_PREFIX + hashlib.sha256(team.encode("utf-8")).hexdigest()[:32]
