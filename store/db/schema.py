"""The relational schema: one row per session, one row per physical JSONL line.

Every line of a session file is a row of ``entries`` in file order (``seq``, 0-based), whatever it
holds: the header, an entry, a line Pi would skip. ``line`` is the text Pi interprets (the v3 form
after migration); ``raw`` keeps the original bytes only when they differ from ``line`` encoded as
UTF-8, so export is byte-identical without storing most lines twice.

Columns derived at append time (so that reads cost what they return, not what the session holds):

``parent_seq``
    the row Pi's parent walk reaches from this row (``byId`` semantics: the *last* row carrying the
    parent id), ``NULL`` when the walk stops (``parentId`` null/empty/missing, or a parent cycle,
    which we cut at its earliest row in file order).
``depth``
    number of steps from this row to the root of its walk; strictly decreasing along ``parent_seq``,
    which makes every walk terminate.
``run_start``
    the first row of the run of consecutive rows that ends here, each row's parent being the row
    just before it. A linear history is one run, so the root→leaf walk in ``queries.path_runs``
    takes one recursive step per branch point instead of one per entry.
``compaction_seq`` / ``thinking_seq`` / ``model_seq``
    the latest compaction / thinking-level change / model source (model change or assistant
    message) on the path ending at this row, inclusive; the context services read these instead
    of walking the whole path.
``superseded``
    a later row carries the same entry id (Pi's lookups see only the last one).

The analysis columns (``search_text`` ... ``usage_cost``) are computed from the parsed entry at
write time by ``store.analysis.extract`` (see there); migration 0003 adds them with the views and
the full-text index (``docs/sql.md``). On SQLite, migration 0010 keeps long texts in ``line`` alone
(``search_text`` emptied when the index catches up, ``facts.textAt`` says where the text is).

The tables are SQLAlchemy Core ``Table`` objects (nothing maps rows to classes), so reading a
store does not import the ORM.

Shard keys (migration 0008, docs/design.md "Distributing on Citus"): every primary key and unique
constraint of session data includes the session key (``sessions.pk``, ``session_pk`` elsewhere),
so the tables can be distributed on it. The global names that lead to a session are kept in
tables keyed by that name: ``session_ids`` (a session id is stored once) is the only one.
On SQLite ``entries.pk`` stays the rowid (``INTEGER PRIMARY KEY``: the full-text index's
``content_rowid`` and the table's own b-tree key) and ``UNIQUE (session_pk, seq)`` is the row's
logical key; PostgreSQL's primary key is ``(session_pk, pk)`` (:data:`SQLITE_ROWID`), with a plain
index on ``pk`` for search's newest-first order (``ix_entries_pk``, made by the migration).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateColumn

# SQLite only treats "INTEGER PRIMARY KEY" as the rowid alias; BIGINT keys would not autoincrement.
RowId = BigInteger().with_variant(Integer(), "sqlite")
# JSON text on SQLite, jsonb on PostgreSQL (parsed once on write; ``->>`` works the same on both).
# Rows are written with DBAPI statements and the JSON text, never through this type's binding.
# (The PostgreSQL dialect is imported here anyway: the partial indexes' ``postgresql_where``
# makes SQLAlchemy load it to check the argument.)
Json = Text().with_variant(JSONB(), "postgresql")

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)  # the tables, for Alembic and every query


def _required(name: str, *args: object, **options: object) -> Column:
    """A NOT NULL column."""
    return Column(name, *args, nullable=False, **options)


# ``Table.info`` key: the column that alone is a table's primary key on SQLite, where it is the
# rowid (an INTEGER PRIMARY KEY is the table's b-tree key and the only column SQLite numbers by
# itself); PostgreSQL gets the composite key the table declares (autoincrement on that column).
SQLITE_ROWID = "sqlite_rowid"


@compiles(CreateColumn, "sqlite")
def _sqlite_column(create: CreateColumn, compiler: Any, **kw: Any) -> str:
    column = create.element
    if column.table.info.get(SQLITE_ROWID) != column.name:
        return compiler.visit_create_column(create, **kw)
    return f"{compiler.preparer.format_column(column)} INTEGER NOT NULL"  # numbered as the rowid


@compiles(PrimaryKeyConstraint, "sqlite")
def _sqlite_primary_key(constraint: PrimaryKeyConstraint, compiler: Any, **kw: Any) -> str:
    rowid = constraint.table.info.get(SQLITE_ROWID)
    if rowid is None:
        return compiler.visit_primary_key_constraint(constraint, **kw)
    return f"CONSTRAINT {compiler.preparer.format_constraint(constraint)} PRIMARY KEY ({rowid})"


# One session: header fields, denormalised listing info, and where it came from.
sessions = Table(
    "sessions", metadata,
    Column("pk", Integer, primary_key=True, autoincrement=True),
    _required("session_id", Text, doc="unique: session_ids holds each id once (migration 0008)"),
    Column("version", Integer),
    _required("cwd", Text, default=""),
    Column("parent_session", Text),
    Column("created", Text, doc="header timestamp as written"),
    Column("created_ms", BigInteger, doc="header timestamp, ms since epoch"),
    Column("activity_ms", BigInteger,
           doc="latest user/assistant message time (Pi's list rule: message ms, else entry time)"),
    Column("modified_ms", BigInteger, doc="latest user/assistant activity (Pi's list rule), else header time"),
    Column("name", Text, doc="latest session_info name, trimmed"),
    Column("first_message", Text, doc="first non-empty user text"),
    _required("entry_count", Integer, default=0),
    _required("message_count", Integer, default=0),
    Column("header_seq", Integer, doc="row of the header line"),
    _required("last_seq", Integer, default=-1, doc="row of the last physical line"),
    Column("leaf_seq", Integer, doc="row of the last entry: the leaf on open"),
    _required("pi_valid", Boolean, default=True, doc="Pi would open this file"),
    _required("pi_listable", Boolean, default=True, doc="Pi's list() would show it"),
    _required("has_conversation", Boolean, default=False, doc="holds a user/assistant message"),
    Column("migrated_from", Text, doc="header version before migration"),
    Column("source_path", Text),
    Column("source_sha256", String(64)),
    Column("source_bytes", BigInteger),
    Column("source_mtime_ms", BigInteger),
    # ownership (migration 0004, docs/design.md "Many writers, one truth")
    _required("row_version", BigInteger, server_default="0",
              doc="write transactions that changed the session (optimistic writes)"),
    Column("claim_owner", Text, doc="the writer holding the session's claim"),
    _required("claim_token", BigInteger, server_default="0",
              doc="fencing token: grows with every claim, never goes back"),
    Column("claim_expires_ms", BigInteger, doc="when another writer may take over"),
    Column("diverged_seq", Integer,
           doc="first row the store wrote to a session imported from a file (NULL: the file's history)"),
    # what the current path leaves out (migration 0011, kept by store.db.current_path)
    _required("off_path_messages", Integer, server_default="0", doc="message rows not on the current path"),
    _required("off_path_cost", Double, server_default="0", doc="their cost.total, summed"),
    # no index on name: every append rewrites the row's listing columns, name among them (measured:
    # an index there costs a single append ~5 %); sorting 10k names for `list --sort name` takes ~6 ms
    Index(None, "cwd", "modified_ms"), Index(None, "modified_ms"), Index(None, "created_ms"),
    Index(None, "session_id"),
)

# One physical line of a session file (see the module docstring for the derived columns).
entries = Table(
    "entries", metadata,
    Column("pk", RowId, primary_key=True, autoincrement=True),
    Column("session_pk", Integer, ForeignKey("sessions.pk", ondelete="CASCADE"), primary_key=True),
    _required("seq", Integer),
    _required("kind", String(12), doc="header | entry | value (non-object JSON) | extra_header | skipped"),
    Column("entry_id", Text),
    Column("parent_id", Text),
    Column("type", Text),
    Column("role", Text, doc="message role for type='message'"),
    Column("target_id", Text, doc="targetId of label / context_edit"),
    Column("timestamp", Text),
    _required("line", Text),
    Column("raw", LargeBinary),
    _required("eol", String(2), default="\n"),
    Column("parent_seq", Integer),
    Column("depth", Integer),
    Column("run_start", Integer),
    Column("compaction_seq", Integer),
    Column("thinking_seq", Integer),
    Column("model_seq", Integer),
    _required("superseded", Boolean, default=False),
    # analysis columns (store.analysis.extract): never NULL, '' / 0 / '{}' when the row has none
    _required("search_text", Text, server_default="", doc="plain text, then other searchable text"),
    _required("facts", Json, server_default="{}", doc="per-type analysis fields (a JSON object)"),
    _required("provider", Text, server_default="", doc="provider billed for this row's usage"),
    _required("model", Text, server_default="", doc="model billed for this row's usage"),
    _required("has_usage", SmallInteger, server_default="0", doc="1: Pi's /session counts it"),
    _required("usage_input", BigInteger, server_default="0"),
    _required("usage_output", BigInteger, server_default="0"),
    _required("usage_cache_read", BigInteger, server_default="0"),
    _required("usage_cache_write", BigInteger, server_default="0"),
    _required("usage_cost", Double, server_default="0", doc="cost.total"),
    PrimaryKeyConstraint("session_pk", "pk"),  # SQLite: pk, the rowid (module docstring)
    UniqueConstraint("session_pk", "seq"),
    Index(None, "session_pk", "entry_id", "seq"),
    Index(None, "session_pk", "parent_id"),
    # partial: the common message rows stay out of these two (fewer pages written per append)
    Index(None, "session_pk", "type", "seq", sqlite_where=text("type <> 'message'"),
          postgresql_where=text("type <> 'message'")),
    Index(None, "session_pk", "target_id", sqlite_where=text("target_id IS NOT NULL"),
          postgresql_where=text("target_id IS NOT NULL")),
    # usage totals per session and the models it used, read from the index alone (list, stats)
    Index("ix_entries_usage", "session_pk", "provider", "model", "usage_cost", "usage_input", "usage_output",
          "usage_cache_read", "usage_cache_write", sqlite_where=text("has_usage = 1"),
          postgresql_where=text("has_usage = 1")),
    # the few messages that ended in a model error (``messages.stop_reason = 'error'``; migration 0011)
    Index("ix_entries_model_errors", "session_pk",
          sqlite_where=text("type = 'message' AND facts ->> 'stopReason' = 'error'"),
          postgresql_where=text("type = 'message' AND facts ->> 'stopReason' = 'error'")),
    # the few message rows with no role (``message`` null or missing: Pi's context fails on them
    # anywhere on the path; ``store.context_window``; migration 0016)
    Index("ix_entries_messages_without_role", "session_pk", "seq",
          sqlite_where=text("type = 'message' AND role IS NULL"),
          postgresql_where=text("type = 'message' AND role IS NULL")),
    info={SQLITE_ROWID: "pk"},
)

# Which session holds a session id: each id once (its primary key), the one place where the
# store's sessions meet across shards (migration 0008). ``open(id)`` reads it, then the session by
# its key; the session row keeps its id too (views, listings).
session_ids = Table(
    "session_ids", metadata,
    Column("session_id", Text, primary_key=True),
    _required("session_pk", Integer, ForeignKey("sessions.pk", ondelete="CASCADE"), index=True),
    sqlite_with_rowid=False,
)

# The stored prefix of a source file that a session was imported from (migration 0002; keyed by
# session and path since 0008).
imports = Table(
    "imports", metadata,
    Column("session_pk", Integer, ForeignKey("sessions.pk", ondelete="CASCADE"), primary_key=True),
    Column("source_path", Text, primary_key=True, doc="absolute path of the file"),
    _required("source_bytes", BigInteger, doc="length of the stored prefix of the file"),
    _required("source_sha256", String(64), doc="sha256 of that prefix"),
    Column("source_mtime_ms", BigInteger),
    Column("source_stat", Text, doc="device:inode:size:mtime_ns:ctime_ns of the file when it was read, if it had "
                                    "been still for 2 s: the same stat later means the same bytes (migration 0019)"),
    _required("revision", Integer, doc="imports of this path into this session that stored new bytes"),
    _required("imported_ms", BigInteger, doc="when the last of them committed"),
)

# One ``toolCall`` block of an assistant message and the tool result that answers it: the first
# later ``toolResult`` message of the session with its ``toolCallId`` (``result_seq`` NULL while
# there is none). Kept by ``store.analysis.pairs`` when rows are written; read by the
# ``tool_calls`` view (migration 0006). Rows follow their call's row: deleted with it,
# renumbered with it (the foreign key's actions).
tool_call_pairs = Table(
    "tool_call_pairs", metadata,
    Column("session_pk", Integer, primary_key=True),
    Column("call_seq", Integer, primary_key=True, doc="seq of the assistant message"),
    Column("call_index", Integer, primary_key=True, doc="position among its tool calls"),
    Column("tool_call_id", Text),
    Column("name", Text),
    Column("call_ms", BigInteger, doc="the call's timestamp, ms since the epoch"),
    Column("path", Text, doc="the call's ``path`` argument, when it is a string (migration 0011)"),
    Column("result_seq", Integer, doc="seq of the answering toolResult message"),
    Column("is_error", Integer, doc="the result's isError (0/1), if it has one"),
    Column("result_chars", Integer, doc="length of the result's plain text"),
    Column("duration_ms", BigInteger, doc="result timestamp minus call timestamp"),
    ForeignKeyConstraint(["session_pk", "call_seq"], ["entries.session_pk", "entries.seq"],
                         ondelete="CASCADE", onupdate="CASCADE"),
    # the calls still waiting for a result: what a newly written result is matched against
    Index("ix_tool_call_pairs_open", "session_pk", "tool_call_id", sqlite_where=text("result_seq IS NULL"),
          postgresql_where=text("result_seq IS NULL")),
)

# The current path of each session as runs of consecutive rows (migration 0009, kept by
# ``store.db.current_path``): closed runs ``[first_seq, last_seq]`` and the leaf's run, whose
# ``last_seq`` is NULL ("through ``sessions.leaf_seq``": linear appends leave the table alone).
# The ``current_path`` view reads it; the other views join it for ``on_path``.
path_runs = Table(
    "path_runs", metadata,
    Column("session_pk", Integer, ForeignKey("sessions.pk", ondelete="CASCADE"), primary_key=True),
    Column("first_seq", Integer, primary_key=True, doc="first row of the run"),
    Column("last_seq", Integer, doc="last row of the run; NULL: the leaf's run, through sessions.leaf_seq"),
    sqlite_with_rowid=False,
)

# Token totals: a sum of BIGINT counts can pass BIGINT's range (PostgreSQL's sum() of a bigint is a
# numeric for that reason, and so is the column; SQLite's integer arithmetic turns to REAL there).
Tokens = BigInteger().with_variant(Numeric(), "postgresql")

# The turns of each session's current path (migration 0011, kept by ``store.db.current_path``):
# a turn starts at a user message (turn 0: the messages before the first one) and runs to the
# next; what docs/sql.md's "longest turns" query reads instead of numbering every path message.
path_turns = Table(
    "path_turns", metadata,
    Column("session_pk", Integer, ForeignKey("sessions.pk", ondelete="CASCADE"), primary_key=True),
    Column("turn", Integer, primary_key=True, doc="user messages on the path up to this turn's"),
    Column("prompt_seq", Integer, doc="the user message that starts the turn (NULL for turn 0)"),
    _required("steps", Integer, doc="assistant messages"),
    _required("output_tokens", Tokens, doc="their output tokens"),
    _required("cost", Double, doc="the turn's messages' cost.total, summed"),
    sqlite_with_rowid=False,
)

# The ``activity`` view added up per session, day, provider and model (migration 0012, kept by
# ``store.analysis.activity_days`` as rows are written), so that totals over time read a few rows
# per session and day instead of every message. ``day`` is the first ten characters of the rows'
# ``timestamp`` ('' for rows without one); ``provider`` / ``model`` '' for rows without usage. The
# view ``usage_days`` (revision 0011's table) is its rows with ``calls > 0``.
activity_days = Table(
    "activity_days", metadata,
    Column("session_pk", Integer, ForeignKey("sessions.pk", ondelete="CASCADE"), primary_key=True),
    Column("day", Text, primary_key=True),
    Column("provider", Text, primary_key=True),
    Column("model", Text, primary_key=True),
    _required("messages", BigInteger, doc="messages of every role"),
    _required("user_messages", BigInteger),
    _required("assistant_messages", BigInteger),
    _required("tool_results", BigInteger, doc="toolResult messages"),
    _required("tool_calls", BigInteger, doc="tool calls of the assistant messages (tool_call_pairs rows)"),
    _required("tool_errors", BigInteger, doc="of those, the calls whose result failed"),
    _required("calls", BigInteger, doc="usage rows (messages and other entries Pi's /session counts)"),
    _required("input", Tokens),
    _required("output", Tokens),
    _required("cache_read", Tokens),
    _required("cache_write", Tokens),
    _required("cost", Double, doc="sum of cost.total"),
    sqlite_with_rowid=False,
)
