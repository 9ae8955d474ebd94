"""The current path kept at write time: ``path_runs``, and the views read it instead of a walk.

Until now ``current_path`` was a recursive walk of every session's path, computed whole by every
query that touched it — and every view with ``on_path`` joins it, so their first page cost the
walk of the whole store (PostgreSQL cannot leave the join out even when ``on_path`` is not read).

``path_runs`` (``store.db.schema``, kept by ``store.db.current_path``) holds each session's path
as runs of consecutive rows: the closed runs ``[first_seq, last_seq]`` and the leaf's run with
``last_seq`` NULL ("through ``sessions.leaf_seq``"), so that a linear append, which only moves
the leaf along its run, writes nothing here. Keyed ``(session_pk, first_seq)``: the session key
leads, as revision 0008 requires of session data. Filled here for the stored sessions with the
same walk, in one statement.

The views keep their names and columns. ``current_path`` reads the table (the open run ends at
the session's ``leaf_seq``); ``messages``, ``usage_ledger``, ``tool_calls``, ``compactions`` and
``branches`` join ``path_runs`` directly for ``on_path`` (a row is on the path when a run of its
session starts at or before it and ends at or after it), an index lookup per row for a page and
a hash join for a whole-store aggregate.

Downgrade: the views of revisions 0003 and 0006 return and the table goes.

PostgreSQL: revision 0005's default privileges give ``pi_store_reader`` SELECT on the new table
and views.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# every session's path, as revision 0003's view walked it, with the leaf's run left open
_FILL = """
INSERT INTO path_runs (session_pk, first_seq, last_seq)
WITH RECURSIVE walk(session_pk, first_seq, last_seq) AS (
    SELECT e.session_pk, e.run_start, CAST(NULL AS INTEGER)
    FROM sessions AS s
    CROSS JOIN entries AS e
    WHERE e.session_pk = s.pk AND e.seq = s.leaf_seq AND e.run_start IS NOT NULL
  UNION ALL
    SELECT w.session_pk, p.run_start, p.seq
    FROM walk AS w
    CROSS JOIN entries AS h
    CROSS JOIN entries AS p
    WHERE h.session_pk = w.session_pk AND h.seq = w.first_seq
      AND p.session_pk = w.session_pk AND p.seq = h.parent_seq
      AND p.depth < h.depth
)
SELECT session_pk, first_seq, last_seq FROM walk
"""

CURRENT_PATH = """
CREATE VIEW current_path AS
SELECT r.session_pk, r.first_seq, coalesce(r.last_seq, s.leaf_seq) AS last_seq
FROM path_runs AS r
JOIN sessions AS s ON s.pk = r.session_pk
"""

_ON_PATH = "CASE WHEN cp.session_pk IS NULL THEN 0 ELSE 1 END AS on_path"
_PATH_JOIN = ("LEFT JOIN path_runs AS cp ON cp.session_pk = e.session_pk "
              "AND cp.first_seq <= e.seq AND e.seq <= coalesce(cp.last_seq, s.leaf_seq)")

# the views that join the path (revision 0003's and 0006's, with the join above)
_JOINING = ("messages", "usage_ledger", "tool_calls", "compactions", "branches")


def _revision(name: str):
    return context.script.get_revision(name).module


def _old_views(sqlite: bool) -> dict[str, str]:
    """``CREATE VIEW`` of each view joining the path, as revisions 0003 and 0006 left them."""
    first, pairs = _revision("0003"), _revision("0006")
    return {
        "messages": first.MESSAGES, "usage_ledger": first.USAGE_LEDGER,
        "tool_calls": pairs.TOOL_CALLS.format(arguments=pairs.SQLITE_ARGUMENTS if sqlite else pairs.PG_ARGUMENTS),
        "compactions": first.COMPACTIONS, "branches": pairs.BRANCHES,
    }


def _new_views(sqlite: bool) -> dict[str, str]:
    old_join = _revision("0003")._PATH_JOIN
    views = {}
    for name, create in _old_views(sqlite).items():
        if old_join not in create:
            raise RuntimeError(f"view {name} is not the one this revision rewrites")
        views[name] = create.replace(old_join, _PATH_JOIN)
    return views


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.create_table(
        "path_runs",
        sa.Column("session_pk", sa.Integer(), nullable=False),
        sa.Column("first_seq", sa.Integer(), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["session_pk"], ["sessions.pk"], name="fk_path_runs_session_pk_sessions",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("session_pk", "first_seq", name="pk_path_runs"),
        sqlite_with_rowid=False,
    )
    op.execute(_FILL)
    for name in (*_JOINING, "current_path"):
        op.execute(f"DROP VIEW {name}")
    op.execute(CURRENT_PATH)
    for create in _new_views(sqlite).values():
        op.execute(create)


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for name in (*_JOINING, "current_path"):
        op.execute(f"DROP VIEW {name}")
    op.execute(_revision("0003").CURRENT_PATH)
    for create in _old_views(sqlite).values():
        op.execute(create)
    op.drop_table("path_runs")
