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

from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    Boolean,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.schema import CreateColumn

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


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


# ``Table.info`` key: the column that alone is a table's primary key on SQLite, where it is the
# rowid (an INTEGER PRIMARY KEY is the table's b-tree key and the only column SQLite numbers by
# itself); PostgreSQL gets the composite key the model declares (autoincrement on that column).
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


class SessionRow(Base):
    """One session: header fields, denormalised listing info, and where it came from."""

    __tablename__ = "sessions"

    pk: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(Text, doc="unique: session_ids holds each id once (migration 0008)")
    version: Mapped[int | None] = mapped_column(Integer)
    cwd: Mapped[str] = mapped_column(Text, default="")
    parent_session: Mapped[str | None] = mapped_column(Text)
    created: Mapped[str | None] = mapped_column(Text, doc="header timestamp as written")
    created_ms: Mapped[int | None] = mapped_column(BigInteger, doc="header timestamp, ms since epoch")
    activity_ms: Mapped[int | None] = mapped_column(
        BigInteger, doc="latest user/assistant message time (Pi's list rule: message ms, else entry time)"
    )
    modified_ms: Mapped[int | None] = mapped_column(
        BigInteger, doc="latest user/assistant activity (Pi's list rule), else header time"
    )
    name: Mapped[str | None] = mapped_column(Text, doc="latest session_info name, trimmed")
    first_message: Mapped[str | None] = mapped_column(Text, doc="first non-empty user text")
    entry_count: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    message_count: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    header_seq: Mapped[int | None] = mapped_column(Integer, doc="row of the header line")
    last_seq: Mapped[int] = mapped_column(Integer, default=-1, doc="row of the last physical line")
    leaf_seq: Mapped[int | None] = mapped_column(Integer, doc="row of the last entry: the leaf on open")
    pi_valid: Mapped[bool] = mapped_column(Boolean, default=True, doc="Pi would open this file")
    pi_listable: Mapped[bool] = mapped_column(Boolean, default=True, doc="Pi's list() would show it")
    has_conversation: Mapped[bool] = mapped_column(Boolean, default=False, doc="holds a user/assistant message")
    migrated_from: Mapped[str | None] = mapped_column(Text, doc="header version before migration")
    source_path: Mapped[str | None] = mapped_column(Text)
    source_sha256: Mapped[str | None] = mapped_column(String(64))
    source_bytes: Mapped[int | None] = mapped_column(BigInteger)
    source_mtime_ms: Mapped[int | None] = mapped_column(BigInteger)
    # ownership (migration 0004, docs/design.md "Many writers, one truth")
    row_version: Mapped[int] = mapped_column(
        BigInteger, server_default="0", doc="write transactions that changed the session (optimistic writes)"
    )
    claim_owner: Mapped[str | None] = mapped_column(Text, doc="the writer holding the session's claim")
    claim_token: Mapped[int] = mapped_column(
        BigInteger, server_default="0", doc="fencing token: grows with every claim, never goes back"
    )
    claim_expires_ms: Mapped[int | None] = mapped_column(BigInteger, doc="when another writer may take over")
    diverged_seq: Mapped[int | None] = mapped_column(
        Integer, doc="first row the store wrote to a session imported from a file (NULL: the file's history)"
    )

    # no index on name: every append rewrites the row's listing columns, name among them (measured:
    # an index there costs a single append ~5 %); sorting 10k names for `list --sort name` takes ~6 ms
    __table_args__ = (Index(None, "cwd", "modified_ms"), Index(None, "modified_ms"), Index(None, "created_ms"),
                      Index(None, "session_id"))


