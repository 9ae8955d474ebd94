"""Read queries over ``entries``; each touches only the rows its answer needs.

The root→leaf path is one recursive CTE over *runs* (``run_start``): each recursive step jumps
from the first row of a run to its parent row, so a linear history of any length is one step and
a branched one costs one step per branch point on the path. ``CROSS JOIN`` pins SQLite's join
order so the recursive table drives the index lookups (the other order scans ``entries`` at every
step). ``p.depth < h.depth`` holds on every stored link and makes the walk finite even on a
corrupted table.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Row, bindparam, func, select, text

from store.db.schema import entries, sessions
from store.db.stored_text import db_text, may_be_escaped
from store.errors import SessionNotFound
from store.format.jsjson import js_parse
from store.format.jsvalue import UNDEFINED, prop
from store.tree_columns import IdKey, id_key

RUNS_WALK = """
WITH RECURSIVE walk(step, run_start, run_end) AS (
    SELECT 0, e.run_start, e.seq
    FROM entries AS e
    WHERE e.session_pk = :spk AND e.seq = :leaf AND e.run_start IS NOT NULL
  UNION ALL
    SELECT w.step + 1, p.run_start, p.seq
    FROM walk AS w
    CROSS JOIN entries AS h
    CROSS JOIN entries AS p
    WHERE h.session_pk = :spk AND h.seq = w.run_start
      AND p.session_pk = :spk AND p.seq = h.parent_seq
      AND p.depth < h.depth
)
"""

PATH_RUNS = text(RUNS_WALK + "SELECT run_start, run_end FROM walk ORDER BY step DESC")


def path_runs(conn: Connection, session_pk: int, leaf_seq: int | None) -> list[tuple[int, int]]:
    """The root→leaf path as runs ``(first_seq, last_seq)`` of consecutive rows, root first."""
    if leaf_seq is None:
        return []
    return [(a, b) for a, b in conn.execute(PATH_RUNS, {"spk": session_pk, "leaf": leaf_seq})]


def path_seqs(conn: Connection, session_pk: int, leaf_seq: int | None) -> list[int]:
    """The root→leaf path as row keys (``seq``), root first; no payload is read."""
    seqs: list[int] = []
    for first, last in path_runs(conn, session_pk, leaf_seq):
        seqs.extend(range(first, last + 1))
    return seqs


def path_rows(conn: Connection, session_pk: int, leaf_seq: int | None, *columns: str) -> Sequence[Row]:
    """The given ``entries`` columns of every row on the root→leaf path, root first (one statement).

    On PostgreSQL each run's rows are read by a range of the (session_pk, seq) index inside a
    ``LATERAL`` subquery that ``OFFSET 0`` keeps from being flattened (its ``ORDER BY`` makes
    that index the cheap one even where the table is small): a plain join was planned, on a
    table not analysed since an import (``autovacuum`` behind or off), as every run against all
    the session's rows (a path of 6,000 runs in a session of 12,000 rows: 72 million comparisons,
    7 s instead of 55 ms). SQLite's planner reads the ranges by the index without being told."""
    if leaf_seq is None:
        return []
    cols = ", ".join(f"e.{c}" for c in columns)
    rows, order = "entries AS e WHERE e.session_pk = :spk AND e.seq BETWEEN w.run_start AND w.run_end", "e.seq"
    if conn.dialect.name == "postgresql":
        rows = f"LATERAL (SELECT {cols}, e.seq AS run_seq FROM {rows} ORDER BY e.seq OFFSET 0) AS e"
        order = "e.run_seq"
    stmt = text(RUNS_WALK + f"SELECT {cols} FROM walk AS w CROSS JOIN {rows} ORDER BY w.step DESC, {order}")
    return conn.execute(stmt, {"spk": session_pk, "leaf": leaf_seq}).all()


def seq_of(conn: Connection, session_pk: int, entry_id: str) -> int | None:
    """Row of the entry Pi's ``byId`` returns for ``entry_id`` (the last row with that id); ids are
    strings (anything else names no entry), compared as the columns hold them (``db_text``)."""
    if not isinstance(entry_id, str):
        return None
    seqs = seqs_with_id(conn, session_pk, entry_id)
    return seqs[0] if seqs else None


