"""Usage totals per session, day, provider and model, kept as rows are written (``usage_days``).

``usage_ledger`` has one row per usage record (every assistant message, summaries with usage);
an aggregate of it over time — cost per model per day, a cache hit rate — reads each of those
rows, and its ``timestamp`` is in no index: at a million entries that is seconds. The totals
here are what such a query adds up, a few rows per session and day:

* rows inserted add to their key's totals (:func:`add_inserted`, or :class:`DayTotals` for a
  session written whole): one upsert per key and statement, nothing for rows without usage;
* a session deleted takes its rows along (``ON DELETE CASCADE``); a session whose rows are
  removed or replaced otherwise (a prune, a re-import replacing it) is added up again from its
  rows (:func:`rebuild_session`); :func:`rebuild` does every session (migration 0011,
  ``pi-store fts rebuild --recompute``).

The key is ``(session_pk, day, provider, model)`` with ``day`` the first ten characters of the
row's ``timestamp`` — what ``substr(timestamp, 1, 10)`` gives — and ``''`` for a row without
one; ``provider`` and ``model`` as the ``entries`` columns hold them (``''`` when absent).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Dialect

from store.db import writes

_TOTALS = ("calls", "input", "output", "cache_read", "cache_write", "cost")
ADD = (f"INSERT INTO usage_days (session_pk, day, provider, model, {', '.join(_TOTALS)}) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_pk, day, provider, model) DO UPDATE SET "
        + ", ".join(f"{c} = usage_days.{c} + excluded.{c}" for c in _TOTALS))
# the usage rows of stored sessions (``{where}``: which), added up in Python: SQLite's sum() of
# integers fails past BIGINT's range, where a few crafted rows can take it
_USAGE_ROWS = ("SELECT session_pk, kind, timestamp, provider, model, has_usage, usage_input, usage_output, "
               "usage_cache_read, usage_cache_write, usage_cost FROM entries "
               "WHERE kind = 'entry' AND has_usage = 1{where} ORDER BY session_pk, seq")


_READ = ("session_pk", "kind", "timestamp", "provider", "model", "has_usage", "usage_input", "usage_output",
         "usage_cache_read", "usage_cache_write", "usage_cost")


@functools.cache
def _positions() -> tuple[int, ...]:
    """Where the columns read here sit in a ``store.db.writes.ROW_COLUMNS`` tuple."""
    return tuple(writes.ROW_COLUMNS.index(name) for name in _READ)


class DayTotals:
    """Totals of rows about to be written (``ROW_COLUMNS`` tuples), by key, until :meth:`write`."""

    def __init__(self) -> None:
        self._totals: dict[tuple, list] = {}

    def add(self, rows: Sequence[tuple], positions: Sequence[int] | None = None) -> None:
        """Add ``rows`` (``ROW_COLUMNS`` tuples, or tuples of ``_READ``'s columns where
        ``positions`` says so) to the totals."""
        spk_at, kind_at, ts_at, provider_at, model_at, usage_at, *amounts_at = positions or _positions()
        for row in rows:
            if row[usage_at] != 1 or row[kind_at] != "entry":
                continue
            key = (row[spk_at], (row[ts_at] or "")[:10], row[provider_at], row[model_at])
            totals = self._totals.get(key)
            if totals is None:
                self._totals[key] = [1, *(row[at] for at in amounts_at)]
            else:
                totals[0] += 1
                for i, at in enumerate(amounts_at, 1):
                    totals[i] += row[at]

    def parameters(self, dialect: Dialect) -> list[tuple]:
        """One ``ADD`` parameter tuple per key."""
        bindable = writes.bindable_total
        return [(*key, *(bindable(dialect, v) for v in totals)) for key, totals in self._totals.items()]

    def write(self, cursor: Any, dialect: Dialect) -> None:
        """Add the totals to the stored ones (inside the rows' transaction), and start again."""
        if self._totals:
            cursor.executemany(add_sql(dialect), self.parameters(dialect))
            self._totals = {}


def add_sql(dialect: Dialect) -> str:
    """The upsert adding one key's totals, in ``dialect``'s paramstyle."""
    return writes.dbapi_sql(dialect, ADD)


def add_inserted(cursor: Any, dialect: Dialect, rows: Sequence[tuple]) -> None:
    """Add the usage of ``rows`` (just inserted, ``ROW_COLUMNS`` tuples) to the totals."""
    totals = DayTotals()
    totals.add(rows)
    totals.write(cursor, dialect)


def rebuild_session(conn: Connection, session_pk: int) -> None:
    """Add up one session's totals again from its rows (inside the caller's transaction)."""
    _rebuild(conn, " AND session_pk = ?", (session_pk,))


def rebuild(conn: Connection) -> None:
    """Add up every session's totals again (inside the caller's transaction)."""
    _rebuild(conn, "", ())


def _rebuild(conn: Connection, where: str, parameters: tuple) -> None:
    cursor = conn.connection.dbapi_connection.cursor()
    cursor.execute(writes.dbapi_sql(conn.dialect, "DELETE FROM usage_days WHERE true" + where), parameters)
    cursor.execute(writes.dbapi_sql(conn.dialect, _USAGE_ROWS.format(where=where)), parameters)
    positions, writer = range(len(_READ)), conn.connection.dbapi_connection.cursor()
    while rows := cursor.fetchmany(10_000):
        totals = DayTotals()  # a key split between two batches is added to by the second (an upsert)
        totals.add(rows, positions)
        totals.write(writer, conn.dialect)
