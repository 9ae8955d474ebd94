"""The append hot path: plain DBAPI statements inside one write transaction.

SQLAlchemy's statement machinery costs tens of microseconds per call, more than the insert
itself; appends run these few fixed statements straight on the transaction's DBAPI cursor
(``?`` placeholders, rewritten to ``%s`` for psycopg). The SQL is the same on both engines, except
that PostgreSQL sends :meth:`AppendCursor.insert_new`'s id check, insert and session update as
one statement (a data-modifying ``WITH``): each statement there is a round trip to the server.
:meth:`AppendCursor.insert_if_current` sends that statement outside any transaction, guarded by
the session row as the writer last saw it: the whole single append in one round trip.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from sqlalchemy import Connection, Dialect
from sqlalchemy.util import await_only

from store.analysis import activity_days
from store.analysis.pairs import RowPairing, pair_inserted
from store.db import current_path
from store.db.writes import ROW_COLUMNS, dbapi_sql, insert_sql, native_sql, without_path
from store.format.jsdate import storable_ms

# Whether an entry id is already the session's, read as "the first row with that id": ordered by
# ``seq``, only the (session_pk, entry_id, seq) index answers it without a sort. Without the order a
# young PostgreSQL table's cached generic plan (estimates clamped to one row: a tie) takes the
# primary key's (session_pk, pk) and filters every row of the session (BENCHMARKS.md, "Young
# tables: lookups that scanned the session").
_ID_TAKEN = "SELECT seq FROM entries WHERE session_pk = ? AND entry_id = ? ORDER BY seq LIMIT 1"
_HOLDS = "SELECT 1 FROM entries WHERE session_pk = ? AND seq = ? AND entry_id = ? AND line = ?"
_END_LINE = "UPDATE entries SET eol = '\n' WHERE session_pk = ? AND seq = ? AND eol = ''"
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
WHERE pk = ?"""
# PostgreSQL, one statement: the row unless its entry id is already the session's (exact under the
# session's lock) and, when it inserted, the session update
_INSERT_NEW = (f"INSERT INTO entries ({', '.join(ROW_COLUMNS)}) SELECT {', '.join('?' for _ in ROW_COLUMNS)} "
               f"WHERE ({_ID_TAKEN}) IS NULL")  # not NOT EXISTS: PostgreSQL drops an EXISTS's ORDER BY
# ... and, in the same round trip, what the row adds to its day's activity (store.analysis.activity_days)
# and to the path's turns (a linear append: store.db.current_path), when it adds anything
_VALUES = ", ".join("?" for _ in activity_days.KEY + activity_days.TOTALS)
_ADD_DAY = activity_days.ADD.replace(f" VALUES ({_VALUES})", f" SELECT {_VALUES} FROM new")


# ... and, for a write outside any transaction (AppendCursor.insert_if_current), first the session
# row, locked by its key, then required to be as the writer last saw it: its version, its last row,
# its claim. The lock reads the primary key alone (a materialized CTE keeps the other conditions out
# of its scan): every append leaves the session row a dead version behind in each of the row's
# indexes, and a scan of `ix_sessions_session_id`, which a planner without statistics finds as good,
# visited each of them (~80 an append, a third of the server's time; BENCHMARKS.md, "The session
# row's lock").
_CURRENT = ("locked AS MATERIALIZED (SELECT session_id, row_version, last_seq, claim_owner, claim_token "
            "FROM sessions WHERE pk = ? FOR UPDATE), "
            "current AS (SELECT 1 FROM locked WHERE session_id = ? AND row_version = ? AND last_seq = ? AND {claim})")
_CLAIM = {False: "claim_owner IS NULL", True: "claim_owner = ? AND claim_token = ?"}


class Seen(NamedTuple):
    """The session row as a writer last left it (what :meth:`AppendCursor.insert_if_current`
    requires); ``claim``: the writer's claim (owner, fencing token), if it holds one."""

    session_id: str
    row_version: int
    last_seq: int
    claim: tuple[str, int] | None


_INSERTED = "EXISTS (SELECT 1 FROM new)"


