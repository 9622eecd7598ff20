"""The tables of `PostgresArtifactStore` (schema step 2) and the SQL it runs.

An artifact's metadata is one row of `artifacts`; its bytes are rows of `artifact_chunks` of
`CHUNK_BYTES` each (the last one shorter), so any host reading the database reads the bytes,
and a read of a few bytes of a large artifact fetches only the chunks it covers (each cut on
the server). There is no reference to `sessions`: a tool's output may be stored before the turn
that creates its session is committed.
"""

from __future__ import annotations

from soong_agent.adapters.postgres.ddl import SCHEMA, Step

S = SCHEMA
CHUNK_BYTES = 256 * 1024

STEPS = (
    Step(
        2,
        "artifacts and their content",
        (
            f"""CREATE TABLE {S}.artifacts (
                id text PRIMARY KEY,
                session_id text NOT NULL,
                run_id text,
                filename text NOT NULL,
                size bigint NOT NULL,
                sha256 text NOT NULL,
                preview text NOT NULL DEFAULT '',
                created_at double precision NOT NULL
            )""",
            f"CREATE INDEX artifacts_session ON {S}.artifacts (session_id)",
            f"""CREATE TABLE {S}.artifact_chunks (
                artifact_id text NOT NULL REFERENCES {S}.artifacts (id) ON DELETE CASCADE,
                n integer NOT NULL,
                data bytea NOT NULL,
                PRIMARY KEY (artifact_id, n)
            )""",
        ),
    ),
)

INSERT_ARTIFACT = (
    f"INSERT INTO {S}.artifacts (id, session_id, run_id, filename, size, sha256, preview,"
    " created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)
INSERT_NEW_ARTIFACT = INSERT_ARTIFACT + " ON CONFLICT (id) DO NOTHING RETURNING 1"
INSERT_CHUNK = f"INSERT INTO {S}.artifact_chunks (artifact_id, n, data) VALUES (%s, %s, %s)"
GET_ARTIFACT = (
    f"SELECT id, session_id, filename, size, sha256, preview FROM {S}.artifacts"
    " WHERE id = %s AND session_id = %s"
)
READ_RANGE = f"""
SELECT substring(c.data FROM greatest(%(start)s - c.n::bigint * %(chunk)s, 0)::int + 1
                 FOR (least(%(end)s - c.n::bigint * %(chunk)s, %(chunk)s)
                      - greatest(%(start)s - c.n::bigint * %(chunk)s, 0))::int)
FROM {S}.artifact_chunks AS c
WHERE c.artifact_id = %(aid)s AND c.n BETWEEN %(first)s AND %(last)s
ORDER BY c.n
"""
"""Bytes `start … end` of an artifact: from each chunk it covers, the part inside the range."""
