"""Tool calls paired with their results once, when rows are written (``tool_call_pairs``).

A tool call (a ``toolCall`` block of an assistant message) is answered by the first later
``toolResult`` message of its session whose ``toolCallId`` is the call's id — what the
``tool_calls`` view of migration 0003 computed at query time by joining every call with every
later result of its session (quadratic per session). Here the pairing is done as rows are
inserted, from the rows' analysis columns (``facts``, ``search_text``), in Python:

* new calls are paired with the results among the same inserted rows;
* calls stored earlier and still unanswered (``result_seq IS NULL``, a partial index) are paired
  with the new results. Rows are inserted in ``seq`` order, so an answered call keeps its
  answer: no result can be written before it any more.

The cost falls on rows that hold a call or a result only (one small insert, and a look-up of the
session's unanswered calls plus an update); other rows cost a type check.

Rows follow their call's row through the foreign key (deleted with it, renumbered with it); where
results move or go away without their calls (``store.retention`` prune), :func:`rebuild_session`
pairs the session again; :func:`rebuild` does every session (migration 0006,
``pi-store fts rebuild --recompute``).
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import orjson
from sqlalchemy import Connection, Dialect

from store.db import writes
from store.format.jsdate import parse_js_date

_INSERT = ("INSERT INTO tool_call_pairs (session_pk, call_seq, call_index, tool_call_id, name, result_seq, "
           "is_error, result_chars, duration_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
_OPEN = ("SELECT p.call_seq, p.call_index, p.tool_call_id, e.timestamp FROM tool_call_pairs AS p "
         "JOIN entries AS e ON e.session_pk = p.session_pk AND e.seq = p.call_seq "
         "WHERE p.session_pk = ? AND p.result_seq IS NULL AND p.tool_call_id IS NOT NULL")
_ANSWER = ("UPDATE tool_call_pairs SET result_seq = ?, is_error = ?, result_chars = ?, duration_ms = ? "
           "WHERE session_pk = ? AND call_seq = ? AND call_index = ?")
_SESSION_ROWS = ("SELECT seq, role, timestamp, facts, length(search_text) FROM entries "
                 "WHERE session_pk = ? AND kind = 'entry' AND type = 'message' "
                 "AND role IN ('assistant', 'toolResult') ORDER BY seq")
_MAX_MS = 2**63 - 1


class Call(NamedTuple):
    seq: int
    index: int
    tool_call_id: str | None
    name: str | None
    ms: float | None


class Result(NamedTuple):
    seq: int
    tool_call_id: str | None
    is_error: int | None
    chars: int
    ms: float | None


@functools.cache
def _positions() -> tuple[int, ...]:
    """Where the columns read here sit in a ``store.db.writes.ROW_COLUMNS`` tuple."""
    columns = writes.ROW_COLUMNS
    return tuple(columns.index(name) for name in
                 ("session_pk", "seq", "kind", "type", "role", "timestamp", "facts", "search_text"))


def pair_inserted(cursor: Any, dialect: Dialect, rows: Sequence[tuple]) -> None:
    """Pair the calls and results among ``rows`` (just inserted, ``ROW_COLUMNS`` tuples in
    ``seq`` order per session) with each other and with the stored unanswered calls."""
    spk_at, seq_at, kind_at, type_at, role_at, ts_at, facts_at, text_at = _positions()
    by_session: dict[int, tuple[list[Call], list[Result]]] = {}
    for row in rows:
        if row[type_at] != "message" or row[kind_at] != "entry":
            continue
        role = row[role_at]
        if role == "assistant":
            if '"toolCalls"' not in row[facts_at]:
                continue
            found = by_session.setdefault(row[spk_at], ([], []))
            found[0].extend(_calls(row[seq_at], row[ts_at], row[facts_at]))
        elif role == "toolResult":
            found = by_session.setdefault(row[spk_at], ([], []))
            found[1].append(_result(row[seq_at], row[ts_at], row[facts_at], len(row[text_at])))
    for session_pk, (calls, results) in by_session.items():
        _pair(cursor, dialect, session_pk, calls, results, stored=True)


def rebuild_session(conn: Connection, session_pk: int) -> None:
    """Pair one session's calls and results again from its rows (inside the caller's transaction)."""
    cursor = conn.connection.dbapi_connection.cursor()
    cursor.execute(writes.dbapi_sql(conn.dialect, "DELETE FROM tool_call_pairs WHERE session_pk = ?"),
                   (session_pk,))
    cursor.execute(writes.dbapi_sql(conn.dialect, _SESSION_ROWS), (session_pk,))
    calls: list[Call] = []
    results: list[Result] = []
    for seq, role, timestamp, facts, chars in cursor.fetchall():
        if role == "assistant":
            calls.extend(_calls(seq, timestamp, facts))
        else:
            results.append(_result(seq, timestamp, facts, chars))
    _pair(cursor, conn.dialect, session_pk, calls, results, stored=False)


def rebuild(conn: Connection) -> int:
    """Pair every session again (inside the caller's transaction); returns the number of calls."""
    conn.exec_driver_sql("DELETE FROM tool_call_pairs")
    for (session_pk,) in conn.exec_driver_sql("SELECT pk FROM sessions ORDER BY pk").all():
        rebuild_session(conn, session_pk)
    return conn.exec_driver_sql("SELECT count(*) FROM tool_call_pairs").scalar_one()


def _pair(cursor: Any, dialect: Dialect, session_pk: int, calls: list[Call], results: list[Result], *,
          stored: bool) -> None:
    answers: dict[str, list[Result]] = {}
    for result in results:  # ascending seq
        if result.tool_call_id is not None:
            answers.setdefault(result.tool_call_id, []).append(result)
    if stored and answers:
        cursor.execute(writes.dbapi_sql(dialect, _OPEN), (session_pk,))
        waiting = [Call(seq, index, call_id, None, _ms(timestamp))
                   for seq, index, call_id, timestamp in cursor.fetchall() if call_id in answers]
        updates = []
        for call in waiting:
            result = _answer(call, answers)
            if result is not None:
                updates.append((*_result_columns(call, result), session_pk, call.seq, call.index))
        if updates:
            cursor.executemany(writes.dbapi_sql(dialect, _ANSWER), updates)
    if calls:
        cursor.executemany(writes.dbapi_sql(dialect, _INSERT), [
            (session_pk, call.seq, call.index, call.tool_call_id, call.name,
             *_result_columns(call, _answer(call, answers)))
            for call in calls
        ])


def _answer(call: Call, answers: dict[str, list[Result]]) -> Result | None:
    """The first result after ``call`` with its id."""
    candidates = answers.get(call.tool_call_id) if call.tool_call_id is not None else None
    if not candidates:
        return None
    at = bisect.bisect_right(candidates, call.seq, key=lambda result: result.seq)
    return candidates[at] if at < len(candidates) else None


def _result_columns(call: Call, result: Result | None) -> tuple:
    if result is None:
        return None, None, None, None
    duration = None
    if call.ms is not None and result.ms is not None and abs(result.ms - call.ms) <= _MAX_MS:
        duration = int(result.ms - call.ms)
    return result.seq, result.is_error, result.chars, duration


def _facts(facts: str | dict) -> dict:
    """``facts`` as written (a JSON string) or as PostgreSQL's driver reads ``jsonb`` (a dict)."""
    return orjson.loads(facts) if isinstance(facts, str) else facts


def _calls(seq: int, timestamp: str | None, facts: str | dict) -> Iterable[Call]:
    ms = _ms(timestamp)
    for index, call in enumerate(_facts(facts).get("toolCalls", ())):
        yield Call(seq, index, call.get("id"), call.get("name"), ms)


def _result(seq: int, timestamp: str | None, facts: str | dict, text_chars: int) -> Result:
    values = _facts(facts)
    return Result(seq, values.get("toolCallId"), values.get("isError"), values.get("textChars", text_chars),
                  _ms(timestamp))


def _ms(timestamp: str | None) -> float | None:
    """A row's timestamp in ms (JavaScript's ``Date`` reading), None when absent or invalid."""
    return None if timestamp is None else parse_js_date(timestamp)
