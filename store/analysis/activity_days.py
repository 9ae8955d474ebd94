"""The ``activity`` view added up per session, day, provider and model, kept as rows are written
(``activity_days``).

``activity`` (migration 0007) has one row per message or usage-bearing entry: what ``pi-store
stats`` and ``stats --by day|model|cwd`` add up. A grouping of it over a whole store reads every
message row and looks up each assistant message's tool calls: seconds at a million entries. The
totals here are that view's columns summed per key, a few rows per session and day:

* rows inserted add to their key's totals (:func:`add_inserted`, or :class:`DayTotals` for a
  session written whole): one upsert per key and statement, nothing for rows the view leaves out;
  an assistant message's tool calls are counted from its ``facts`` (one ``tool_call_pairs`` row
  each, ``store.analysis.pairs``);
* a result that answers calls with an error adds the failures to the calls' keys
  (:func:`failed_sql`, run by ``store.analysis.pairs`` where it pairs in SQL; :meth:`DayTotals.fail`
  where a session is paired in memory);
* a session deleted takes its rows along (``ON DELETE CASCADE``); a session whose rows are
  removed or replaced otherwise (a prune, a re-import replacing it) is added up again from its
  rows (:func:`rebuild_session`); :func:`rebuild` does every session (migration 0012,
  ``pi-store fts rebuild --recompute``).

The key is ``(session_pk, day, provider, model)`` with ``day`` the first ten characters of the
row's ``timestamp`` — what ``substr(timestamp, 1, 10)`` gives — and ``''`` for a row without
one; ``provider`` and ``model`` as the ``entries`` columns hold them (``''`` when absent: every
row without usage). ``calls`` counts the usage rows; the view ``usage_days`` (revision 0011's
table) is the keys that have any.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from sqlalchemy import Connection, Dialect

from store.db import writes

KEY = ("session_pk", "day", "provider", "model")
TOTALS = ("messages", "user_messages", "assistant_messages", "tool_results", "tool_calls", "tool_errors",
          "calls", "input", "output", "cache_read", "cache_write", "cost")
_CONFLICT = "ON CONFLICT (session_pk, day, provider, model) DO UPDATE SET "
ADD = (f"INSERT INTO activity_days ({', '.join(KEY + TOTALS)}) VALUES ({', '.join('?' for _ in KEY + TOTALS)}) "
       + _CONFLICT + ", ".join(f"{c} = activity_days.{c} + excluded.{c}" for c in TOTALS))
_DAY = "substr(COALESCE(e.timestamp, ''), 1, 10)"


def failed_sql(open_calls: str) -> str:
    """The upsert adding one failure to the key of each call that ``open_calls`` (a condition on
    ``tool_call_pairs``, the calls a failed result is about to answer: ``store.analysis.pairs``)
    selects; its parameters are the condition's."""
    return (f"INSERT INTO activity_days ({', '.join(KEY + TOTALS)}) "
            f"SELECT e.session_pk, {_DAY}, e.provider, e.model, "
            + ", ".join("count(*)" if total == "tool_errors" else "0" for total in TOTALS)
            + f" FROM (SELECT session_pk, call_seq FROM tool_call_pairs WHERE {open_calls}) AS p "
            "JOIN entries AS e ON e.session_pk = p.session_pk AND e.seq = p.call_seq "
            f"GROUP BY e.session_pk, {_DAY}, e.provider, e.model "
            + _CONFLICT + "tool_errors = activity_days.tool_errors + excluded.tool_errors")