class EntryRow(Base):
    """One physical line of a session file (see the module docstring for the derived columns)."""

    __tablename__ = "entries"

    pk: Mapped[int] = mapped_column(RowId, primary_key=True, autoincrement=True)
    session_pk: Mapped[int] = mapped_column(ForeignKey("sessions.pk", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(
        String(12), doc="header | entry | value (non-object JSON) | extra_header | skipped"
    )
    entry_id: Mapped[str | None] = mapped_column(Text)
    parent_id: Mapped[str | None] = mapped_column(Text)
    type: Mapped[str | None] = mapped_column(Text)
    role: Mapped[str | None] = mapped_column(Text, doc="message role for type='message'")
    target_id: Mapped[str | None] = mapped_column(Text, doc="targetId of label / context_edit")
    timestamp: Mapped[str | None] = mapped_column(Text)
    line: Mapped[str] = mapped_column(Text)
    raw: Mapped[bytes | None] = mapped_column(LargeBinary)
    eol: Mapped[str] = mapped_column(String(2), default="\n")
    parent_seq: Mapped[int | None] = mapped_column(Integer)
    depth: Mapped[int | None] = mapped_column(Integer)
    run_start: Mapped[int | None] = mapped_column(Integer)
    compaction_seq: Mapped[int | None] = mapped_column(Integer)
    thinking_seq: Mapped[int | None] = mapped_column(Integer)
    model_seq: Mapped[int | None] = mapped_column(Integer)
    superseded: Mapped[bool] = mapped_column(Boolean, default=False)
    # analysis columns (store.analysis.extract): never NULL, '' / 0 / '{}' when the row has none
    search_text: Mapped[str] = mapped_column(Text, server_default="", doc="plain text, then other searchable text")
    facts: Mapped[str] = mapped_column(Json, server_default="{}", doc="per-type analysis fields (a JSON object)")
    provider: Mapped[str] = mapped_column(Text, server_default="", doc="provider billed for this row's usage")
    model: Mapped[str] = mapped_column(Text, server_default="", doc="model billed for this row's usage")
    has_usage: Mapped[int] = mapped_column(SmallInteger, server_default="0", doc="1: Pi's /session counts it")
    usage_input: Mapped[int] = mapped_column(BigInteger, server_default="0")
    usage_output: Mapped[int] = mapped_column(BigInteger, server_default="0")
    usage_cache_read: Mapped[int] = mapped_column(BigInteger, server_default="0")
    usage_cache_write: Mapped[int] = mapped_column(BigInteger, server_default="0")
    usage_cost: Mapped[float] = mapped_column(Double, server_default="0", doc="cost.total")

    __table_args__ = (
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
        {"info": {SQLITE_ROWID: "pk"}},
    )


sessions = SessionRow.__table__
entries = EntryRow.__table__


class SessionIdRow(Base):
    """Which session holds a session id: each id once (its primary key), the one place where the
    store's sessions meet across shards (migration 0008). ``open(id)`` reads it, then the session by
    its key; the session row keeps its id too (views, listings)."""

    __tablename__ = "session_ids"

    session_id: Mapped[str] = mapped_column(Text, primary_key=True)
    session_pk: Mapped[int] = mapped_column(ForeignKey("sessions.pk", ondelete="CASCADE"), index=True)

    __table_args__: ClassVar[dict[str, Any]] = {"sqlite_with_rowid": False}


session_ids = SessionIdRow.__table__


class ImportRow(Base):
    """The stored prefix of a source file that a session was imported from (migration 0002; keyed
    by session and path since 0008)."""

    __tablename__ = "imports"

    session_pk: Mapped[int] = mapped_column(ForeignKey("sessions.pk", ondelete="CASCADE"), primary_key=True)
    source_path: Mapped[str] = mapped_column(Text, primary_key=True, doc="absolute path of the file")
    source_bytes: Mapped[int] = mapped_column(BigInteger, doc="length of the stored prefix of the file")
    source_sha256: Mapped[str] = mapped_column(String(64), doc="sha256 of that prefix")
    source_mtime_ms: Mapped[int | None] = mapped_column(BigInteger)
    revision: Mapped[int] = mapped_column(Integer, doc="imports of this path into this session that stored new bytes")
    imported_ms: Mapped[int] = mapped_column(BigInteger, doc="when the last of them committed")


imports = ImportRow.__table__


class ToolCallPairRow(Base):
    """One ``toolCall`` block of an assistant message and the tool result that answers it: the
    first later ``toolResult`` message of the session with its ``toolCallId`` (``result_seq``
    NULL while there is none). Kept by ``store.analysis.pairs`` when rows are written; read by
    the ``tool_calls`` view (migration 0006). Rows follow their call's row: deleted with it,
    renumbered with it (the foreign key's actions)."""

    __tablename__ = "tool_call_pairs"

    session_pk: Mapped[int] = mapped_column(Integer, primary_key=True)
    call_seq: Mapped[int] = mapped_column(Integer, primary_key=True, doc="seq of the assistant message")
    call_index: Mapped[int] = mapped_column(Integer, primary_key=True, doc="position among its tool calls")
    tool_call_id: Mapped[str | None] = mapped_column(Text)
    name: Mapped[str | None] = mapped_column(Text)
    call_ms: Mapped[int | None] = mapped_column(BigInteger, doc="the call's timestamp, ms since the epoch")
    result_seq: Mapped[int | None] = mapped_column(Integer, doc="seq of the answering toolResult message")
    is_error: Mapped[int | None] = mapped_column(Integer, doc="the result's isError (0/1), if it has one")
    result_chars: Mapped[int | None] = mapped_column(Integer, doc="length of the result's plain text")
    duration_ms: Mapped[int | None] = mapped_column(BigInteger, doc="result timestamp minus call timestamp")

    __table_args__ = (
        ForeignKeyConstraint(["session_pk", "call_seq"], ["entries.session_pk", "entries.seq"],
                             ondelete="CASCADE", onupdate="CASCADE"),
        # the calls still waiting for a result: what a newly written result is matched against
        Index("ix_tool_call_pairs_open", "session_pk", "tool_call_id", sqlite_where=text("result_seq IS NULL"),
              postgresql_where=text("result_seq IS NULL")),
    )


tool_call_pairs = ToolCallPairRow.__table__

metadata = Base.metadata  # the tables, for Alembic and for code that needs no mapped classes
