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
a hash join for a whole-store aggregate. (A correlated ``EXISTS`` instead of the join was
measured too: on PostgreSQL queries that do not read ``on_path`` got ~20 % faster, those that
filter on it 1.4–2.8x slower.)

So that every view's first page costs what it returns, three more views change their text, not
their rows: ``sessions_overview`` totals each session it returns instead of grouping every usage
row of the store first, and ``labels`` / ``compactions`` also say ``type <> 'message'``, which
lets SQLite read them from the partial ``(session_pk, type, seq)`` index instead of scanning
``entries``.

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
_PATH_JOIN = (
    "LEFT JOIN path_runs AS cp ON cp.session_pk = e.session_pk "
    "AND cp.first_seq <= e.seq AND e.seq <= coalesce(cp.last_seq, s.leaf_seq)"
)

# Changes to the other views' text, each (old, new) found exactly once. Labels and compactions say
# ``type <> 'message'`` too: SQLite then reads them from the partial (session_pk, type, seq)
# index instead of scanning every row of ``entries`` for them (a later label of the same target
# as well); on a page of 100 that is the difference between reading the store and reading 100 rows.
_LABEL_EDITS = (
    (
        "AND later.type = 'label' AND later.kind = 'entry'",
        "AND later.type = 'label' AND later.type <> 'message' AND later.kind = 'entry'",
    ),
    (
        "WHERE e.kind = 'entry' AND e.type = 'label'",
        "WHERE e.kind = 'entry' AND e.type = 'label' AND e.type <> 'message'",
    ),
)
_COMPACTION_EDITS = (
    (
        "WHERE e.kind = 'entry' AND e.type = 'compaction'",
        "WHERE e.kind = 'entry' AND e.type = 'compaction' AND e.type <> 'message'",
    ),
)

# Totals and models per session, computed for the sessions a query reads (revision 0003 grouped
# every usage row of the store first, whatever the page): correlated subqueries on SQLite (which
# has no LATERAL; an unread column costs nothing), LATERAL subqueries on PostgreSQL. Both read
# ix_entries_usage only.
_SQLITE_TOTAL = "coalesce((SELECT sum(u.{column}) FROM entries AS u WHERE u.session_pk = s.pk AND u.has_usage = 1), 0)"
SQLITE_OVERVIEW = f"""
CREATE VIEW sessions_overview AS
SELECT s.session_id AS id, s.name, s.cwd, s.parent_session, s.created, s.created_ms,
       strftime('%Y-%m-%dT%H:%M:%fZ', s.modified_ms / 1000.0, 'unixepoch') AS modified, s.modified_ms,
       s.entry_count, s.message_count, s.first_message,
       (SELECT leaf.entry_id FROM entries AS leaf WHERE leaf.session_pk = s.pk AND leaf.seq = s.leaf_seq) AS leaf_id,
       (SELECT group_concat(model, ', ') FROM (
            SELECT DISTINCT CASE WHEN u.provider = '' THEN u.model ELSE u.provider || '/' || u.model END AS model
            FROM entries AS u WHERE u.session_pk = s.pk AND u.has_usage = 1 AND u.model <> '' ORDER BY 1)) AS models,
       {_SQLITE_TOTAL.format(column="usage_input")} AS input,
       {_SQLITE_TOTAL.format(column="usage_output")} AS output,
       {_SQLITE_TOTAL.format(column="usage_cache_read")} AS cache_read,
       {_SQLITE_TOTAL.format(column="usage_cache_write")} AS cache_write,
       {_SQLITE_TOTAL.format(column="usage_input + u.usage_output + u.usage_cache_read + u.usage_cache_write")}
           AS tokens,
       {_SQLITE_TOTAL.format(column="usage_cost")} AS cost,
       CASE WHEN s.pi_valid THEN 1 ELSE 0 END AS pi_valid,
       s.source_path,
       s.pk AS session_pk
FROM sessions AS s
"""
PG_OVERVIEW = """
CREATE VIEW sessions_overview AS
SELECT s.session_id AS id, s.name, s.cwd, s.parent_session, s.created, s.created_ms,
       to_char(to_timestamp(s.modified_ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS modified,
       s.modified_ms, s.entry_count, s.message_count, s.first_message, leaf.entry_id AS leaf_id,
       m.models,
       coalesce(u.input, 0) AS input, coalesce(u.output, 0) AS output,
       coalesce(u.cache_read, 0) AS cache_read, coalesce(u.cache_write, 0) AS cache_write,
       coalesce(u.input + u.output + u.cache_read + u.cache_write, 0) AS tokens,
       coalesce(u.cost, 0) AS cost,
       CASE WHEN s.pi_valid THEN 1 ELSE 0 END AS pi_valid,
       s.source_path,
       s.pk AS session_pk
FROM sessions AS s
LEFT JOIN entries AS leaf ON leaf.session_pk = s.pk AND leaf.seq = s.leaf_seq
LEFT JOIN LATERAL (
    SELECT sum(usage_input) AS input, sum(usage_output) AS output, sum(usage_cache_read) AS cache_read,
           sum(usage_cache_write) AS cache_write, sum(usage_cost) AS cost
    FROM entries WHERE session_pk = s.pk AND has_usage = 1
) AS u ON true
LEFT JOIN LATERAL (
    SELECT string_agg(model, ', ' ORDER BY model COLLATE "C") AS models
    FROM (SELECT DISTINCT CASE WHEN provider = '' THEN model ELSE provider || '/' || model END AS model
          FROM entries WHERE session_pk = s.pk AND has_usage = 1 AND model <> '') AS used
) AS m ON true
"""