# the view's rows of stored sessions (``{where}``: which), with their tool calls counted in
# tool_call_pairs, added up in Python: SQLite's sum() of integers fails past BIGINT's range,
# where a few crafted rows can take it
_STORED_ROWS = (
    "SELECT e.session_pk, e.timestamp, e.type, e.role, e.provider, e.model, e.has_usage, e.usage_input, "
    "e.usage_output, e.usage_cache_read, e.usage_cache_write, e.usage_cost, "
    "CASE WHEN e.type = 'message' AND e.role = 'assistant' THEN (SELECT count(*) FROM tool_call_pairs AS p "
    " WHERE p.session_pk = e.session_pk AND p.call_seq = e.seq) ELSE 0 END, "
    "CASE WHEN e.type = 'message' AND e.role = 'assistant' THEN (SELECT count(*) FROM tool_call_pairs AS p "
    " WHERE p.session_pk = e.session_pk AND p.call_seq = e.seq AND p.is_error = 1) ELSE 0 END "
    "FROM entries AS e WHERE e.kind = 'entry' AND (e.type = 'message' OR e.has_usage = 1){where} "
    "ORDER BY e.session_pk, e.seq")

_READ = ("session_pk", "seq", "kind", "timestamp", "type", "role", "provider", "model", "facts", "has_usage",
         "usage_input", "usage_output", "usage_cache_read", "usage_cache_write", "usage_cost")


@functools.cache
def _positions() -> tuple[int, ...]:
    """Where the columns read here sit in a ``store.db.writes.ROW_COLUMNS`` tuple."""
    return tuple(writes.ROW_COLUMNS.index(name) for name in _READ)


class DayTotals:
    """Totals of rows about to be written (``ROW_COLUMNS`` tuples), by key, until :meth:`write`.
    ``failures``: also remember which key each tool-calling message went to, for :meth:`fail`."""

    def __init__(self, *, failures: bool = False) -> None:
        self._totals: dict[tuple, list] = {}
        self._call_keys: dict[tuple[int, int], tuple] | None = {} if failures else None

    def add(self, rows: Sequence[tuple]) -> None:
        """Add the view's rows among ``rows`` (``ROW_COLUMNS`` tuples) to the totals."""
        (spk_at, seq_at, kind_at, ts_at, type_at, role_at, provider_at, model_at, facts_at, usage_at,
         *amounts_at) = _positions()
        for row in rows:
            if row[kind_at] != "entry":
                continue
            message = row[type_at] == "message"
            usage = row[usage_at] == 1
            if not message and not usage:
                continue
            role = row[role_at] if message else None
            calls = 0
            if role == "assistant" and '"toolCalls"' in row[facts_at]:
                calls = len(orjson.loads(row[facts_at]).get("toolCalls", ()))
            key = (row[spk_at], (row[ts_at] or "")[:10], row[provider_at], row[model_at])
            if calls and self._call_keys is not None:
                self._call_keys[row[spk_at], row[seq_at]] = key
            self._add(key, message, role, calls, 0, usage, [row[at] for at in amounts_at] if usage else ())

    def add_stored(self, rows: Iterable[tuple]) -> None:
        """Add ``_STORED_ROWS`` rows (the view's rows of stored sessions, tool calls counted)."""
        for spk, timestamp, type_, role, provider, model, usage, *amounts, calls, errors in rows:
            message = type_ == "message"
            self._add((spk, (timestamp or "")[:10], provider, model), message, role if message else None,
                      calls, errors, usage == 1, amounts)

    def fail(self, calls: Iterable[tuple[int, int]]) -> None:
        """Count failed results of calls added here (``(session_pk, call_seq)``, one per call)."""
        assert self._call_keys is not None, "DayTotals(failures=True) remembers the calls' keys"
        for call in calls:
            self._totals[self._call_keys[call]][5] += 1

    def _add(self, key: tuple, message: bool, role: str | None, calls: int, errors: int, usage: bool,
             amounts: Sequence) -> None:
        totals = self._totals.get(key)
        if totals is None:
            totals = self._totals[key] = [0] * len(TOTALS)
        if message:
            totals[0] += 1
            totals[1] += role == "user"
            totals[2] += role == "assistant"
            totals[3] += role == "toolResult"
            totals[4] += calls
            totals[5] += errors
        if usage:
            totals[6] += 1
            for i, amount in enumerate(amounts, 7):
                totals[i] += amount

    def parameters(self, dialect: Dialect) -> list[tuple]:
        """One ``ADD`` parameter tuple per key (token sums past BIGINT as SQLite can bind them;
        the counts cannot get there: they count rows)."""
        if dialect.name != "sqlite":
            return [(*key, *totals) for key, totals in self._totals.items()]
        bindable = writes.sqlite_bindable
        return [(*key, *totals[:7], bindable(totals[7]), bindable(totals[8]), bindable(totals[9]), bindable(totals[10]),
                 totals[11]) for key, totals in self._totals.items()]

    def write(self, cursor: Any, dialect: Dialect) -> None:
        """Add the totals to the stored ones (inside the rows' transaction), and start again."""
        if len(self._totals) == 1:  # (one row's: an append)
            cursor.execute(add_sql(dialect), self.parameters(dialect)[0])
        elif self._totals:
            cursor.executemany(add_sql(dialect), self.parameters(dialect))
        self._totals = {}
        if self._call_keys:
            self._call_keys = {}


