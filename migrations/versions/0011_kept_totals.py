"""Totals kept at write time for the documented queries that read every usage row or tool call.

Issue 11, item 2. At a million entries, docs/sql.md's queries 1, 3, 5, 6, 7 and 9 read something of
every usage row, message or tool call that no index holds (a row's ``timestamp``, a message's
stop reason, a call's arguments, parsed from ``facts``; whether a message is on the path): about a
second on a quiet machine, several on a busy one, on either engine. This revision keeps what they
need as rows are written:

* ``usage_days``: usage totals per session, day, provider and model (filled here from the stored
  rows; revision 0012 makes it a view of ``activity_days``). Cost per model per day and the cache hit rate read it.
* ``tool_call_pairs.path``: the call's ``path`` argument when it is a string (kept by
  ``store.analysis.pairs``; filled here from ``facts``). What files an agent touched reads it.
* ``sessions.off_path_messages`` / ``off_path_cost``: the message rows off the current path and
  their cost (kept by ``store.db.current_path`` whenever the path changes; counted here). Work left
  on abandoned branches reads them.
* ``path_turns``: the turns of each session's current path (a user message and what follows it):
  steps, output tokens and cost (kept by ``store.db.current_path``: counted when the path changes,
  added to by linear appends; counted here). The longest turns reads it.
* ``ix_entries_model_errors``: a partial index on the messages whose stop reason is ``error`` (a
  few rows), which both engines use for ``entries WHERE type = 'message' AND facts ->> 'stopReason'
  = 'error'`` (SQLite not through the ``messages`` view: its planner does not match the view's
  expression to the index).

The views are unchanged; docs/sql.md's queries read the new columns and table. Downgrade drops
them.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from store.db import current_path
from store.db.writes import bindable_total, dbapi_sql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_SQLITE_PATH = """UPDATE tool_call_pairs SET path = (
    SELECT json_extract(e.facts, '$.toolCalls[' || tool_call_pairs.call_index || '].arguments.path')
    FROM entries AS e
    WHERE e.session_pk = tool_call_pairs.session_pk AND e.seq = tool_call_pairs.call_seq
      AND json_type(e.facts, '$.toolCalls[' || tool_call_pairs.call_index || '].arguments.path') = 'text'
)"""
_PG_PATH = """UPDATE tool_call_pairs AS p SET path = e.facts -> 'toolCalls' -> p.call_index -> 'arguments' ->> 'path'
FROM entries AS e
WHERE e.session_pk = p.session_pk AND e.seq = p.call_seq
  AND jsonb_typeof(e.facts -> 'toolCalls' -> p.call_index -> 'arguments' -> 'path') = 'string'"""
_USAGE_ROWS = ("SELECT session_pk, timestamp, provider, model, usage_input, usage_output, usage_cache_read, "
               "usage_cache_write, usage_cost FROM entries WHERE kind = 'entry' AND has_usage = 1")
MODEL_ERRORS = "type = 'message' AND facts ->> 'stopReason' = 'error'"


def _session_key(table: str) -> sa.Column:
    """The table's ``session_pk``: the first column of its key, deleted with its session."""
    return sa.Column("session_pk", sa.Integer, sa.ForeignKey("sessions.pk", ondelete="CASCADE",
                                                             name=f"fk_{table}_session_pk_sessions"), primary_key=True)


def upgrade() -> None:
    conn = op.get_bind()
    tokens = sa.BigInteger().with_variant(sa.Numeric(), "postgresql")
    op.create_table(
        "usage_days",
        _session_key("usage_days"),
        sa.Column("day", sa.Text, primary_key=True),
        sa.Column("provider", sa.Text, primary_key=True),
        sa.Column("model", sa.Text, primary_key=True),
        sa.Column("calls", sa.BigInteger, nullable=False),
        *(sa.Column(name, tokens, nullable=False) for name in ("input", "output", "cache_read", "cache_write")),
        sa.Column("cost", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("session_pk", "day", "provider", "model", name="pk_usage_days"),
        sqlite_with_rowid=False,
    )
    _fill_usage_days(conn)
    op.create_table(
        "path_turns",
        _session_key("path_turns"),
        sa.Column("turn", sa.Integer, primary_key=True),
        sa.Column("prompt_seq", sa.Integer),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("output_tokens", tokens, nullable=False),
        sa.Column("cost", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("session_pk", "turn", name="pk_path_turns"),
        sqlite_with_rowid=False,
    )
    op.add_column("tool_call_pairs", sa.Column("path", sa.Text))
    op.execute(_SQLITE_PATH if conn.dialect.name == "sqlite" else _PG_PATH)
    op.add_column("sessions", sa.Column("off_path_messages", sa.Integer, nullable=False, server_default="0"))
    op.add_column("sessions", sa.Column("off_path_cost", sa.Double, nullable=False, server_default="0"))
    current_path.refresh_all(conn)
    op.create_index("ix_entries_model_errors", "entries", ["session_pk"], sqlite_where=sa.text(MODEL_ERRORS),
                    postgresql_where=sa.text(MODEL_ERRORS))


def _fill_usage_days(conn: sa.Connection) -> None:
    """The usage rows added up per key, in Python: SQLite's ``sum()`` of integers fails past
    BIGINT's range, where a few crafted rows can take it."""
    totals: dict[tuple, list] = {}
    for spk, timestamp, provider, model, *amounts in conn.exec_driver_sql(_USAGE_ROWS):
        key = (spk, (timestamp or "")[:10], provider, model)
        if (kept := totals.get(key)) is None:
            totals[key] = [1, *amounts]
        else:
            kept[0] += 1
            for i, amount in enumerate(amounts, 1):
                kept[i] += amount
    if totals:
        sql = ("INSERT INTO usage_days (session_pk, day, provider, model, calls, input, output, cache_read, "
               "cache_write, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        conn.exec_driver_sql(dbapi_sql(conn.dialect, sql),
                             [(*key, *(bindable_total(conn.dialect, v) for v in kept)) for key, kept in totals.items()])


def downgrade() -> None:
    op.drop_index("ix_entries_model_errors", "entries")
    op.drop_column("sessions", "off_path_cost")
    op.drop_column("sessions", "off_path_messages")
    op.drop_table("path_turns")
    op.drop_column("tool_call_pairs", "path")
    op.drop_table("usage_days")
