"""Analysis: analysis columns of entries, the documented views, full-text search.

``entries`` gets the columns of ``store.analysis.extract`` (written with every row: text to
search, per-type facts as JSON — text on SQLite, ``jsonb`` on PostgreSQL — and typed usage),
never NULL, and a partial index over the usage-bearing rows from which session totals and the
models used are read without touching a payload. The views (``docs/sql.md``) mean the same on
both engines: flags are 0/1 integers, JSON columns answer ``->`` / ``->>`` on both.

No trigger runs on insert: measured on SQLite, even a trigger whose WHEN clause is false costs
every inserted row ~4% of a batched append (the trigger program is set up first), and totals
kept by trigger cost ~50k instructions per usage row (JSON parsing in SQL).

Full-text search indexes ``entries.search_text``:

* SQLite: an FTS5 table over it (external content: no second copy of the text). A per-row FTS5
  trigger costs ~70 µs per appended row (FTS5 flushes at every statement savepoint), several
  times an append, so the index is brought up to date in one statement by the first search /
  ``pi-store sql`` / ``pi-store fts sync`` after a write (``store.analysis.fts``): rows above
  ``fts_watermark.indexed_pk`` are the pending ones. Deletes and text updates of indexed rows are
  applied by triggers (they cost nothing on insert).
* PostgreSQL: a GIN index on ``pi_search_vector(search_text)``, maintained by PostgreSQL on every
  insert. The function splits on every non-alphanumeric character before the ``simple``
  configuration, as SQLite's ``unicode61`` tokenizer does (PostgreSQL's parser would otherwise
  keep ``/usr/src/a.py`` as one token).

Objects made here that the ORM models do not describe are listed in
``store.analysis.HAND_WRITTEN`` (schema comparisons skip them). Existing rows get their analysis
columns computed here (Python, batched).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from store.analysis.backfill import recompute_analysis

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

ENTRY_COLUMNS = (  # name, type, server default (the values of a row without the thing)
    ("search_text", sa.Text(), ""),
    ("facts", sa.Text().with_variant(JSONB(), "postgresql"), "{}"),
    ("provider", sa.Text(), ""), ("model", sa.Text(), ""), ("has_usage", sa.SmallInteger(), "0"),
    ("usage_input", sa.BigInteger(), "0"), ("usage_output", sa.BigInteger(), "0"),
    ("usage_cache_read", sa.BigInteger(), "0"), ("usage_cache_write", sa.BigInteger(), "0"),
    ("usage_cost", sa.Double(), "0"),
)
USAGE_INDEX = ("session_pk", "provider", "model", "usage_cost", "usage_input", "usage_output", "usage_cache_read",
               "usage_cache_write")

# ------------------------------------------------------------------------------------ views
# The root→leaf path of every session, as runs of consecutive rows (store.db.queries explains
# the walk); the other views join it for their on_path flag.
CURRENT_PATH = """
CREATE VIEW current_path AS
WITH RECURSIVE walk(session_pk, first_seq, last_seq) AS (
    SELECT e.session_pk, e.run_start, e.seq
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

_ON_PATH = "CASE WHEN cp.session_pk IS NULL THEN 0 ELSE 1 END AS on_path"
_PATH_JOIN = ("LEFT JOIN current_path AS cp ON cp.session_pk = e.session_pk "
              "AND e.seq BETWEEN cp.first_seq AND cp.last_seq")
# the plain text at the start of search_text: all of it unless facts says how long
_CHARS = "coalesce(CAST({r}.facts ->> 'textChars' AS INTEGER), length({r}.search_text))"
_TEXT = f"CASE WHEN {_CHARS.format(r='e')} > 0 THEN substr(e.search_text, 1, {_CHARS.format(r='e')}) END"
_TOKENS = "e.usage_input + e.usage_output + e.usage_cache_read + e.usage_cache_write"

MESSAGES = f"""
CREATE VIEW messages AS
SELECT s.session_id, e.entry_id, e.parent_id, e.seq, e.timestamp, e.role,
       {_TEXT} AS text, {_CHARS.format(r="e")} AS text_chars,
       NULLIF(e.provider, '') AS provider, NULLIF(e.model, '') AS model,
       e.facts ->> 'stopReason' AS stop_reason,
       e.facts ->> 'errorMessage' AS error_message,
       e.has_usage,
       e.usage_input AS input, e.usage_output AS output, e.usage_cache_read AS cache_read,
       e.usage_cache_write AS cache_write, CAST(e.facts ->> 'totalTokens' AS BIGINT) AS total_tokens,
       e.usage_cost AS cost,
       {_ON_PATH},
       CASE WHEN e.superseded THEN 1 ELSE 0 END AS superseded,
       e.session_pk
FROM entries AS e
JOIN sessions AS s ON s.pk = e.session_pk
{_PATH_JOIN}
WHERE e.kind = 'entry' AND e.type = 'message'
"""

USAGE_LEDGER = f"""
CREATE VIEW usage_ledger AS
SELECT s.session_id, e.entry_id, e.seq, e.timestamp,
       CASE WHEN e.type = 'message' THEN e.role ELSE e.type END AS source,
       e.facts ->> 'kind' AS kind,
       NULLIF(e.provider, '') AS provider, NULLIF(e.model, '') AS model,
       e.usage_input AS input, e.usage_output AS output, e.usage_cache_read AS cache_read,
       e.usage_cache_write AS cache_write, {_TOKENS} AS tokens,
       CAST(e.facts ->> 'totalTokens' AS BIGINT) AS total_tokens, e.usage_cost AS cost,
       {_ON_PATH},
       e.session_pk
FROM entries AS e
JOIN sessions AS s ON s.pk = e.session_pk
{_PATH_JOIN}
WHERE e.kind = 'entry' AND e.has_usage = 1
"""

# {calls}: one row per toolCall block (dialect-specific JSON array expansion).
TOOL_CALLS = f"""
CREATE VIEW tool_calls AS
WITH calls AS (
    {{calls}}
),
results AS (
    SELECT r.session_pk, r.seq, r.entry_id, r.facts ->> 'toolCallId' AS tool_call_id,
           r.facts ->> 'isError' AS is_error, {_CHARS.format(r="r")} AS text_chars
    FROM entries AS r
    WHERE r.kind = 'entry' AND r.type = 'message' AND r.role = 'toolResult'
),
matched AS (
    SELECT c.*, r.entry_id AS result_entry_id, r.seq AS result_seq, r.is_error, r.text_chars AS result_chars,
           row_number() OVER (PARTITION BY c.session_pk, c.seq, c.call_index ORDER BY r.seq) AS match_rank
    FROM calls AS c
    LEFT JOIN results AS r
      ON r.session_pk = c.session_pk AND r.tool_call_id = c.tool_call_id AND r.seq > c.seq
)
SELECT s.session_id, e.entry_id, e.seq, e.timestamp, e.provider, e.model, e.call_index, e.tool_call_id,
       e.name, e.arguments, e.result_entry_id, e.result_seq,
       CAST(e.is_error AS INTEGER) AS is_error, e.result_chars,
       {_ON_PATH},
       e.session_pk
FROM matched AS e
JOIN sessions AS s ON s.pk = e.session_pk
{_PATH_JOIN}
WHERE e.match_rank = 1
"""
_CALL_COLUMNS = ("e.session_pk, e.seq, e.entry_id, e.timestamp, NULLIF(e.provider, '') AS provider, "
                 "NULLIF(e.model, '') AS model")
_CALL_FIELDS = ("c.value ->> 'id' AS tool_call_id, c.value ->> 'name' AS name, "
                "c.value -> 'arguments' AS arguments")
_CALLS_WHERE = "e.kind = 'entry' AND e.type = 'message' AND e.role = 'assistant'"
SQLITE_CALLS = f"""SELECT {_CALL_COLUMNS}, c.key AS call_index, {_CALL_FIELDS}
    FROM entries AS e, json_each(e.facts, '$.toolCalls') AS c
    WHERE {_CALLS_WHERE}"""
PG_CALLS = f"""SELECT {_CALL_COLUMNS}, c.ordinality - 1 AS call_index, {_CALL_FIELDS}
    FROM entries AS e
    CROSS JOIN LATERAL jsonb_array_elements(
        CASE WHEN jsonb_typeof(e.facts -> 'toolCalls') = 'array' THEN e.facts -> 'toolCalls' ELSE '[]' END
    ) WITH ORDINALITY AS c(value, ordinality)
    WHERE {_CALLS_WHERE}"""

COMPACTIONS = f"""
CREATE VIEW compactions AS
SELECT s.session_id, e.entry_id, e.parent_id, e.seq, e.timestamp,
       {_TEXT} AS summary, {_CHARS.format(r="e")} AS summary_chars,
       e.facts ->> 'firstKeptEntryId' AS first_kept_entry_id,
       CAST(e.facts ->> 'tokensBefore' AS BIGINT) AS tokens_before,
       coalesce(CAST(e.facts ->> 'fromHook' AS INTEGER), 0) AS from_hook,
       {_TOKENS} AS tokens, e.usage_cost AS cost,
       {_ON_PATH},
       CASE WHEN e.seq = leaf.compaction_seq THEN 1 ELSE 0 END AS is_latest,
       e.session_pk
FROM entries AS e
JOIN sessions AS s ON s.pk = e.session_pk
LEFT JOIN entries AS leaf ON leaf.session_pk = s.pk AND leaf.seq = s.leaf_seq
{_PATH_JOIN}
WHERE e.kind = 'entry' AND e.type = 'compaction'
"""

BRANCHES = f"""
CREATE VIEW branches AS
WITH children AS (
    SELECT session_pk, parent_seq, count(*) AS n
    FROM entries
    WHERE kind = 'entry' AND parent_seq IS NOT NULL AND NOT superseded
    GROUP BY session_pk, parent_seq
)
SELECT s.session_id, e.entry_id, e.seq, e.timestamp, e.type, e.role, e.depth,
       CASE WHEN c.n IS NULL THEN 'leaf' ELSE 'branch_point' END AS kind,
       coalesce(c.n, 0) AS children,
       CASE WHEN e.seq = s.leaf_seq THEN 1 ELSE 0 END AS is_current_leaf,
       {_ON_PATH},
       e.session_pk
FROM entries AS e
JOIN sessions AS s ON s.pk = e.session_pk
LEFT JOIN children AS c ON c.session_pk = e.session_pk AND c.parent_seq = e.seq
{_PATH_JOIN}
WHERE e.kind = 'entry' AND NOT e.superseded AND (c.n IS NULL OR c.n > 1)
"""

LABELS = f"""
CREATE VIEW labels AS
SELECT s.session_id, e.entry_id, e.seq, e.timestamp, e.target_id,
       {_TEXT} AS label,
       CASE WHEN EXISTS (
           SELECT 1 FROM entries AS later
           WHERE later.session_pk = e.session_pk AND later.target_id = e.target_id
             AND later.type = 'label' AND later.kind = 'entry' AND later.seq > e.seq
       ) THEN 0 ELSE 1 END AS is_current,
       t.type AS target_type, t.role AS target_role,
       e.session_pk
FROM entries AS e
JOIN sessions AS s ON s.pk = e.session_pk
LEFT JOIN entries AS t
  ON t.session_pk = e.session_pk AND t.entry_id = e.target_id AND t.kind = 'entry' AND NOT t.superseded
WHERE e.kind = 'entry' AND e.type = 'label'
"""

# totals and models from ix_entries_usage alone (the columns it covers, the predicate it has)
SESSIONS_OVERVIEW = """
CREATE VIEW sessions_overview AS
SELECT s.session_id AS id, s.name, s.cwd, s.parent_session, s.created, s.created_ms,
       {modified} AS modified, s.modified_ms,
       s.entry_count, s.message_count, s.first_message, leaf.entry_id AS leaf_id,
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
LEFT JOIN (
    SELECT session_pk, sum(usage_input) AS input, sum(usage_output) AS output,
           sum(usage_cache_read) AS cache_read, sum(usage_cache_write) AS cache_write, sum(usage_cost) AS cost
    FROM entries WHERE has_usage = 1 GROUP BY session_pk
) AS u ON u.session_pk = s.pk
LEFT JOIN (
    SELECT session_pk, {models} AS models
    FROM (SELECT DISTINCT session_pk, CASE WHEN provider = '' THEN model ELSE provider || '/' || model END AS model
          FROM entries WHERE has_usage = 1 AND model <> '' ORDER BY session_pk, model) AS used
    GROUP BY session_pk
) AS m ON m.session_pk = s.pk
"""
SQLITE_OVERVIEW = SESSIONS_OVERVIEW.format(
    modified="strftime('%Y-%m-%dT%H:%M:%fZ', s.modified_ms / 1000.0, 'unixepoch')",
    models="group_concat(model, ', ')",
)
PG_OVERVIEW = SESSIONS_OVERVIEW.format(
    modified="""to_char(to_timestamp(s.modified_ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')""",
    models="""string_agg(model, ', ' ORDER BY model COLLATE "C")""",
)

VIEWS = ("sessions_overview", "labels", "branches", "compactions", "tool_calls", "usage_ledger", "messages",
         "current_path")  # in drop order


def _views(dialect: str) -> list[str]:
    sqlite = dialect == "sqlite"
    return [
        CURRENT_PATH, MESSAGES, USAGE_LEDGER,
        TOOL_CALLS.format(calls=SQLITE_CALLS if sqlite else PG_CALLS),
        COMPACTIONS, BRANCHES, LABELS,
        SQLITE_OVERVIEW if sqlite else PG_OVERVIEW,
    ]


# ---------------------------------------------------------------------------------- search
SQLITE_SEARCH = [
    # content="entries" in double quotes: the spelling Datasette looks for to offer search on entries
    """CREATE VIRTUAL TABLE entries_fts USING fts5(
    search_text, content="entries", content_rowid="pk", columnsize=0,
    tokenize="unicode61 remove_diacritics 0"
)""",
    "CREATE TABLE fts_watermark (id INTEGER PRIMARY KEY CHECK (id = 1), indexed_pk INTEGER NOT NULL)",
    "INSERT INTO fts_watermark (id, indexed_pk) VALUES (1, 0)",
    # one trigger, its steps in this order: unindex the row if it was indexed, then keep the
    # watermark at or below the highest remaining row (keys of a deleted tail are given out again)
    """CREATE TRIGGER entries_fts_delete AFTER DELETE ON entries
BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, search_text)
        SELECT 'delete', OLD.pk, OLD.search_text
        WHERE OLD.search_text <> '' AND OLD.pk <= (SELECT indexed_pk FROM fts_watermark);
    UPDATE fts_watermark SET indexed_pk = (SELECT coalesce(max(pk), 0) FROM entries)
    WHERE indexed_pk > (SELECT coalesce(max(pk), 0) FROM entries);
END""",
    """CREATE TRIGGER entries_fts_update AFTER UPDATE OF search_text ON entries
WHEN OLD.pk <= (SELECT indexed_pk FROM fts_watermark)
BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, search_text)
        SELECT 'delete', OLD.pk, OLD.search_text WHERE OLD.search_text <> '';
    INSERT INTO entries_fts (rowid, search_text) SELECT NEW.pk, NEW.search_text WHERE NEW.search_text <> '';
END""",
]
SQLITE_SEARCH_DROPS = [
    "DROP TRIGGER entries_fts_update", "DROP TRIGGER entries_fts_delete",
    "DROP TABLE fts_watermark", "DROP TABLE entries_fts",
]

# CREATE OR REPLACE: a function outlives a DROP TABLE ... CASCADE of the tables (test fixtures do that).
# Not inlined (the SET clause) and priced high, so that the planner sees what evaluating it on a
# row costs: it then reads the GIN index for rare words instead of filtering rows newest first
# (measured at 1M entries: 6 ms instead of 18 s). The index is not partial: PostgreSQL uses the
# statistics of an expression index for row estimates only when it covers the whole table.
PG_SEARCH_FUNCTION = r"""CREATE OR REPLACE FUNCTION pi_search_vector(body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT COST 5000 SET search_path = pg_catalog
AS $$ SELECT to_tsvector('simple'::regconfig, regexp_replace(body, '[^[:alnum:]]+', ' ', 'g')) $$"""
PG_SEARCH_INDEX = "CREATE INDEX ix_entries_search_vector ON entries USING gin (pi_search_vector(search_text))"
PG_SEARCH_DROPS = ["DROP INDEX ix_entries_search_vector", "DROP FUNCTION pi_search_vector(text)"]


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for name, type_, default in ENTRY_COLUMNS:
        op.add_column("entries", sa.Column(name, type_, nullable=False, server_default=default))
    op.create_index("ix_sessions_created_ms", "sessions", ["created_ms"])  # (appends never change it)
    for statement in [*(SQLITE_SEARCH if dialect == "sqlite" else [PG_SEARCH_FUNCTION]), *_views(dialect)]:
        op.execute(statement)
    # the columns of this revision, computed for the stored rows before the indexes over them
    # exist (one index build instead of an index update per row)
    recompute_analysis(op.get_bind(), [name for name, _type, _default in ENTRY_COLUMNS], tool_calls=False, usage=False)
    op.create_index("ix_entries_usage", "entries", list(USAGE_INDEX),
                    sqlite_where=sa.text("has_usage = 1"), postgresql_where=sa.text("has_usage = 1"))
    if dialect != "sqlite":
        op.execute(PG_SEARCH_INDEX)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for view in VIEWS:
        op.execute(f"DROP VIEW {view}")
    for statement in SQLITE_SEARCH_DROPS if dialect == "sqlite" else PG_SEARCH_DROPS:
        op.execute(statement)
    op.drop_index("ix_sessions_created_ms", table_name="sessions")
    op.drop_index("ix_entries_usage", table_name="entries")
    for name, _type, _default in reversed(ENTRY_COLUMNS):
        op.drop_column("entries", name)
