"""The current path of every session, kept as rows of ``path_runs`` (migration 0009).

A session's current path (root → leaf, the leaf being its last entry row: ``sessions.leaf_seq``)
is a few *runs* of consecutive rows (``entries.run_start``, see ``store.db.queries``). The run that
ends at the leaf grows with every linear append, so its end is not stored: its ``last_seq`` is
NULL, meaning "through ``sessions.leaf_seq``". Every other row of ``path_runs`` is a closed run
``[first_seq, last_seq]``. The rows change only when the leaf's run changes: an appended entry
that starts a run of its own (a branch, or a parent that is not the row just before it), a file
imported or stored anew, rows removed by a prune. A linear append writes nothing here.

:func:`refresh` rewrites one session's rows with a walk of its path (one step per run); the
writers call it after the session row has its new ``leaf_seq``:

* ``SessionManager`` (appends, batches, branches with a summary; the async API wraps it) when the
  new leaf's run starts among the appended rows (:func:`moved_run`);
* ``store.bulk.finish_session`` / ``advance_session`` (imports, re-imports, sessions made from
  entries): always, the tree of the stored rows may have been relinked;
* ``store.retention`` after a prune renumbers the kept rows.

Deleting a session deletes its rows (``ON DELETE CASCADE`` from ``sessions``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Dialect

from store.db.writes import dbapi_sql

_DELETE = "DELETE FROM path_runs WHERE session_pk = ?"
# the walk of store.db.queries, from the leaf's run to the root; the leaf's run is left open
_INSERT = """
INSERT INTO path_runs (session_pk, first_seq, last_seq)
WITH RECURSIVE walk(first_seq, last_seq) AS (
    SELECT e.run_start, CAST(NULL AS INTEGER)
    FROM sessions AS s
    CROSS JOIN entries AS e
    WHERE s.pk = ? AND e.session_pk = s.pk AND e.seq = s.leaf_seq AND e.run_start IS NOT NULL
  UNION ALL
    SELECT p.run_start, p.seq
    FROM walk AS w
    CROSS JOIN entries AS h
    CROSS JOIN entries AS p
    WHERE h.session_pk = ? AND h.seq = w.first_seq
      AND p.session_pk = ? AND p.seq = h.parent_seq
      AND p.depth < h.depth
)
SELECT ?, first_seq, last_seq FROM walk
"""


def refresh(cursor: Any, dialect: Dialect, session_pk: int) -> None:
    """Rewrite the ``path_runs`` rows of one session from its stored rows and ``leaf_seq``, on a
    DBAPI cursor of the writing transaction."""
    cursor.execute(dbapi_sql(dialect, _DELETE), (session_pk,))
    cursor.execute(dbapi_sql(dialect, _INSERT), (session_pk, session_pk, session_pk, session_pk))


def refresh_on(conn: Connection, session_pk: int) -> None:
    """:func:`refresh` inside a SQLAlchemy connection's transaction."""
    refresh(conn.connection.dbapi_connection.cursor(), conn.dialect, session_pk)


def moved_run(first_appended_seq: int, leaf_run_start: int) -> bool:
    """Whether appending rows from ``first_appended_seq`` on, the last of them the new leaf with
    ``leaf_run_start``, changed the session's ``path_runs``. The leaf's run starts either among
    the appended rows (a new run: the rows change) or before them; then the run reaches the row
    just before the first appended one through parent links, so that row is an entry, the
    previous leaf, and the leaf's run is the one it was in."""
    return leaf_run_start >= first_appended_seq
