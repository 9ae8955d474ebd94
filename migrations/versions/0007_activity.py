"""The ``activity`` view: one row per entry Pi's ``/session`` counts, ready to group by day, model,
cwd (``pi-store stats --by``, ``store.analysis.breakdown``).

A row is an entry of a session file (``kind = 'entry'``) that is a message or carries usage (the
rows ``store.analysis.stats`` adds up): its UTC day (the first ten characters of its ISO
``timestamp``), the session's ``cwd``, the model billed for its usage, 0/1 message counters by
role, its tool calls and their failed results (read from ``tool_call_pairs`` by primary key,
only for assistant messages), and its usage. Summing any column over any grouping gives the
totals of ``pi-store stats``.

The view has no ``on_path`` column: joining ``current_path`` (computed whole per query) would make
every query over it pay for the path walk of every session, and Pi's ``/session`` counts abandoned
branches too. It aggregates nothing, so its first page costs what it returns; a ``GROUP BY`` over
all of it reads every message row (see docs/sql.md, "What the views cost at scale").

PostgreSQL: revision 0005's default privileges give ``pi_store_reader`` SELECT on the view.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_ASSISTANT = "e.type = 'message' AND e.role = 'assistant'"

ACTIVITY = f"""
CREATE VIEW activity AS
SELECT s.session_id, e.entry_id, e.seq, e.timestamp, substr(e.timestamp, 1, 10) AS day, s.cwd,
       CASE WHEN e.type = 'message' THEN e.role ELSE e.type END AS source,
       NULLIF(e.provider, '') AS provider, NULLIF(e.model, '') AS model,
       CASE WHEN e.type = 'message' THEN 1 ELSE 0 END AS messages,
       CASE WHEN e.type = 'message' AND e.role = 'user' THEN 1 ELSE 0 END AS user_messages,
       CASE WHEN {_ASSISTANT} THEN 1 ELSE 0 END AS assistant_messages,
       CASE WHEN e.type = 'message' AND e.role = 'toolResult' THEN 1 ELSE 0 END AS tool_results,
       CASE WHEN {_ASSISTANT} THEN (
           SELECT count(*) FROM tool_call_pairs AS p WHERE p.session_pk = e.session_pk AND p.call_seq = e.seq
       ) ELSE 0 END AS tool_calls,
       CASE WHEN {_ASSISTANT} THEN (
           SELECT count(*) FROM tool_call_pairs AS p
           WHERE p.session_pk = e.session_pk AND p.call_seq = e.seq AND p.is_error = 1
       ) ELSE 0 END AS tool_errors,
       e.usage_input AS input, e.usage_output AS output, e.usage_cache_read AS cache_read,
       e.usage_cache_write AS cache_write,
       e.usage_input + e.usage_output + e.usage_cache_read + e.usage_cache_write AS tokens,
       e.usage_cost AS cost,
       e.session_pk
FROM entries AS e
JOIN sessions AS s ON s.pk = e.session_pk
WHERE e.kind = 'entry' AND (e.type = 'message' OR e.has_usage = 1)
"""


def upgrade() -> None:
    op.execute(ACTIVITY)


def downgrade() -> None:
    op.execute("DROP VIEW activity")
