"""Bulk write statements (imports, new sessions): the session row and its entry rows.

Appends to an existing session go through ``store.db.appends`` instead.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Dialect, insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.util import await_only

from store.analysis import activity_days, pairs
from store.analysis.extract import ANALYSIS_COLUMNS, NO_ANALYSIS, analysis_values, text_path
from store.db.schema import session_ids, sessions
from store.db.stored_text import db_text
from store.errors import SessionExists
from store.format.jsvalue import prop
from store.tree_columns import TreeColumns

ROW_COLUMNS = (
    "session_pk", "seq", "kind", "entry_id", "parent_id", "type", "role", "target_id", "timestamp", "line",
    "raw", "eol", "parent_seq", "depth", "run_start", "compaction_seq", "thinking_seq", "model_seq",
    "superseded", *ANALYSIS_COLUMNS,
)


def _text(value: Any) -> str | None:
    return db_text(value) if isinstance(value, str) else None


KEY_COLUMNS = ("entry_id", "parent_id", "type", "role", "target_id", "timestamp")


def key_values(value: Any) -> tuple:
    """The ``KEY_COLUMNS`` of a line whose parsed JSON is ``value``: what lookups by id, parent,
    type and role read instead of the line (``store.interchange.verifying`` checks them)."""
    entry_id = parent_id = entry_type = role = target_id = timestamp = None
    if isinstance(value, dict):
        entry_type = _text(value.get("type"))
        entry_id = _text(value.get("id"))
        parent_id = _text(value.get("parentId"))
        timestamp = _text(value.get("timestamp"))
        if entry_type == "message":
            role = _text(prop(value.get("message"), "role"))
        elif entry_type in ("label", "context_edit"):
            target_id = _text(value.get("targetId"))
    return entry_id, parent_id, entry_type, role, target_id, timestamp


def entry_values(session_pk: int, seq: int, kind: str, value: Any, line: str, cols: TreeColumns | None,
                 raw: bytes | None = None, eol: str = "\n") -> tuple:
    """The ``entries`` row of one physical line, in ``ROW_COLUMNS`` order, then where its text is in
    its line (``extract.text_path``, None: nowhere; not a column: the SQLite insert statement reads
    it) (``value``: its parsed JSON, if any; ``cols``: its derived tree columns, if it is an entry;
    the analysis columns come from ``store.analysis.extract``)."""
    entry_id, parent_id, entry_type, role, target_id, timestamp = key_values(value)
    if kind == "entry":
        analysis = analysis_values(value)
        at = text_path(value, analysis[0])
    else:
        analysis, at = NO_ANALYSIS, None
    if cols is None:
        return (session_pk, seq, kind, entry_id, parent_id, entry_type, role, target_id, timestamp, line, raw, eol,
                None, None, None, None, None, None, False, *analysis, at)
    return (session_pk, seq, kind, entry_id, parent_id, entry_type, role, target_id, timestamp, line, raw, eol,
            cols.parent_seq, cols.depth, cols.run_start, cols.compaction_seq, cols.thinking_seq, cols.model_seq,
            cols.superseded, *analysis, at)


ROW_PARAMETERS = len(ROW_COLUMNS) + 1  # an entry_values tuple: the columns, then the text's path
INSERT_ROW = f"INSERT INTO entries ({', '.join(ROW_COLUMNS)}) VALUES ({', '.join('?' for _ in ROW_COLUMNS)})"


def _sqlite_insert() -> str:
    """SQLite (migration 0010): the row, its text left out of ``search_text`` where SQLite reads
    exactly that text at the proposed path of its line (``facts`` then says where: ``textAt``,
    ``textChars``; ``store.analysis.fts.ROW_TEXT`` reads it back). One comparison per proposed
    row, no work for the others."""
    p = {c: f"?{i}" for i, c in enumerate(ROW_COLUMNS, 1)}
    at, line, body, facts = f"?{ROW_PARAMETERS}", p["line"], p["search_text"], p["facts"]
    p["search_text"] = (f"CASE WHEN {at} IS NULL THEN {body} WHEN NOT json_valid({line}) THEN {body} "
                        f"WHEN json_extract({line}, {at}) = {body} THEN '' ELSE {body} END")
    p["facts"] = (f"CASE WHEN {at} IS NULL THEN {facts} "
                  f"ELSE json_set({facts}, '$.textAt', {at}, '$.textChars', length({body})) END")
    return f"INSERT INTO entries ({', '.join(ROW_COLUMNS)}) VALUES ({', '.join(p.values())})"


INSERT_ROW_SQLITE = _sqlite_insert()


def insert_sql(dialect: Dialect) -> str:
    """The statement inserting one ``entry_values`` tuple, in ``dialect``'s paramstyle (on
    PostgreSQL without the path: see :func:`without_path`)."""
    return INSERT_ROW_SQLITE if dialect.name == "sqlite" else dbapi_sql(dialect, INSERT_ROW)


def without_path(rows: list[tuple]) -> list[tuple]:
    """``entry_values`` tuples as PostgreSQL's statements take them: the columns alone."""
    return [row[:-1] for row in rows]