def seqs_with_id(conn: Connection, session_pk: int, entry_id: str) -> list[int]:
    """The entry rows whose id is the string ``entry_id``, last first. The stored form of an id
    with a lone surrogate or NUL is also that of one spelling the escape: such rows are checked
    on their line."""
    stored = db_text(entry_id)
    seqs = list(conn.execute(
        select(entries.c.seq)
        .where(entries.c.session_pk == session_pk, entries.c.entry_id == stored, entries.c.kind == "entry")
        .order_by(entries.c.seq.desc())
    ).scalars())
    if not may_be_escaped(stored):
        return seqs
    lines = lines_at(conn, session_pk, seqs)
    return [seq for seq in seqs if prop(js_parse(lines[seq]), "id") == entry_id]


TREE_COLUMNS = (
    entries.c.seq, entries.c.entry_id, entries.c.parent_seq, entries.c.depth, entries.c.run_start,
    entries.c.compaction_seq, entries.c.thinking_seq, entries.c.model_seq,
)


def tree_columns_of(conn: Connection, session_pk: int, seq: int) -> Row | None:
    return conn.execute(
        select(*TREE_COLUMNS).where(entries.c.session_pk == session_pk, entries.c.seq == seq)
    ).first()


def lines_at(conn: Connection, session_pk: int, seqs: Sequence[int]) -> dict[int, str]:
    """``line`` of the given rows."""
    if not seqs:
        return {}
    stmt = select(entries.c.seq, entries.c.line).where(
        entries.c.session_pk == session_pk, entries.c.seq.in_(bindparam("seqs", expanding=True))
    )
    out: dict[int, str] = {}
    for start in range(0, len(seqs), 500):
        chunk = list(seqs[start:start + 500])
        out.update((seq, line) for seq, line in conn.execute(stmt, {"seqs": chunk}))
    return out


def ids_of(conn: Connection, session_pk: int, rows: Sequence[Row]) -> list[Any]:
    """The entry ids of ``rows`` (with ``seq`` and ``entry_id``): the column, or the id in the
    row's line where the column is NULL (an id that is not a string, or none: None) or may hold
    ``db_text``'s escape of a lone surrogate or NUL (files no Pi wrote)."""
    lines = lines_at(conn, session_pk, [row.seq for row in rows if _not_as_stored(row.entry_id)])
    return [_id_in(lines[row.seq]) if row.seq in lines else row.entry_id for row in rows]


def _not_as_stored(entry_id: str | None) -> bool:
    return entry_id is None or may_be_escaped(entry_id)


def _id_in(line: str) -> Any:
    entry_id = prop(js_parse(line), "id")
    return None if entry_id is UNDEFINED else entry_id


_HEADER_TEXT = (("session_id", "id"), ("cwd", "cwd"), ("parent_session", "parentSession"))


def header_as_written(conn: Connection, session: Row) -> dict[str, str]:
    """The session row's ``session_id``, ``cwd`` and ``parent_session`` whose columns may hold
    ``db_text``'s escape of a lone surrogate or NUL, as the header line has them: only those
    (usually none, and then nothing is read)."""
    if session.header_seq is None or not any(may_be_escaped(getattr(session, column) or "")
                                             for column, _ in _HEADER_TEXT):
        return {}
    header = js_parse(lines_at(conn, session.pk, [session.header_seq])[session.header_seq])
    return {column: header[key] for column, key in _HEADER_TEXT
            if isinstance(header, dict) and isinstance(header.get(key), str)}


def child_lines(conn: Connection, session_pk: int, parent_id: str) -> list[str]:
    """Pi's ``getChildren``: per distinct id its last row, kept when that row's parent is
    ``parent_id``; ordered by the id's first row (Pi iterates its id map in insertion order)."""
    if parent_id is not None and not isinstance(parent_id, str):
        return []
    first = entries.alias("first")
    first_seq = (
        select(func.min(first.c.seq))
        .where(first.c.session_pk == entries.c.session_pk, first.c.entry_id == entries.c.entry_id)
        .scalar_subquery()
    )
    return list(conn.execute(
        select(entries.c.line)
        .where(
            entries.c.session_pk == session_pk,
            entries.c.parent_id == (db_text(parent_id) if parent_id is not None else None),
            entries.c.kind == "entry",
            entries.c.superseded.is_(False),
        )
        .order_by(first_seq)
    ).scalars())


