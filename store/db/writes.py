"""Write statements: insert a session, insert rows, and advance a session by appended rows.

``advance_session`` allocates row numbers and updates the listing columns in one ``UPDATE ...
RETURNING`` so that concurrent writers (in one write transaction each) never hand out the same
``seq`` and never lose a count.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import Connection, case, insert, literal, update

from store.db.schema import entries, sessions
from store.format.jsvalue import prop
from store.tree_columns import TreeColumns

ROW_DEFAULTS = {
    "entry_id": None, "parent_id": None, "type": None, "role": None, "target_id": None, "timestamp": None,
    "raw": None, "eol": "\n", "parent_seq": None, "depth": None, "run_start": None,
    "compaction_seq": None, "thinking_seq": None, "model_seq": None, "superseded": False,
}


_SURROGATE = re.compile("[\ud800-\udfff]")


def db_text(value: str) -> str:
    """A string a UTF-8 database column can hold: lone surrogates (legal in JSON, not in UTF-8)
    become their ``\\udxxx`` escape text, as JSON.stringify writes them."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", value)
    return value


def _text(value: Any) -> str | None:
    return db_text(value) if isinstance(value, str) else None


def entry_row(session_pk: int, seq: int, kind: str, value: Any, line: str, cols: TreeColumns | None,
              raw: bytes | None = None, eol: str = "\n") -> dict:
    """The ``entries`` row of one physical line (``value``: its parsed JSON, if any)."""
    row = dict(ROW_DEFAULTS, session_pk=session_pk, seq=seq, kind=kind, line=line, raw=raw, eol=eol)
    if isinstance(value, dict):
        kind_of_entry = _text(value.get("type"))
        row.update(
            entry_id=_text(value.get("id")),
            parent_id=_text(value.get("parentId")),
            type=kind_of_entry,
            timestamp=_text(value.get("timestamp")),
        )
        if kind_of_entry == "message":
            row["role"] = _text(prop(value.get("message"), "role"))
        elif kind_of_entry in ("label", "context_edit"):
            row["target_id"] = _text(value.get("targetId"))
    if cols is not None:
        row.update(
            parent_seq=cols.parent_seq, depth=cols.depth, run_start=cols.run_start,
            compaction_seq=cols.compaction_seq, thinking_seq=cols.thinking_seq, model_seq=cols.model_seq,
            superseded=cols.superseded,
        )
    return row


def insert_rows(conn: Connection, rows: list[dict], batch: int = 5000) -> None:
    for start in range(0, len(rows), batch):
        conn.execute(insert(entries), rows[start:start + batch])


def insert_session(conn: Connection, **fields: Any) -> int:
    return conn.execute(insert(sessions).values(**fields).returning(sessions.c.pk)).scalar_one()


def advance_session(conn: Connection, session_pk: int, rows: int, entry_rows: int, *, leaf: bool,
                    messages: int = 0, activity_ms: float | None = None, first_message: str | None = None,
                    name: tuple[str | None] | None = None, conversation: bool = False,
                    listable: bool = True) -> int:
    """Account for ``rows`` new physical lines (``entry_rows`` of them entries) and return the new
    ``last_seq``; the caller's rows are ``last_seq - rows + 1 .. last_seq``."""
    new_activity = sessions.c.activity_ms
    if activity_ms is not None:
        act = literal(int(activity_ms))
        new_activity = case(
            (sessions.c.activity_ms.is_(None), act), (act > sessions.c.activity_ms, act),
            else_=sessions.c.activity_ms,
        )
    values: dict[str, Any] = {
        "last_seq": sessions.c.last_seq + rows,
        "entry_count": sessions.c.entry_count + entry_rows,
        "message_count": sessions.c.message_count + messages,
    }
    if leaf:
        values["leaf_seq"] = sessions.c.last_seq + rows
    if activity_ms is not None:
        values["activity_ms"] = new_activity
        values["modified_ms"] = case((new_activity > 0, new_activity), else_=sessions.c.modified_ms)
    if first_message:
        values["first_message"] = case(
            (sessions.c.first_message.is_(None), literal(db_text(first_message))), else_=sessions.c.first_message
        )
    if name is not None:
        values["name"] = None if name[0] is None else db_text(name[0])
    if conversation:
        values["has_conversation"] = True
    if not listable:
        values["pi_listable"] = False
    stmt = update(sessions).where(sessions.c.pk == session_pk).values(**values).returning(sessions.c.last_seq)
    return conn.execute(stmt).scalar_one()
