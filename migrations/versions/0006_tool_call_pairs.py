"""Tool calls paired with their results at write time; ``branches`` without a whole-table aggregate.

``tool_call_pairs`` (``store.db.schema.ToolCallPairRow``): one row per ``toolCall`` block with the
result that answers it, kept by ``store.analysis.pairs`` as rows are inserted. The ``tool_calls``
view keeps its columns (and gains ``duration_ms``) but reads this table instead of joining every
call with every later result of its session (quadratic per session: 2.8 s for the first page at
100k entries, 7 ms after). The rows of the stored sessions are paired here.

``branches`` counted the children of every row of the store (a ``GROUP BY`` over ``entries``)
before returning its first row; it now counts each row's children through the
``(session_pk, parent_id)`` index (a child's ``parent_seq`` is a row with the child's
``parent_id``), so a page costs what it returns.

PostgreSQL: revision 0005's default privileges give ``pi_store_reader`` SELECT on the new table
and views.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from store.analysis import pairs

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_ON_PATH = "CASE WHEN cp.session_pk IS NULL THEN 0 ELSE 1 END AS on_path"
_PATH_JOIN = ("LEFT JOIN current_path AS cp ON cp.session_pk = e.session_pk "
              "AND e.seq BETWEEN cp.first_seq AND cp.last_seq")

TOOL_CALLS = f"""
CREATE VIEW tool_calls AS
SELECT s.session_id, e.entry_id, e.seq, e.timestamp, NULLIF(e.provider, '') AS provider,
       NULLIF(e.model, '') AS model, p.call_index, p.tool_call_id, p.name, {{arguments}} AS arguments,
       r.entry_id AS result_entry_id, p.result_seq, p.is_error, p.result_chars, p.duration_ms,
       {_ON_PATH},
       p.session_pk
FROM tool_call_pairs AS p
JOIN entries AS e ON e.session_pk = p.session_pk AND e.seq = p.call_seq
JOIN sessions AS s ON s.pk = p.session_pk
LEFT JOIN entries AS r ON r.session_pk = p.session_pk AND r.seq = p.result_seq
{_PATH_JOIN}
"""
SQLITE_ARGUMENTS = "e.facts -> ('$.toolCalls[' || p.call_index || '].arguments')"
PG_ARGUMENTS = "e.facts -> 'toolCalls' -> p.call_index -> 'arguments'"

BRANCHES = f"""
CREATE VIEW branches AS
WITH counted AS (
    SELECT e.*, (
        SELECT count(*) FROM entries AS c
        WHERE c.session_pk = e.session_pk AND c.parent_id = e.entry_id AND c.parent_seq = e.seq
          AND c.kind = 'entry' AND NOT c.superseded
    ) AS n
    FROM entries AS e
    WHERE e.kind = 'entry' AND NOT e.superseded
)
SELECT s.session_id, e.entry_id, e.seq, e.timestamp, e.type, e.role, e.depth,
       CASE WHEN e.n = 0 THEN 'leaf' ELSE 'branch_point' END AS kind,
       e.n AS children,
       CASE WHEN e.seq = s.leaf_seq THEN 1 ELSE 0 END AS is_current_leaf,
       {_ON_PATH},
       e.session_pk
FROM counted AS e
JOIN sessions AS s ON s.pk = e.session_pk
{_PATH_JOIN}
WHERE e.n <> 1
"""


def _revision_0003():
    """Migration 0003's module: the views as it made them (for the downgrade)."""
    return context.script.get_revision("0003").module


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.create_table(
        "tool_call_pairs",
        sa.Column("session_pk", sa.Integer(), nullable=False),
        sa.Column("call_seq", sa.Integer(), nullable=False),
        sa.Column("call_index", sa.Integer(), nullable=False),
        sa.Column("tool_call_id", sa.Text(), nullable=True),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("call_ms", sa.BigInteger(), nullable=True),
        sa.Column("result_seq", sa.Integer(), nullable=True),
        sa.Column("is_error", sa.Integer(), nullable=True),
        sa.Column("result_chars", sa.Integer(), nullable=True),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["session_pk", "call_seq"], ["entries.session_pk", "entries.seq"],
                                ondelete="CASCADE", onupdate="CASCADE"),
        sa.PrimaryKeyConstraint("session_pk", "call_seq", "call_index"),
    )
    op.execute("DROP VIEW tool_calls")
    op.execute("DROP VIEW branches")
    op.execute(TOOL_CALLS.format(arguments=SQLITE_ARGUMENTS if sqlite else PG_ARGUMENTS))
    op.execute(BRANCHES)
    pairs.rebuild(op.get_bind(), paths=False)
    op.create_index("ix_tool_call_pairs_open", "tool_call_pairs", ["session_pk", "tool_call_id"],
                    sqlite_where=sa.text("result_seq IS NULL"), postgresql_where=sa.text("result_seq IS NULL"))


def downgrade() -> None:
    old = _revision_0003()
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.execute("DROP VIEW branches")
    op.execute("DROP VIEW tool_calls")
    op.execute(old.TOOL_CALLS.format(calls=old.SQLITE_CALLS if sqlite else old.PG_CALLS))
    op.execute(old.BRANCHES)
    op.drop_table("tool_call_pairs")
