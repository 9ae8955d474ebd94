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
* ``store.bulk.finish_session`` (imports, re-imports, sessions made from entries): always;
  ``advance_session`` (a synced file that grew) unless its new lines only lengthen the path —
  no new run, no stored row relinked by them — when it adds their turns (:func:`extend`);
* ``store.retention`` after a prune renumbers the kept rows.

Deleting a session deletes its rows (``ON DELETE CASCADE`` from ``sessions``).

The same moments count the session's messages that are off its path and their cost
(``sessions.off_path_messages`` / ``off_path_cost``) and add up the path's turns
(``path_turns``; both migration 0011, read by docs/sql.md's "Work left on abandoned branches" and
"The longest turns"). A linear append only lengthens the path: the off-path totals stay as they
are and its messages are added to the last turn or start new ones (:func:`extend`, or folded into
the single append's statement on PostgreSQL: ``store.db.appends``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Dialect

from store.db import queries, writes

_DELETE = "DELETE FROM path_runs WHERE session_pk = :spk"
# the messages off the path and their cost (``sessions.off_path_*``, migration 0011): what the
# ``messages`` view gives ``on_path = 0``, counted when the path changes
_COUNT_OFF_PATH = """UPDATE sessions SET (off_path_messages, off_path_cost) = (
    SELECT count(*), coalesce(sum(e.usage_cost), 0)
    FROM entries AS e
    WHERE e.session_pk = sessions.pk AND e.kind = 'entry' AND e.type = 'message'
      AND NOT EXISTS (SELECT 1 FROM path_runs AS r WHERE r.session_pk = e.session_pk AND r.first_seq <= e.seq
                      AND e.seq <= coalesce(r.last_seq, sessions.leaf_seq))
) WHERE pk = :spk"""
# the message rows of the session's path, in order (the turns are added up from them)
_PATH_MESSAGES = """SELECT e.seq, e.role, e.usage_output, e.usage_cost
FROM path_runs AS r
JOIN sessions AS s ON s.pk = r.session_pk
JOIN entries AS e ON e.session_pk = r.session_pk AND e.seq >= r.first_seq AND e.seq <= coalesce(r.last_seq, s.leaf_seq)
WHERE r.session_pk = :spk AND e.kind = 'entry' AND e.type = 'message'
ORDER BY e.seq"""
_DELETE_TURNS = "DELETE FROM path_turns WHERE session_pk = :spk"
_MESSAGES = ("SELECT count(*), coalesce(sum(usage_cost), 0) FROM entries "
             "WHERE session_pk = ? AND kind = 'entry' AND type = 'message'")
_INSERT_TURN = ("INSERT INTO path_turns (session_pk, turn, prompt_seq, steps, output_tokens, cost) "
                "VALUES (?, ?, ?, ?, ?, ?)")
# a linear append's rows, added to the path's last turn, or starting the next one (a user
# message); ``_LAST_TURN`` is the path's last turn, 0 when it has none (one index lookup: SQLite
# turns max() inside an INSERT's SELECT into a scan of the session's turns). ``{source}``: ''
# or a table the row is selected from (PostgreSQL's single append: only if the entry was inserted)
_LAST_TURN = "coalesce((SELECT turn FROM path_turns WHERE session_pk = ? ORDER BY turn DESC LIMIT 1), 0)"
ADD_TO_LAST_TURN = (
    "INSERT INTO path_turns (session_pk, turn, prompt_seq, steps, output_tokens, cost) "
    f"SELECT ?, {_LAST_TURN}, NULL, ?, ?, ?{{source}} WHERE true "
    "ON CONFLICT (session_pk, turn) DO UPDATE SET steps = path_turns.steps + excluded.steps, "
    "output_tokens = path_turns.output_tokens + excluded.output_tokens, cost = path_turns.cost + excluded.cost")
START_TURN = ("INSERT INTO path_turns (session_pk, turn, prompt_seq, steps, output_tokens, cost) "
              f"SELECT ?, {_LAST_TURN} + 1, ?, ?, ?, ?{{source}} WHERE true")
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


class PathTurns:
    """The path's message rows as turns: a turn starts at a user message (the ones before the
    first user message are turn 0); ``steps`` counts its assistant messages, ``output_tokens``
    and ``cost`` add up its messages' usage — what docs/sql.md's "longest turns" query computes
    with a window over ``messages WHERE on_path = 1``. Fed rows in ``seq`` order."""

    def __init__(self) -> None:
        self.turns: list[list] = []  # [starts with a user message, prompt_seq, steps, output, cost]

    def add(self, seq: int, role: str | None, output: int, cost: float) -> None:
        if role == "user" or not self.turns:
            self.turns.append([role == "user", seq if role == "user" else None, 0, 0, 0.0])
        turn = self.turns[-1]
        turn[2] += role == "assistant"
        turn[3] += output
        turn[4] += cost

    def numbered(self) -> list[tuple]:
        """The turns as ``path_turns`` rows without the session: ``(turn, prompt_seq, steps,
        output_tokens, cost)``, turn 0 holding the messages before the first user message."""
        first = 1 if self.turns and self.turns[0][0] else 0
        return [(number, prompt_seq, steps, output, cost)
                for number, (_starts, prompt_seq, steps, output, cost) in enumerate(self.turns, first)]

    def add_rows(self, rows: Sequence[tuple]) -> None:
        """Add the message rows among ``rows`` (``store.db.writes.ROW_COLUMNS`` tuples)."""
        kind_at, type_at, seq_at, role_at, output_at, cost_at = _positions()
        for row in rows:
            if row[type_at] == "message" and row[kind_at] == "entry":
                self.add(row[seq_at], row[role_at], row[output_at], row[cost_at])

    def appended(self, dialect: Dialect, session_pk: int) -> list[tuple[str, tuple]]:
        """The statements adding these turns to the path's stored ones (rows appended along it):
        the first adds to the last stored turn unless it starts with a user message."""
        statements = []
        for starts, prompt_seq, steps, output, cost in self.turns:
            totals = (steps, writes.bindable_total(dialect, output), cost)
            if starts:
                statements.append((START_TURN, (session_pk, session_pk, prompt_seq, *totals)))
            else:
                statements.append((ADD_TO_LAST_TURN, (session_pk, session_pk, *totals)))
        return statements


@functools.cache
def _positions() -> tuple[int, ...]:
    return tuple(writes.ROW_COLUMNS.index(name) for name in ("kind", "type", "seq", "role", "usage_output",
                                                              "usage_cost"))


# PostgreSQL adds up the turns in SQL (its sum() of bigints is a numeric: no overflow)
_PG_COUNT_TURNS = f"""INSERT INTO path_turns (session_pk, turn, prompt_seq, steps, output_tokens, cost)
SELECT :spk, turn, min(CASE WHEN role = 'user' THEN seq END), sum(CASE WHEN role = 'assistant' THEN 1 ELSE 0 END),
       sum(usage_output), sum(usage_cost)
FROM (SELECT seq, role, usage_output, usage_cost,
             sum(CASE WHEN role = 'user' THEN 1 ELSE 0 END) OVER (ORDER BY seq) AS turn
      FROM ({_PATH_MESSAGES}) AS path) AS numbered
GROUP BY turn"""
# ... and the whole refresh is one round trip: statements in one simple query, the key a literal.
# Without JIT for the rest of the transaction: the walk's estimates multiply with each recursion
# (millions of rows, on the statistics of a store being imported), which made PostgreSQL compile
# it (~300 ms per session at a few thousand sessions) to read a few rows.
_PG_REFRESH = "; ".join(("SET LOCAL jit = off", _DELETE, _INSERT, _COUNT_OFF_PATH,
                         _DELETE_TURNS, _PG_COUNT_TURNS))


def refresh(cursor: Any, dialect: Dialect, session_pk: int) -> None:
    """Rewrite the ``path_runs`` rows of one session from its stored rows and ``leaf_seq``, its
    turns, and count what is off the path, on a DBAPI cursor of the writing transaction."""
    if dialect.name == "postgresql":
        cursor.execute(_PG_REFRESH.replace(":spk", str(int(session_pk))))
        return
    cursor.execute(_named(dialect, _DELETE), {"spk": session_pk})
    cursor.execute(_named(dialect, _INSERT), {"spk": session_pk})
    cursor.execute(_named(dialect, _COUNT_OFF_PATH), {"spk": session_pk})
    _count_turns(cursor, dialect, session_pk)


def _count_turns(cursor: Any, dialect: Dialect, session_pk: int) -> None:
    """Rewrite the session's ``path_turns`` from its path's messages (added up here, not by
    SQL's ``sum()``, which SQLite makes fail past BIGINT's range)."""
    cursor.execute(_named(dialect, _DELETE_TURNS), {"spk": session_pk})
    cursor.execute(_named(dialect, _PATH_MESSAGES), {"spk": session_pk})
    turns = PathTurns()
    for seq, role, output, cost in cursor.fetchall():
        turns.add(seq, role, output, cost)
    if rows := turns.numbered():
        cursor.executemany(writes.dbapi_sql(dialect, _INSERT_TURN), [
            (session_pk, number, prompt_seq, steps, writes.bindable_total(dialect, output), cost)
            for number, prompt_seq, steps, output, cost in rows])


def extend(cursor: Any, dialect: Dialect, session_pk: int, turns: PathTurns) -> None:
    """Add the turns of rows appended along the path (a linear append: ``path_runs`` and the
    off-path totals stay as they are)."""
    for sql, parameters in turns.appended(dialect, session_pk):
        cursor.execute(writes.dbapi_sql(dialect, sql.format(source="")), parameters)


def refresh_all(conn: Connection) -> None:
    """:func:`refresh` every session (migration 0011; after the rows' usage was recomputed)."""
    cursor = conn.connection.dbapi_connection.cursor()
    for (session_pk,) in conn.exec_driver_sql("SELECT pk FROM sessions ORDER BY pk").all():
        refresh(cursor, conn.dialect, session_pk)


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


def recounted(conn: Connection, session_pk: int, leaf_seq: int | None) -> tuple[list, list, tuple]:
    """What :func:`refresh` would keep for the session, from a walk of its rows — its runs
    (``path_runs`` rows), its turns (``path_turns`` rows) and its off-path messages and cost —
    without writing (``verify``)."""
    runs = [(first, last) for first, last in queries.path_runs(conn, session_pk, leaf_seq)]
    if runs:
        runs[-1] = (runs[-1][0], None)  # the leaf's run is kept open
    turns = PathTurns()
    on_path, on_path_cost = 0, 0.0
    # in seq order, as refresh adds them up (a path through a relinked or duplicated id is not)
    for seq, kind, entry_type, role, output, cost in sorted(queries.path_rows(
            conn, session_pk, leaf_seq, "seq", "kind", "type", "role", "usage_output", "usage_cost")):
        if kind == "entry" and entry_type == "message":
            turns.add(seq, role, output, cost)
            on_path, on_path_cost = on_path + 1, on_path_cost + cost
    messages, cost = conn.exec_driver_sql(writes.dbapi_sql(conn.dialect, _MESSAGES), (session_pk,)).one()
    return sorted(runs, key=repr), turns.numbered(), (messages - on_path, cost - on_path_cost)


def stored(conn: Connection, session_pk: int) -> tuple[list, list, tuple]:
    """The session's kept runs, turns and off-path totals, as :func:`recounted` gives them."""
    runs = conn.exec_driver_sql(writes.dbapi_sql(
        conn.dialect, "SELECT first_seq, last_seq FROM path_runs WHERE session_pk = ?"), (session_pk,)).all()
    turns = conn.exec_driver_sql(writes.dbapi_sql(
        conn.dialect, "SELECT turn, prompt_seq, steps, output_tokens, cost FROM path_turns WHERE session_pk = ? "
        "ORDER BY turn"), (session_pk,)).all()
    off_path = conn.exec_driver_sql(writes.dbapi_sql(
        conn.dialect, "SELECT off_path_messages, off_path_cost FROM sessions WHERE pk = ?"), (session_pk,)).one()
    return sorted(map(tuple, runs), key=repr), [tuple(row) for row in turns], tuple(off_path)
