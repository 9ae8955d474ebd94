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

import re
from typing import Any

from sqlalchemy import Connection, Dialect

from store.db import queries

_DELETE = "DELETE FROM path_runs WHERE session_pk = :spk"
# store.db.queries' walk from the session's leaf row to the root, the leaf's run (step 0) left open
_INSERT = (
    "INSERT INTO path_runs (session_pk, first_seq, last_seq) "
    + queries.RUNS_WALK.replace(":leaf", "(SELECT leaf_seq FROM sessions WHERE pk = :spk)")
    + "SELECT :spk, run_start, CASE WHEN step = 0 THEN NULL ELSE run_end END FROM walk"
)


def _named(dialect: Dialect, sql: str) -> str:
    """``sql`` written with ``:name`` parameters in the paramstyle of ``dialect``'s driver
    (SQLite's driver takes ``:name`` as it is; psycopg ``%(name)s``)."""
    return sql if dialect.paramstyle in ("qmark", "named") else re.sub(r":(\w+)", r"%(\1)s", sql)


def refresh(cursor: Any, dialect: Dialect, session_pk: int) -> None:
    """Rewrite the ``path_runs`` rows of one session from its stored rows and ``leaf_seq``, on a
    DBAPI cursor of the writing transaction."""
    cursor.execute(_named(dialect, _DELETE), {"spk": session_pk})
    cursor.execute(_named(dialect, _INSERT), {"spk": session_pk})


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
