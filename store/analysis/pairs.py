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
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from sqlalchemy import Connection, Dialect

from store.db import writes
from store.format.jsdate import parse_js_date

_INSERT = ("INSERT INTO tool_call_pairs (session_pk, call_seq, call_index, tool_call_id, name, call_ms) "
           "VALUES (?, ?, ?, ?, ?, ?)")
# a result answers the session's unanswered calls with its id written before it; given in seq
# order, each call gets the first result after it
_ANSWER = ("UPDATE tool_call_pairs SET result_seq = ?, is_error = ?, result_chars = ?, "
           "duration_ms = CAST(? AS BIGINT) - call_ms "
           "WHERE session_pk = ? AND tool_call_id = ? AND result_seq IS NULL AND call_seq < ?")
_SESSION_ROWS = ("SELECT seq, role, timestamp, facts, length(search_text) FROM entries "
                 "WHERE session_pk = ? AND kind = 'entry' AND type = 'message' "
                 "AND role IN ('assistant', 'toolResult') ORDER BY seq")


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
    calls: list[tuple] = []
    answers: list[tuple] = []
    for row in rows:
        if row[type_at] != "message" or row[kind_at] != "entry":
            continue
        role = row[role_at]
        if role == "assistant":
            if '"toolCalls"' in row[facts_at]:
                calls.extend(_calls(row[spk_at], row[seq_at], row[ts_at], row[facts_at]))
        elif role == "toolResult":
            answer = _answer(row[spk_at], row[seq_at], row[ts_at], row[facts_at], len(row[text_at]))
            if answer is not None:
                answers.append(answer)
    _write(cursor, dialect, calls, answers)


def rebuild_session(conn: Connection, session_pk: int) -> None:
    """Pair one session's calls and results again from its rows (inside the caller's transaction)."""
    cursor = conn.connection.dbapi_connection.cursor()
    cursor.execute(writes.dbapi_sql(conn.dialect, "DELETE FROM tool_call_pairs WHERE session_pk = ?"),
                   (session_pk,))
    cursor.execute(writes.dbapi_sql(conn.dialect, _SESSION_ROWS), (session_pk,))
    calls: list[tuple] = []
    answers: list[tuple] = []
    for seq, role, timestamp, facts, chars in cursor.fetchall():
        if role == "assistant":
            calls.extend(_calls(session_pk, seq, timestamp, facts))
        elif (answer := _answer(session_pk, seq, timestamp, facts, chars)) is not None:
            answers.append(answer)
    _write(cursor, conn.dialect, calls, answers)


def rebuild(conn: Connection) -> int:
    """Pair every session again (inside the caller's transaction); returns the number of calls."""
    conn.exec_driver_sql("DELETE FROM tool_call_pairs")
    for (session_pk,) in conn.exec_driver_sql("SELECT pk FROM sessions ORDER BY pk").all():
        rebuild_session(conn, session_pk)
    return conn.exec_driver_sql("SELECT count(*) FROM tool_call_pairs").scalar_one()


def _write(cursor: Any, dialect: Dialect, calls: list[tuple], answers: list[tuple]) -> None:
    """Insert the calls unanswered, then let the results (in seq order) answer them."""
    if calls:
        cursor.executemany(writes.dbapi_sql(dialect, _INSERT), calls)
    if answers:
        cursor.executemany(writes.dbapi_sql(dialect, _ANSWER), answers)


def _facts(facts: str | dict) -> dict:
    """``facts`` as written (a JSON string) or as PostgreSQL's driver reads ``jsonb`` (a dict)."""
    return orjson.loads(facts) if isinstance(facts, str) else facts


def _calls(session_pk: int, seq: int, timestamp: str | None, facts: str | dict) -> Iterable[tuple]:
    """``_INSERT`` parameters of a message's tool calls."""
    ms = _ms(timestamp)
    for index, call in enumerate(_facts(facts).get("toolCalls", ())):
        yield session_pk, seq, index, call.get("id"), call.get("name"), ms


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