# the views this revision replaces, in drop order (current_path last: the others join it)
_REPLACED = (
    "sessions_overview",
    "labels",
    "messages",
    "usage_ledger",
    "tool_calls",
    "compactions",
    "branches",
    "current_path",
)


def _revision(name: str):
    return context.script.get_revision(name).module


def _edited(create: str, edits: tuple[tuple[str, str], ...]) -> str:
    for old, new in edits:
        if create.count(old) != 1:
            raise RuntimeError(f"a view is not the one this revision rewrites: {old!r} in {create}")
        create = create.replace(old, new)
    return create


def _old_views(sqlite: bool) -> dict[str, str]:
    """``CREATE VIEW`` of each replaced view, as revisions 0003 and 0006 left them."""
    first, pairs = _revision("0003"), _revision("0006")
    return {
        "current_path": first.CURRENT_PATH,
        "messages": first.MESSAGES,
        "usage_ledger": first.USAGE_LEDGER,
        "tool_calls": pairs.TOOL_CALLS.format(arguments=pairs.SQLITE_ARGUMENTS if sqlite else pairs.PG_ARGUMENTS),
        "compactions": first.COMPACTIONS,
        "branches": pairs.BRANCHES,
        "labels": first.LABELS,
        "sessions_overview": first.SQLITE_OVERVIEW if sqlite else first.PG_OVERVIEW,
    }


def _new_views(sqlite: bool) -> dict[str, str]:
    old = _old_views(sqlite)
    path = ((_revision("0003")._PATH_JOIN, _PATH_JOIN),)
    return {
        "current_path": CURRENT_PATH,
        "messages": _edited(old["messages"], path),
        "usage_ledger": _edited(old["usage_ledger"], path),
        "tool_calls": _edited(old["tool_calls"], path),
        "branches": _edited(old["branches"], path),
        "compactions": _edited(old["compactions"], path + _COMPACTION_EDITS),
        "labels": _edited(old["labels"], _LABEL_EDITS),
        "sessions_overview": SQLITE_OVERVIEW if sqlite else PG_OVERVIEW,
    }


def _replace_views(views: dict[str, str]) -> None:
    for name in _REPLACED:
        op.execute(f"DROP VIEW {name}")
    for name in reversed(_REPLACED):
        op.execute(views[name])


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.create_table(
        "path_runs",
        sa.Column("session_pk", sa.Integer(), nullable=False),
        sa.Column("first_seq", sa.Integer(), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_pk"], ["sessions.pk"], name="fk_path_runs_session_pk_sessions", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("session_pk", "first_seq", name="pk_path_runs"),
        sqlite_with_rowid=False,
    )
    op.execute(_FILL)
    _replace_views(_new_views(sqlite))


def downgrade() -> None:
    _replace_views(_old_views(op.get_bind().dialect.name == "sqlite"))
    op.drop_table("path_runs")
