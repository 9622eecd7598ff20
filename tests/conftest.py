"""Settings for the whole suite."""

from __future__ import annotations

import os

# every run event the runtime makes without validating it is validated too, and must come out
# the same (see soong_agent.application.runs.event_factory): a call site that passes a value of the
# wrong type fails its test instead of reaching a session store
os.environ.setdefault("SOONG_AGENT_CHECK_EVENTS", "1")

# a real PostgreSQL (tests/support/postgres.py): `postgres_server`, `postgres_url`
from tests.support.postgres import postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]
