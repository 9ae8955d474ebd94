"""Recomputing the analysis columns of stored rows from their ``line``, and the search index.

Migration 0003 runs it once for rows stored before it; ``pi-store fts rebuild --recompute`` runs it
after the extraction rules change. Writes go through the caller's transaction.
"""

from __future__ import annotations

from sqlalchemy import Connection

from store.analysis import fts
from store.analysis.extract import ANALYSIS_COLUMNS, NO_ANALYSIS, analysis_values
from store.db.writes import dbapi_sql
from store.format import JsonLineError, js_parse

BATCH = 2000
_SELECT = "SELECT pk, line FROM entries WHERE kind = 'entry' AND pk > ? ORDER BY pk LIMIT ?"
_UPDATE = f"UPDATE entries SET {', '.join(f'{c} = ?' for c in ANALYSIS_COLUMNS)} WHERE pk = ?"


def recompute_analysis(conn: Connection) -> int:
    """Recompute every entry's analysis columns and the search index; returns the number of
    entry rows."""
    fts.clear(conn)  # SQLite: nothing is indexed while the text changes (no per-row index work)
    cursor = conn.connection.dbapi_connection.cursor()
    select, update = dbapi_sql(conn.dialect, _SELECT), dbapi_sql(conn.dialect, _UPDATE)
    last, count = 0, 0
    while True:
        cursor.execute(select, (last, BATCH))
        rows = cursor.fetchall()
        if not rows:
            break
        cursor.executemany(update, [(*_analysis_of(line), pk) for pk, line in rows])
        last, count = rows[-1][0], count + len(rows)
    fts.catch_up(conn)
    return count


def _analysis_of(line: str) -> tuple:
    try:
        value = js_parse(line)
    except JsonLineError:
        return NO_ANALYSIS
    return analysis_values(value) if isinstance(value, dict) else NO_ANALYSIS