_BIGINT = 2**63 - 1


def bindable_total(dialect: Dialect, value: int | float) -> int | float:
    """A sum of BIGINT counts as ``dialect``'s driver can bind it: on SQLite, past BIGINT's range,
    the REAL its own integer arithmetic would make of it (PostgreSQL's columns for such sums are
    ``numeric``)."""
    return sqlite_bindable(value) if dialect.name == "sqlite" else value


def sqlite_bindable(value: int | float) -> int | float:
    """:func:`bindable_total` on SQLite."""
    if value.__class__ is int and not -_BIGINT - 1 <= value <= _BIGINT:
        return float(value)
    return value


def dbapi_sql(dialect: Dialect, sql: str) -> str:
    """``sql`` written with ``?`` placeholders, in the paramstyle of ``dialect``'s driver."""
    return sql if dialect.paramstyle == "qmark" else sql.replace("?", "%s")


def native_sql(sql: str) -> str:
    """``sql`` written with ``?`` placeholders, with PostgreSQL's own ``$1, $2, …`` instead (for
    psycopg's raw cursors)."""
    parts = sql.split("?")
    return parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], 1))


COPY_ROWS = f"COPY entries ({', '.join(ROW_COLUMNS)}) FROM STDIN"


def insert_rows(conn: Connection, rows: list[tuple], batch: int = 5000) -> None:
    """Insert ``entry_values`` tuples inside ``conn``'s transaction: the driver's ``executemany``
    (SQLite), ``COPY`` (PostgreSQL: one stream instead of a statement per row); then pair their
    tool calls and results (``store.analysis.pairs``) and add up their activity
    (``store.analysis.activity_days``)."""
    cursor = conn.connection.dbapi_connection.cursor()
    if conn.dialect.name == "postgresql":
        if rows and conn.dialect.is_async:  # the asyncio adapter's cursor has no copy(): psycopg's own
            await_only(_copy_async(conn.connection.driver_connection, rows))
        elif rows:
            with cursor.copy(COPY_ROWS) as copy:
                for row in rows:
                    copy.write_row(row[:-1])
    else:
        sql = insert_sql(conn.dialect)
        for start in range(0, len(rows), batch):
            cursor.executemany(sql, rows[start:start + batch])
    pairs.pair_inserted(cursor, conn.dialect, rows)
    activity_days.add_inserted(cursor, conn.dialect, rows)


async def _copy_async(driver: Any, rows: list[tuple]) -> None:
    """``COPY`` of ``rows`` on a psycopg ``AsyncConnection`` (inside its open transaction)."""
    async with driver.cursor() as cursor, cursor.copy(COPY_ROWS) as copy:
        for row in rows:
            await copy.write_row(row[:-1])


def insert_session(conn: Connection, **fields: Any) -> int:
    """A new session row and its ``session_ids`` entry; returns the session key. Raises
    ``SessionExists`` when the id is stored: callers look first, but on PostgreSQL another
    writer can store the same id between that look and this insert (the table's primary key
    refuses the second; the transaction is then only good for rolling back)."""
    pk = conn.execute(insert(sessions).values(**fields).returning(sessions.c.pk)).scalar_one()
    try:
        conn.execute(insert(session_ids).values(session_id=fields["session_id"], session_pk=pk))
    except IntegrityError as exc:
        raise SessionExists(f"session {fields['session_id']} already exists in the store") from exc
    return pk
