"""Recomputing the analysis columns of stored rows from their ``line``, and the search index.

Migration 0003 runs it once for rows stored before it (0006 pairs the tool calls);
``pi-store fts rebuild --recompute`` runs it after the extraction rules change.
Writes go through the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from store.analysis import activity_days, fts, pairs
from store.analysis.extract import ANALYSIS_COLUMNS, NO_ANALYSIS, analysis_values
from store.db import current_path, session_times
from store.db.engine import is_sqlite
from store.db.writes import dbapi_sql
from store.format import JsonLineError, js_parse

BATCH = 2000
_SELECT = "SELECT pk, line FROM entries WHERE kind = 'entry' AND pk > ? ORDER BY pk LIMIT ?"


def recompute_analysis(conn: Connection, columns: Sequence[str] = ANALYSIS_COLUMNS, *, tool_calls: bool = True,
                       usage: bool = True) -> int:
    """Recompute every entry's analysis columns, the search index, (``tool_calls``) the
    tool-call pairs and (``usage``) the totals kept per day and path and the times of sessions
    with timestamps in other shapes than Pi's (``store.db.session_times``); returns the number of
    entry rows.
    ``columns`` / ``tool_calls`` / ``usage``: what to write (a migration names what exists at its
    revision, so that what later revisions add does not break its upgrade)."""
    fts.clear(conn)  # SQLite: nothing is indexed while the text changes (no per-row index work)
    cursor = conn.connection.dbapi_connection.cursor()
    positions = [ANALYSIS_COLUMNS.index(column) for column in columns]
    select = dbapi_sql(conn.dialect, _SELECT)
    update = dbapi_sql(conn.dialect, f"UPDATE entries SET {', '.join(f'{c} = ?' for c in columns)} WHERE pk = ?")
    last, count = 0, 0
    while True:
        cursor.execute(select, (last, BATCH))
        rows = cursor.fetchall()
        if not rows:
            break
        values = [(_analysis_of(line), pk) for pk, line in rows]
        cursor.executemany(update, [(*(analysis[i] for i in positions), pk) for analysis, pk in values])
        last, count = rows[-1][0], count + len(rows)
    if is_sqlite(conn) and fts.one_copy(conn):  # (new rows are written so: store.db.writes.insert_sql)
        fts.keep_once(conn)
    fts.catch_up(conn)
    if tool_calls:
        pairs.rebuild(conn)
    if usage:  # (revisions 0011 and 0012)
        activity_days.rebuild(conn)
        current_path.refresh_all(conn)
        session_times.refresh_odd_sessions(conn)
    return count


def _analysis_of(line: str) -> tuple:
    try:
        value = js_parse(line)
    except JsonLineError:
        return NO_ANALYSIS
    return analysis_values(value) if isinstance(value, dict) else NO_ANALYSIS
