"""Tool calls paired with their results once, when rows are written (``tool_call_pairs``).

A tool call (a ``toolCall`` block of an assistant message) is answered by the first later
``toolResult`` message of its session whose ``toolCallId`` is the call's id — what the
``tool_calls`` view of migration 0003 computed at query time by joining every call with every
later result of its session (quadratic per session). Here the pairing is done as rows are
inserted, from the rows' analysis columns (``facts``, ``search_text``): the new calls are
inserted unanswered, then each new result, in ``seq`` order, answers the session's unanswered
calls with its id written before it (``result_seq IS NULL``: a partial index). Rows are inserted
in ``seq`` order, so an answered call keeps its answer: no result can be written before it.

The cost falls on rows that hold a call (one insert) or a result (one update); other rows cost
a type check.

Rows follow their call's row through the foreign key (deleted with it, renumbered with it); where
results move or go away without their calls (``store.retention`` prune), :func:`rebuild_session`
pairs the session again; :func:`rebuild` does every session (migration 0006,
``pi-store fts rebuild --recompute``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import orjson
from sqlalchemy import Connection, Dialect

from store.analysis import activity_days
from store.db import writes
from store.format.jsdate import parse_js_date

_INSERT = ("INSERT INTO tool_call_pairs (session_pk, call_seq, call_index, tool_call_id, name, call_ms, path) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)")
_INSERT_0006 = ("INSERT INTO tool_call_pairs (session_pk, call_seq, call_index, tool_call_id, name, call_ms) "
                "VALUES (?, ?, ?, ?, ?, ?)")  # before revision 0011's ``path``
# a result answers the session's unanswered calls with its id written before it; given in seq
# order, each call gets the first result after it. ``call_seq + 0``: without statistics SQLite
# would range-scan the primary key (every earlier call of the session, quadratic over an import:
# 60k entries took 24 s of the 30 s) instead of the partial index of unanswered calls by id.
_OPEN_CALLS = "session_pk = ? AND tool_call_id = ? AND result_seq IS NULL AND call_seq + 0 < ?"
_ANSWER = ("UPDATE tool_call_pairs SET result_seq = ?, is_error = ?, result_chars = ?, "
           "duration_ms = CAST(? AS BIGINT) - call_ms WHERE " + _OPEN_CALLS)

_PAIR_COLUMNS = ("session_pk", "call_seq", "call_index", "tool_call_id", "name", "call_ms", "path", "result_seq",
                 "is_error", "result_chars", "duration_ms")
_COPY_PAIRS = f"COPY tool_call_pairs ({', '.join(_PAIR_COLUMNS)}) FROM STDIN"
_SESSION_ROWS = ("SELECT seq, role, timestamp, facts, length(search_text) FROM entries "
                 "WHERE session_pk = ? AND kind = 'entry' AND type = 'message' "
                 "AND role IN ('assistant', 'toolResult') ORDER BY seq")


@functools.cache
def _positions() -> tuple[int, ...]:
    """Where the columns read here sit in a ``store.db.writes.ROW_COLUMNS`` tuple."""
    columns = writes.ROW_COLUMNS
    return tuple(columns.index(name) for name in
                 ("session_pk", "seq", "kind", "type", "role", "timestamp", "facts", "search_text"))


def _calls_and_answers(rows: Sequence[tuple]) -> Iterator[tuple[bool, tuple]]:
    """The tool calls (``True``, ``_INSERT`` parameters) and results (``False``, ``_ANSWER``
    parameters) among ``rows`` (``ROW_COLUMNS`` tuples), in row order."""
    spk_at, seq_at, kind_at, type_at, role_at, ts_at, facts_at, text_at = _positions()
    for row in rows:
        if row[type_at] != "message" or row[kind_at] != "entry":
            continue
        role = row[role_at]
        if role == "assistant":
            if '"toolCalls"' in row[facts_at]:
                for call in _calls(row[spk_at], row[seq_at], row[ts_at], row[facts_at]):
                    yield True, call
        elif role == "toolResult":
            answer = _answer(row[spk_at], row[seq_at], row[ts_at], row[facts_at], len(row[text_at]))
            if answer is not None:
                yield False, answer


class RowPairing(NamedTuple):
    """What one row adds to ``tool_call_pairs`` as statements that can join another one (the
    single append's, ``store.db.appends``): its calls' rows, the answer it gives (``_ANSWER``
    parameters), each written only where ``condition`` (SQL) holds."""

    calls: tuple[tuple, ...]
    answer: tuple | None

    def statements(self, condition: str) -> list[tuple[str, tuple]]:
        """(SQL, parameters) of each statement, in order."""
        statements = []
        if self.calls:
            statements.append((_insert_calls_sql(len(self.calls), condition), tuple(v for c in self.calls for v in c)))
        if self.answer is not None:
            statements.append((f"{_ANSWER} AND {condition}", self.answer))
        return statements


def row_pairing(row: tuple) -> RowPairing | None:
    """The pairing of one row (a ``ROW_COLUMNS`` tuple) as :class:`RowPairing`; None for a
    failed result, whose failures are counted in ``activity_days`` first (:func:`pair_inserted`)."""
    calls, answers = [], []
    for is_call, values in _calls_and_answers((row,)):
        (calls if is_call else answers).append(values)
    if any(answer[1] for answer in answers):
        return None
    return RowPairing(tuple(calls), answers[0] if answers else None)


_CALL_VALUES = ("(CAST(? AS INTEGER), CAST(? AS INTEGER), CAST(? AS INTEGER), CAST(? AS TEXT), CAST(? AS TEXT), "
                "CAST(? AS BIGINT), CAST(? AS TEXT))")


@functools.cache
def _insert_calls_sql(count: int, condition: str) -> str:
    """``_INSERT`` of ``count`` calls in one statement, where ``condition`` holds."""
    return (f"{_INSERT.split(' VALUES ')[0]} SELECT * FROM (VALUES {', '.join([_CALL_VALUES] * count)}) AS calls "
            f"WHERE {condition}")


def pair_inserted(cursor: Any, dialect: Dialect, rows: Sequence[tuple]) -> None:
    """Pair the calls and results among ``rows`` (just inserted, ``ROW_COLUMNS`` tuples in
    ``seq`` order per session) with each other and with the stored unanswered calls, and count
    the calls a failed result answers in their rows' ``activity_days``."""
    calls: list[tuple] = []
    answers: list[tuple] = []
    for is_call, values in _calls_and_answers(rows):
        (calls if is_call else answers).append(values)
    _write(cursor, dialect, calls, answers, failures=True)


class SessionPairing:
    """The pairs of one session whose every row is being written now (an import of a new or
    replaced session: no stored call waits for a result), kept in memory while its rows are
    inserted — the same answers as :func:`pair_inserted`, without a statement per call and per
    result — and written at the end by :meth:`copy` (PostgreSQL: one ``COPY``)."""

    def __init__(self) -> None:
        self._pairs: list[list] = []  # _PAIR_COLUMNS order, answers filled in as results come
        self._open: dict[str, list[list]] = {}  # tool call id -> its unanswered calls

    def add(self, rows: Sequence[tuple]) -> None:
        """Pair the calls and results among ``rows`` (``ROW_COLUMNS`` tuples, the session's next
        rows in ``seq`` order) with each other and with the earlier rows' unanswered calls."""
        self._pair(_calls_and_answers(rows))

    def _pair(self, found: Iterable[tuple[bool, tuple]]) -> None:
        """Pair calls (``True``, ``_INSERT`` parameters) and results (``False``, ``_ANSWER``
        parameters), given in row order."""
        for is_call, values in found:
            if is_call:
                pair = [*values, None, None, None, None]
                self._pairs.append(pair)
                if values[3] is not None:  # SQL's tool_call_id = ? never matches NULL
                    self._open.setdefault(values[3], []).append(pair)
            elif waiting := self._open.pop(values[5], None):
                result_seq, is_error, chars, result_ms = values[:4]
                for pair in waiting:  # every waiting call was written before this result
                    call_ms = pair[5]
                    pair[7:] = [result_seq, is_error, chars,
                                None if result_ms is None or call_ms is None else result_ms - call_ms]

    def failed_calls(self) -> list[tuple[int, int]]:
        """``(session_pk, call_seq)`` of each call answered by a failed result so far."""
        return [(pair[0], pair[1]) for pair in self._pairs if pair[8] == 1]

    def copy(self, cursor: Any) -> None:
        """Write the pairs (a psycopg cursor inside the rows' transaction, after the rows)."""
        if self._pairs:
            with cursor.copy(_COPY_PAIRS) as copy:
                for pair in self._pairs:
                    copy.write_row(pair)
        self._pairs, self._open = [], {}


def recounted(conn: Connection, session_pk: int) -> list[tuple]:
    """The session's pairs as its stored rows give them (``_PAIR_COLUMNS`` tuples, in call
    order), paired in memory: nothing is written (``verify``)."""
    cursor = conn.connection.dbapi_connection.cursor()
    cursor.execute(writes.dbapi_sql(conn.dialect, _SESSION_ROWS), (session_pk,))
    pairing = SessionPairing()
    pairing._pair(_stored_calls_and_answers(session_pk, cursor))  # rows as they come (facts can be large)
    return [tuple(pair) for pair in pairing._pairs]


def stored(conn: Connection, session_pk: int) -> list[tuple]:
    """The session's ``tool_call_pairs`` rows (``_PAIR_COLUMNS`` tuples, in call order)."""
    cursor = conn.connection.dbapi_connection.cursor()
    cursor.execute(writes.dbapi_sql(conn.dialect, f"SELECT {', '.join(_PAIR_COLUMNS)} FROM tool_call_pairs "
                                    "WHERE session_pk = ? ORDER BY call_seq, call_index"), (session_pk,))
    return [tuple(row) for row in cursor.fetchall()]


def _stored_calls_and_answers(session_pk: int, rows: Iterable[tuple]) -> Iterator[tuple[bool, tuple]]:
    """:func:`_calls_and_answers` of ``_SESSION_ROWS`` rows."""
    for seq, role, timestamp, facts, chars in rows:
        if role == "assistant":
            for call in _calls(session_pk, seq, timestamp, facts):
                yield True, call
        elif (answer := _answer(session_pk, seq, timestamp, facts, chars)) is not None:
            yield False, answer


def rebuild_session(conn: Connection, session_pk: int, *, paths: bool = True) -> None:
    """Pair one session's calls and results again from its rows (inside the caller's transaction;
    ``paths``: the table has revision 0011's ``path``)."""
    cursor = conn.connection.dbapi_connection.cursor()
    cursor.execute(writes.dbapi_sql(conn.dialect, "DELETE FROM tool_call_pairs WHERE session_pk = ?"),
                   (session_pk,))
    cursor.execute(writes.dbapi_sql(conn.dialect, _SESSION_ROWS), (session_pk,))
    calls: list[tuple] = []
    answers: list[tuple] = []
    for is_call, values in _stored_calls_and_answers(session_pk, cursor.fetchall()):
        (calls if is_call else answers).append(values)
    if not paths:
        calls = [call[:-1] for call in calls]
    _write(cursor, conn.dialect, calls, answers, _INSERT if paths else _INSERT_0006)


def rebuild(conn: Connection, *, paths: bool = True) -> int:
    """Pair every session again (inside the caller's transaction); returns the number of calls."""
    conn.exec_driver_sql("DELETE FROM tool_call_pairs")
    for (session_pk,) in conn.exec_driver_sql("SELECT pk FROM sessions ORDER BY pk").all():
        rebuild_session(conn, session_pk, paths=paths)
    return conn.exec_driver_sql("SELECT count(*) FROM tool_call_pairs").scalar_one()


@functools.cache
def _failed_sql() -> str:
    """Before a failed result answers its calls, their failures in ``activity_days`` (built on
    first use: ``activity_days`` imports this module's importers)."""
    return activity_days.failed_sql(_OPEN_CALLS)


def _write(cursor: Any, dialect: Dialect, calls: list[tuple], answers: list[tuple], insert: str = _INSERT, *,
           failures: bool = False) -> None:
    """Insert the calls unanswered, then let the results (in seq order) answer them; with
    ``failures``, a failed result first counts the calls it is about to answer in their rows'
    ``activity_days`` (:func:`_failed_sql`: the same open calls, by the same index)."""
    if calls:
        cursor.executemany(writes.dbapi_sql(dialect, insert), calls)
    answer, failed = writes.dbapi_sql(dialect, _ANSWER), writes.dbapi_sql(dialect, _failed_sql())
    waiting: list[tuple] = []  # answers in a row that fail nothing: one executemany
    for values in answers:
        if failures and values[1]:
            if waiting:
                cursor.executemany(answer, waiting)
                waiting = []
            cursor.execute(failed, values[4:])
            cursor.execute(answer, values)
        else:
            waiting.append(values)
    if waiting:
        cursor.executemany(answer, waiting)


def _facts(facts: str | dict) -> dict:
    """``facts`` as written (a JSON string) or as PostgreSQL's driver reads ``jsonb`` (a dict)."""
    return orjson.loads(facts) if isinstance(facts, str) else facts


def _calls(session_pk: int, seq: int, timestamp: str | None, facts: str | dict) -> Iterable[tuple]:
    """``_INSERT`` parameters of a message's tool calls."""
    ms = _ms(timestamp)
    for index, call in enumerate(_facts(facts).get("toolCalls", ())):
        arguments = call.get("arguments")
        path = arguments.get("path") if arguments.__class__ is dict else None
        yield session_pk, seq, index, call.get("id"), call.get("name"), ms, path if path.__class__ is str else None


def _answer(session_pk: int, seq: int, timestamp: str | None, facts: str | dict, text_chars: int) -> tuple | None:
    """``_ANSWER`` parameters of a tool result (None without a ``toolCallId``: it answers nothing)."""
    values = _facts(facts)
    call_id = values.get("toolCallId")
    if call_id is None:
        return None
    return (seq, values.get("isError"), values.get("textChars", text_chars), _ms(timestamp), session_pk, call_id,
            seq)


def _ms(timestamp: str | None) -> int | None:
    """A row's timestamp in ms (JavaScript's ``Date`` reading), None when absent or invalid."""
    ms = None if timestamp is None else parse_js_date(timestamp)
    return None if ms is None else int(ms)