def last_line_of_type(conn: Connection, session_pk: int, entry_type: str) -> str | None:
    return conn.execute(
        select(entries.c.line)
        .where(
            entries.c.session_pk == session_pk, entries.c.type == entry_type, entries.c.kind == "entry",
            entries.c.type != "message",  # lets the partial (session_pk, type, seq) index serve it
        )
        .order_by(entries.c.seq.desc())
        .limit(1)
    ).scalar()


def last_label_line(conn: Connection, session_pk: int, target_id: str) -> str | None:
    if not isinstance(target_id, str):
        return None
    return conn.execute(
        select(entries.c.line)
        .where(
            entries.c.session_pk == session_pk, entries.c.target_id == db_text(target_id),
            entries.c.target_id.is_not(None), entries.c.type == "label", entries.c.kind == "entry",
        )
        .order_by(entries.c.seq.desc())
        .limit(1)
    ).scalar()


_SESSION_KEY = "SELECT session_pk FROM session_ids WHERE session_id = ?"


def session_by_id(conn: Connection, session_id: str, *, lock: bool = False) -> Row | None:
    """The session row of ``session_id`` (stored, like entry ids, in ``db_text``'s form): its key
    from ``session_ids``, then the row by its key. Two statements, not a join: distributed on
    their keys (docs/design.md "Distributing on Citus"), each goes to the one shard its key names.
    ``lock``: the row ``FOR UPDATE`` on PostgreSQL, as writers lock it (SQLite's write transaction
    already holds the database's lock)."""
    if not isinstance(session_id, str):
        raise TypeError(f"a session id is a string, not {type(session_id).__name__}: {session_id!r}")
    sql = _SESSION_KEY if conn.dialect.paramstyle == "qmark" else _SESSION_KEY.replace("?", "%s")
    session_pk = conn.exec_driver_sql(sql, (db_text(session_id),)).scalar()  # (no statement to compile)
    return None if session_pk is None else session_by_pk(conn, session_pk, lock=lock)


def stored_session(conn: Connection, session_id: str) -> Row:
    """The session row of ``session_id``; raises ``SessionNotFound`` when none is stored."""
    row = session_by_id(conn, session_id)
    if row is None:
        raise SessionNotFound(f"no session {session_id!r} in the store")
    return row


def session_by_pk(conn: Connection, session_pk: int, *, lock: bool = False) -> Row | None:
    stmt = select(sessions).where(sessions.c.pk == session_pk)
    return conn.execute(stmt.with_for_update() if lock and conn.dialect.name != "sqlite" else stmt).first()


def adding_counts(conn: Connection) -> str:
    """The SQL aggregate that adds up BIGINT counts (tokens) without failing: SQLite's ``sum()``
    raises past BIGINT's range, its ``total()`` (a REAL, exact below 2**53) does not;
    PostgreSQL's ``sum()`` of bigints is a ``numeric``."""
    return "total" if conn.dialect.name == "sqlite" else "sum"


def session_count(conn: Connection) -> int:
    return conn.execute(select(func.count()).select_from(sessions)).scalar_one()


def rows_keyed(conn: Connection, session_pk: int, field: str, keys: set[IdKey] | None, *,
               below: int | None = None) -> Iterator[tuple[int, IdKey, tuple]]:
    """``(seq, key, row)`` of the entry rows (before row ``below``), in order, whose ``field``
    (``id`` or ``parentId``) is a non-string id (numbers, ``true``) among ``keys`` (None: any
    such id); ``row``: its ``seq``,
    ``parent_seq``, ``depth``, ``run_start``, ``compaction_seq``, ``thinking_seq``, ``model_seq``.

    ``entry_id`` and ``parent_id`` hold string ids only, so the rows where the column is NULL are
    read and their lines parsed: a slow path for files that no Pi writes."""
    if keys is not None and not keys:
        return
    c = entries.c
    column = c.entry_id if field == "id" else c.parent_id
    stmt = select(c.line, c.seq, c.parent_seq, c.depth, c.run_start, c.compaction_seq, c.thinking_seq,
                  c.model_seq).where(c.session_pk == session_pk, c.kind == "entry", column.is_(None))
    if below is not None:
        stmt = stmt.where(c.seq < below)
    for line, *cells in conn.execute(stmt.order_by(c.seq)):
        key = id_key(prop(js_parse(line), field))
        if key is not None and key.__class__ is not str and (keys is None or key in keys):
            yield cells[0], key, tuple(cells)