@functools.cache
def _insert_new_sql(with_day: bool, turn: str | None, claimed: bool | None = None,
                    pairing: tuple[str, ...] = ()) -> str:
    """The single statement: the row (``new``), its day's activity, its turn (``turn``: one of
    ``current_path``'s statements, which then only adds when the row was inserted), the session;
    with PostgreSQL's own placeholders (:meth:`AppendCursor._execute_native`). ``claimed`` not
    None: only if the session row is as seen (``_CURRENT``; True: by the claim's holder), and
    then with the row's ``pairing`` statements too (``store.analysis.pairs.RowPairing``)."""
    parts = [f"new AS ({_INSERT_NEW} RETURNING 1)"]
    if claimed is not None:
        parts = [_CURRENT.format(claim=_CLAIM[claimed]),
                 f"new AS ({_INSERT_NEW} AND EXISTS (SELECT 1 FROM current) RETURNING 1)"]
    if with_day:
        parts.append(f"activity_day AS ({_ADD_DAY})")
    if turn is not None:
        parts.append(f"path_turn AS ({turn.format(source=' FROM new')})")
    parts.extend(f"pairing_{n} AS ({sql})" for n, sql in enumerate(pairing))
    return native_sql(f"WITH {', '.join(parts)} {_ADVANCE} AND {_INSERTED}")


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
        self._connection = dbapi_connection
        self._cursor = dbapi_connection.cursor()
        self._dialect = dialect
        self._id_taken = dbapi_sql(dialect, _ID_TAKEN)
        self._ids = dbapi_sql(dialect, _IDS)
        self._holds = dbapi_sql(dialect, _HOLDS)
        self._end_line = dbapi_sql(dialect, _END_LINE)
        self._lock = dbapi_sql(dialect, _LOCK_PG if dialect.name == "postgresql" else _LOCK_SQLITE)
        self._insert = insert_sql(dialect)
        self._advance = dbapi_sql(dialect, _ADVANCE)
        self._one_statement = dialect.name == "postgresql"

    @classmethod
    def on(cls, conn: Connection) -> AppendCursor:
        """The statements on a SQLAlchemy connection's DBAPI connection (same transaction)."""
        return cls(conn.connection.dbapi_connection, conn.dialect)

    def lock_session(self, session_pk: int, opening: str = "") -> LockedSession | None:
        """The session row's write-relevant columns, read under the write lock (``FOR UPDATE`` on
        PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` already holds the database's write lock); None
        when the row is gone. ``opening``: statements that open the transaction, sent in the same
        round trip (see ``store.db.engine.driver_write_transaction``)."""
        if not opening:
            self._cursor.execute(self._lock, (session_pk,))
            row = self._cursor.fetchone()
        else:  # several statements: a simple query, the key as a literal (an integer)
            row = _last_row(self._cursor, self._connection, self._dialect,
                            opening + _LOCK_PG.replace("?", str(int(session_pk))))
        return None if row is None else LockedSession(*row)

    def end_line(self, session_pk: int, seq: int) -> None:
        """Give row ``seq`` the line end it lacks (the last line of a file that had none)."""
        self._cursor.execute(self._end_line, (session_pk, seq))

    def id_taken(self, session_pk: int, entry_id: str) -> bool:
        self._cursor.execute(self._id_taken, (session_pk, entry_id))
        return self._cursor.fetchone() is not None

    def all_ids(self, session_pk: int) -> set[str]:
        """Every entry id of the session (one index scan)."""
        self._cursor.execute(self._ids, (session_pk,))
        return {row[0] for row in self._cursor.fetchall()}

    def insert(self, rows: list[tuple]) -> None:
        """Insert ``entry_values`` tuples (pair their tool calls, add up their activity)."""
        if rows:
            self._cursor.executemany(self._insert, rows if self._dialect.name == "sqlite" else without_path(rows))
            pair_inserted(self._cursor, self._dialect, rows)
            activity_days.add_inserted(self._cursor, self._dialect, rows)

    def insert_new(self, row: tuple, changes: tuple, turns: current_path.PathTurns | None) -> bool:
        """Insert one entry's row (an ``entry_values`` tuple), pair its tool call or result, add
        up its activity, add it to the path's turns (``turns``: the row's, when it lengthens the
        path; else the caller refreshes the path) and apply ``changes`` (:func:`session_changes`)
        to the session row — unless the entry's id is already one of the session's: then nothing
        is written and the answer is False."""
        spk, entry_id = row[0], row[3]
        if self._one_statement:
            if not self._insert_one(row, changes, turns):
                return False
        else:  # in-process statements cost no round trip; SQLite would copy INSERT ... SELECT's row aside
            if self.id_taken(spk, entry_id):
                return False
            self._cursor.execute(self._insert, row)
            self._cursor.execute(self._advance, changes)
            activity_days.add_inserted(self._cursor, self._dialect, [row])
            if turns is not None:
                current_path.extend(self._cursor, self._dialect, spk, turns)
        pair_inserted(self._cursor, self._dialect, [row])
        return True

    def insert_if_current(self, row: tuple, changes: tuple, turns: current_path.PathTurns | None,
                          seen: Seen, pairing: RowPairing) -> bool:
        """PostgreSQL, on a connection in autocommit mode: :meth:`insert_new`'s statement, with
        the row's ``pairing``, as a transaction of its own, which first locks the session row —
        only if it is as ``seen`` (no other write since, the same claim or none) — and writes
        only then; False: nothing written (the row moved on, a claim changed, the entry's id is
        taken: the caller takes the locked path, which tells which). Only for a row that
        lengthens the path's run."""
        claim = () if seen.claim is None else seen.claim
        statements = pairing.statements(_INSERTED)
        return self._insert_one(row, changes, turns, seen.claim is not None,
                                (row[0], seen.session_id, seen.row_version, seen.last_seq, *claim),
                                tuple(sql for sql, _ in statements),
                                tuple(v for _, values in statements for v in values))

    def holds(self, session_pk: int, seq: int, entry_id: str, line: str) -> bool:
        """Whether the session's row ``seq`` is the entry ``entry_id`` written as ``line``."""
        self._cursor.execute(self._holds, (session_pk, seq, entry_id, line))
        return self._cursor.fetchone() is not None

    def _insert_one(self, row: tuple, changes: tuple, turns: current_path.PathTurns | None,
                    claimed: bool | None = None, current: tuple = (), pairing: tuple[str, ...] = (),
                    pairing_parameters: tuple = ()) -> bool:
        """:meth:`insert_new`'s one statement (``claimed``, ``current``: ``_CURRENT``'s condition
        and parameters; ``pairing``: the row's pairing statements; see :meth:`insert_if_current`)."""
        spk, entry_id = row[0], row[3]
        day = activity_days.DayTotals()
        day.add([row])
        day_totals = day.parameters(self._dialect)
        (turn, turn_parameters), = turns.appended(self._dialect, spk) if turns and turns.turns else [(None, ())]
        return self._execute_native(_insert_new_sql(bool(day_totals), turn, claimed, pairing), (
            *current, *without_path([row])[0], spk, entry_id, *(day_totals[0] if day_totals else ()),
            *turn_parameters, *pairing_parameters, *changes)) == 1

    def _execute_native(self, sql: str, parameters: tuple) -> int:
        """Run ``sql`` (PostgreSQL's own ``$1, $2, …`` placeholders) in the transaction; its row
        count. psycopg keeps its translation of a ``%s`` statement only for statements of at most
        50 parameters; the one-statement append has 64, and translating it again on every append
        was 60 % of the client's instructions per append. A raw cursor sends the text as it is."""
        import psycopg  # here: SQLite users' start-up does not pay for the driver

        if not self._dialect.is_async:
            with psycopg.RawCursor(self._connection) as cursor:
                cursor.execute(sql, parameters)
                return cursor.rowcount
        cursor = psycopg.AsyncRawCursor(self._connection.driver_connection)
        try:
            await_only(cursor.execute(sql, parameters))
            return cursor.rowcount
        finally:
            await_only(cursor.close())

    def refresh_path(self, session_pk: int) -> None:
        """Rewrite the session's ``path_runs`` and what is kept of its path (after ``advance``:
        it reads the new leaf); only when the leaf's run changed
        (``store.db.current_path.moved_run``)."""
        current_path.refresh(self._cursor, self._dialect, session_pk)

    def extend_path(self, session_pk: int, turns: current_path.PathTurns) -> None:
        """Add rows appended along the path to its turns (the leaf's run did not change)."""
        current_path.extend(self._cursor, self._dialect, session_pk, turns)

    def advance(self, session_pk: int, *, last_seq: int, leaf_seq: int | None, entries: int, messages: int,
                activity_ms: float | None, first_message: str | None, name: tuple[str | None] | None,
                conversation: bool, listable: bool, diverge_at: int | None = None) -> None:
        """Record appended rows in the session row (see :func:`session_changes`)."""
        self.advance_with(session_changes(
            session_pk, last_seq=last_seq, leaf_seq=leaf_seq, entries=entries, messages=messages,
            activity_ms=activity_ms, first_message=first_message, name=name, conversation=conversation,
            listable=listable, diverge_at=diverge_at))

    def advance_with(self, changes: tuple) -> None:
        """Apply ``changes`` (:func:`session_changes`) to the session row."""
        self._cursor.execute(self._advance, changes)


