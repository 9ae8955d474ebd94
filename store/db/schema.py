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
the full-text index (``docs/sql.md``).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

# SQLite only treats "INTEGER PRIMARY KEY" as the rowid alias; BIGINT keys would not autoincrement.
RowId = BigInteger().with_variant(Integer(), "sqlite")
# JSON text on SQLite, jsonb on PostgreSQL (parsed once on write; ``->>`` works the same on both).
# Rows are written with DBAPI statements and the JSON text, never through this type's binding.
Json = Text().with_variant(JSONB(), "postgresql")

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


metadata = MetaData(naming_convention=NAMING)

# One session: header fields, denormalised listing info, and where it came from.
sessions = Table(
    "sessions", metadata,
    Column("pk", Integer, primary_key=True, autoincrement=True),
    Column("session_id", Text, unique=True, nullable=False),
    Column("version", Integer),
    Column("cwd", Text, default="", nullable=False),
    Column("parent_session", Text),
    Column("created", Text, doc="header timestamp as written"),
    Column("created_ms", BigInteger, doc="header timestamp, ms since epoch"),
    Column("activity_ms", BigInteger,
           doc="latest user/assistant message time (Pi's list rule: message ms, else entry time)"),
    Column("modified_ms", BigInteger, doc="latest user/assistant activity (Pi's list rule), else header time"),
    Column("name", Text, doc="latest session_info name, trimmed"),
    Column("first_message", Text, doc="first non-empty user text"),
    Column("entry_count", Integer, default=0, nullable=False),
    Column("message_count", Integer, default=0, nullable=False),
    Column("header_seq", Integer, doc="row of the header line"),
    Column("last_seq", Integer, default=-1, doc="row of the last physical line", nullable=False),
    Column("leaf_seq", Integer, doc="row of the last entry: the leaf on open"),
    Column("pi_valid", Boolean, default=True, doc="Pi would open this file", nullable=False),
    Column("pi_listable", Boolean, default=True, doc="Pi's list() would show it", nullable=False),
    Column("has_conversation", Boolean, default=False, doc="holds a user/assistant message", nullable=False),
    Column("migrated_from", Text, doc="header version before migration"),
    Column("source_path", Text),
    Column("source_sha256", String(64)),
    Column("source_bytes", BigInteger),
    Column("source_mtime_ms", BigInteger),
    # ownership (migration 0004, docs/design.md "Many writers, one truth")
    Column("row_version", BigInteger, server_default="0",
           doc="write transactions that changed the session (optimistic writes)", nullable=False),
    Column("claim_owner", Text, doc="the writer holding the session's claim"),
    Column("claim_token", BigInteger, server_default="0",
           doc="fencing token: grows with every claim, never goes back", nullable=False),
    Column("claim_expires_ms", BigInteger, doc="when another writer may take over"),
    Column("diverged_seq", Integer,
           doc="first row the store wrote to a session imported from a file (NULL: the file's history)"),
    # no index on name: every append rewrites the row's listing columns, name among them (measured:
    # an index there costs a single append ~5 %); sorting 10k names for `list --sort name` takes ~6 ms
    Index(None, "cwd", "modified_ms"), Index(None, "modified_ms"), Index(None, "created_ms"),
)

# One physical line of a session file (see the module docstring for the derived columns).
entries = Table(
    "entries", metadata,
    Column("pk", RowId, primary_key=True, autoincrement=True),
    Column("session_pk", ForeignKey("sessions.pk", ondelete="CASCADE"), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("kind", String(12), doc="header | entry | value (non-object JSON) | extra_header | skipped", nullable=False),
    Column("entry_id", Text),
    Column("parent_id", Text),
    Column("type", Text),
    Column("role", Text, doc="message role for type='message'"),
    Column("target_id", Text, doc="targetId of label / context_edit"),
    Column("timestamp", Text),
    Column("line", Text, nullable=False),
    Column("raw", LargeBinary),
    Column("eol", String(2), default="\n", nullable=False),
    Column("parent_seq", Integer),
    Column("depth", Integer),
    Column("run_start", Integer),
    Column("compaction_seq", Integer),
    Column("thinking_seq", Integer),
    Column("model_seq", Integer),
    Column("superseded", Boolean, default=False, nullable=False),
    # analysis columns (store.analysis.extract): never NULL, '' / 0 / '{}' when the row has none
    Column("search_text", Text, server_default="", doc="plain text, then other searchable text", nullable=False),
    Column("facts", Json, server_default="{}", doc="per-type analysis fields (a JSON object)", nullable=False),
    Column("provider", Text, server_default="", doc="provider billed for this row's usage", nullable=False),
    Column("model", Text, server_default="", doc="model billed for this row's usage", nullable=False),
    Column("has_usage", SmallInteger, server_default="0", doc="1: Pi's /session counts it", nullable=False),
    Column("usage_input", BigInteger, server_default="0", nullable=False),
    Column("usage_output", BigInteger, server_default="0", nullable=False),
    Column("usage_cache_read", BigInteger, server_default="0", nullable=False),
    Column("usage_cache_write", BigInteger, server_default="0", nullable=False),
    Column("usage_cost", Double, server_default="0", doc="cost.total", nullable=False),
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
)

# One imported source file: the stored prefix of it (see migration 0002).
imports = Table(
    "imports", metadata,
    Column("pk", Integer, primary_key=True, autoincrement=True),
    Column("source_path", Text, unique=True, doc="absolute path of the file", nullable=False),
    Column("session_pk", ForeignKey("sessions.pk", ondelete="CASCADE"), index=True, nullable=False),
    Column("source_bytes", BigInteger, doc="length of the stored prefix of the file", nullable=False),
    Column("source_sha256", String(64), doc="sha256 of that prefix", nullable=False),
    Column("source_mtime_ms", BigInteger),
    Column("revision", Integer, doc="imports of this path that stored new bytes", nullable=False),
    Column("imported_ms", BigInteger, doc="when the last of them committed", nullable=False),
)