def add_sql(dialect: Dialect) -> str:
    """The upsert adding one key's totals, in ``dialect``'s paramstyle."""
    return writes.dbapi_sql(dialect, ADD)


def add_inserted(cursor: Any, dialect: Dialect, rows: Sequence[tuple]) -> None:
    """Add the view's rows among ``rows`` (just inserted, ``ROW_COLUMNS`` tuples) to the totals."""
    totals = DayTotals()
    totals.add(rows)
    totals.write(cursor, dialect)


def rebuild_session(conn: Connection, session_pk: int) -> None:
    """Add up one session's totals again from its rows and pairs (inside the caller's
    transaction, after its ``tool_call_pairs`` are right)."""
    _rebuild(conn, session_pk)


def rebuild(conn: Connection) -> None:
    """Add up every session's totals again (inside the caller's transaction)."""
    _rebuild(conn, None)


def recounted(conn: Connection, session_pk: int) -> dict[tuple, list]:
    """The session's totals as its rows and pairs give them, by key (``TOTALS`` order); nothing
    is written (``verify``)."""
    cursor = conn.connection.dbapi_connection.cursor()
    cursor.execute(writes.dbapi_sql(conn.dialect, _STORED_ROWS.format(where=" AND e.session_pk = ?")),
                   (session_pk,))
    totals = DayTotals()
    totals.add_stored(cursor.fetchall())
    return totals._totals


def stored(conn: Connection, session_pk: int) -> dict[tuple, list]:
    """The session's ``activity_days`` rows, by key (``TOTALS`` order)."""
    cursor = conn.connection.dbapi_connection.cursor()
    cursor.execute(writes.dbapi_sql(conn.dialect, f"SELECT {', '.join(KEY + TOTALS)} FROM activity_days "
                                    "WHERE session_pk = ?"), (session_pk,))
    return {tuple(row[:4]): list(row[4:]) for row in cursor.fetchall()}


def _rebuild(conn: Connection, session_pk: int | None) -> None:
    """:func:`rebuild_session` (``session_pk``), or :func:`rebuild` (None)."""
    cursor = conn.connection.dbapi_connection.cursor()
    one = () if session_pk is None else (session_pk,)
    cursor.execute(writes.dbapi_sql(conn.dialect, "DELETE FROM activity_days"
                                    + (" WHERE session_pk = ?" if one else "")), one)
    cursor.execute(writes.dbapi_sql(conn.dialect, _STORED_ROWS.format(where=" AND e.session_pk = ?" if one else "")),
                   one)
    writer = conn.connection.dbapi_connection.cursor()
    while rows := cursor.fetchmany(10_000):
        totals = DayTotals()  # a key split between two batches is added to by the second (an upsert)
        totals.add_stored(rows)
        totals.write(writer, conn.dialect)