def _last_row(cursor: Any, dbapi_connection: Any, dialect: Dialect, sql: str) -> tuple | None:
    """The row of the last of the statements ``sql`` (no parameters; its results come one after
    another: psycopg's ``nextset``, called on psycopg's own cursor where the asyncio adapter's
    would await it)."""
    if not dialect.is_async:
        cursor.execute(sql)
        while cursor.nextset():
            pass
        return cursor.fetchone()
    driver = dbapi_connection.driver_connection.cursor()  # a psycopg AsyncCursor
    await_only(driver.execute(sql))
    while driver.nextset():
        pass
    row = await_only(driver.fetchone())
    await_only(driver.close())
    return row


def session_changes(session_pk: int, *, last_seq: int, leaf_seq: int | None, entries: int, messages: int,
                    activity_ms: float | None, first_message: str | None, name: tuple[str | None] | None,
                    conversation: bool, listable: bool, diverge_at: int | None = None) -> tuple:
    """The parameters of the ``sessions`` update that records appended rows: counters, listing
    columns, and the leaf unless ``leaf_seq`` is None (appended rows that hold no entry leave it
    where it was); the update counts the write in ``row_version``. ``diverge_at``: the first of
    the rows when they come from the store's API, not from the session's file: a session imported
    from a file diverges from it there (``diverged_seq``, kept if it diverged earlier)."""
    act = None if activity_ms is None else storable_ms(activity_ms)
    return (
        last_seq, leaf_seq, entries, messages,
        act, act, act, act, act, act,
        first_message,
        name is not None, None if name is None else name[0],
        conversation, listable,
        diverge_at,
        session_pk,
    )
