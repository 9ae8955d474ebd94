"""The append hot path: plain DBAPI statements inside one write transaction.

SQLAlchemy's statement machinery costs tens of microseconds per call, more than the insert
itself; appends run these few fixed statements straight on the transaction's DBAPI cursor
(``?`` placeholders, rewritten to ``%s`` for psycopg). The SQL is identical on both engines.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import Connection, Dialect

from store.analysis.pairs import pair_inserted
from store.db.writes import dbapi_sql, insert_sql, without_path
from store.format.jsdate import storable_ms

_ID_TAKEN = "SELECT 1 FROM entries WHERE session_pk = ? AND entry_id = ? LIMIT 1"
_IDS = "SELECT DISTINCT entry_id FROM entries WHERE session_pk = ? AND entry_id IS NOT NULL"
_LOCKED = ("SELECT session_id, last_seq, row_version, claim_owner, claim_token, claim_expires_ms "
           "FROM sessions WHERE pk = ?")
_LOCK_SQLITE = _LOCKED
_LOCK_PG = _LOCKED + " FOR UPDATE"
_ADVANCE = """
UPDATE sessions SET
    last_seq = ?,
    leaf_seq = COALESCE(CAST(? AS INTEGER), leaf_seq),
    entry_count = entry_count + ?,
    message_count = message_count + ?,
    activity_ms = CASE WHEN CAST(? AS BIGINT) IS NULL THEN activity_ms
                       WHEN activity_ms IS NULL OR CAST(? AS BIGINT) > activity_ms THEN CAST(? AS BIGINT)
                       ELSE activity_ms END,
    modified_ms = CASE WHEN CAST(? AS BIGINT) > 0 AND (activity_ms IS NULL OR CAST(? AS BIGINT) > activity_ms)
                       THEN CAST(? AS BIGINT) ELSE modified_ms END,
    first_message = COALESCE(first_message, CAST(? AS TEXT)),
    name = CASE WHEN CAST(? AS BOOLEAN) THEN CAST(? AS TEXT) ELSE name END,
    has_conversation = (has_conversation OR CAST(? AS BOOLEAN)),
    pi_listable = (pi_listable AND CAST(? AS BOOLEAN)),
    diverged_seq = CASE WHEN diverged_seq IS NULL AND source_sha256 IS NOT NULL
                        THEN CAST(? AS INTEGER) ELSE diverged_seq END,
    row_version = row_version + 1
WHERE pk = ?
"""


class LockedSession(NamedTuple):
    """The ``sessions`` columns a write checks under the lock (``store.ownership``)."""

    session_id: str
    last_seq: int
    row_version: int
    claim_owner: str | None
    claim_token: int
    claim_expires_ms: int | None


class AppendCursor:
    """Fixed statements of the append path on one transaction's DBAPI connection."""

    def __init__(self, dbapi_connection: Any, dialect: Dialect) -> None:
        self._cursor = dbapi_connection.cursor()
        self._dialect = dialect
        self._id_taken = dbapi_sql(dialect, _ID_TAKEN)
        self._ids = dbapi_sql(dialect, _IDS)
        self._lock = dbapi_sql(dialect, _LOCK_PG if dialect.name == "postgresql" else _LOCK_SQLITE)
        self._insert = insert_sql(dialect)
        self._advance = dbapi_sql(dialect, _ADVANCE)

    @classmethod
    def on(cls, conn: Connection) -> AppendCursor:
        """The statements on a SQLAlchemy connection's DBAPI connection (same transaction)."""
        return cls(conn.connection.dbapi_connection, conn.dialect)

    def lock_session(self, session_pk: int) -> LockedSession | None:
        """The session row's write-relevant columns, read under the write lock (``FOR UPDATE`` on
        PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` already holds the database's write lock); None
        when the row is gone."""
        self._cursor.execute(self._lock, (session_pk,))
        row = self._cursor.fetchone()
        return None if row is None else LockedSession(*row)

    def id_taken(self, session_pk: int, entry_id: str) -> bool:
        self._cursor.execute(self._id_taken, (session_pk, entry_id))
        return self._cursor.fetchone() is not None

    def all_ids(self, session_pk: int) -> set[str]:
        """Every entry id of the session (one index scan)."""
        self._cursor.execute(self._ids, (session_pk,))
        return {row[0] for row in self._cursor.fetchall()}

    def insert(self, rows: list[tuple]) -> None:
        """Insert ``entry_values`` tuples (and pair their tool calls)."""
        if rows:
            self._cursor.executemany(self._insert, rows if self._dialect.name == "sqlite" else without_path(rows))
            pair_inserted(self._cursor, self._dialect, rows)

    def advance(self, session_pk: int, *, last_seq: int, leaf_seq: int | None, entries: int, messages: int,
                activity_ms: float | None, first_message: str | None, name: tuple[str | None] | None,
                conversation: bool, listable: bool, diverge_at: int | None = None) -> None:
        """Record appended rows in the session row (counters, listing columns, and the leaf unless
        ``leaf_seq`` is None: appended rows that hold no entry leave it where it was) and count
        the write in ``row_version``. ``diverge_at``: the first of the rows when they come from
        the store's API, not from the session's file: a session imported from a file diverges
        from it there (``diverged_seq``, kept if it diverged earlier)."""
        act = None if activity_ms is None else storable_ms(activity_ms)
        self._cursor.execute(self._advance, (
            last_seq, leaf_seq, entries, messages,
            act, act, act, act, act, act,
            first_message,
            name is not None, None if name is None else name[0],
            conversation, listable,
            diverge_at,
            session_pk,
        ))
