"""Storing a whole session at once — an imported file, or a session made from entries (new,
forked, branched): its ``sessions`` row (listing columns computed here) and all its rows with
their derived tree columns."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from store.db.writes import db_text, entry_values, insert_rows, insert_session
from store.format.jsdate import parse_js_date
from store.format.jsvalue import UNDEFINED
from store.listing import ListingState
from store.loading import ENTRY, EXTRA_HEADER, HEADER, SKIPPED, VALUE, LineRow, LineWarning
from store.tree_columns import derive_file


def store_session_rows(conn: Connection, session_id: str, head: dict | None, rows: list[LineRow], *, pi_valid: bool,
                mtime_ms: float | None, warnings: list[LineWarning] | None = None) -> int:
    """Insert a session and all its rows (derived columns computed here); returns its key."""
    tree_values = [(row.seq, row.value) for row in rows if row.kind in (ENTRY, VALUE)]
    cols, problems = derive_file(tree_values) if pi_valid else ({}, [])
    if warnings is not None:
        warnings.extend(LineWarning(p.seq + 1, p.reason) for p in problems)
    listing = ListingState(header=head)
    for row in rows:
        if row.kind in (ENTRY, VALUE, EXTRA_HEADER):
            listing.add(row.value)
    header_seq = next((row.seq for row in rows if row.kind == HEADER), None)
    listable = head is not None and listing.pi_listable
    head = head or {}
    timestamp = head.get("timestamp", UNDEFINED)
    version = head.get("version")
    spk = insert_session(
        conn,
        session_id=session_id,
        version=version if isinstance(version, int) and not isinstance(version, bool) else None,
        cwd=_db_text(head.get("cwd")) or "",
        parent_session=_db_text(head.get("parentSession")),
        created=_db_text(timestamp),
        created_ms=_ms(parse_js_date(timestamp)) if timestamp is not UNDEFINED else None,
        activity_ms=_ms(listing.last_activity_ms),
        modified_ms=_ms(listing.modified_ms(mtime_ms)),
        name=_db_text(listing.name),
        first_message=_db_text(listing.first_message or None),
        entry_count=len(tree_values),
        message_count=listing.message_count,
        header_seq=header_seq,
        last_seq=len(rows) - 1,
        leaf_seq=tree_values[-1][0] if tree_values and pi_valid else None,
        pi_valid=pi_valid,
        pi_listable=listable,
        has_conversation=any(
            row.kind == ENTRY and row.value.get("type") == "message"
            and isinstance(row.value.get("message"), dict)
            and row.value["message"].get("role") in ("user", "assistant")
            for row in rows
        ),
    )
    insert_rows(conn, [
        entry_values(spk, row.seq, row.kind, row.value if row.kind != SKIPPED else None, row.line,
                     cols.get(row.seq), row.raw, row.eol)
        for row in rows
    ])
    return spk


def _db_text(value: Any) -> str | None:
    return db_text(value) if isinstance(value, str) else None


def _ms(value: float | None) -> int | None:
    return None if value is None else int(value)




def _db_text(value: Any) -> str | None:
    return db_text(value) if isinstance(value, str) else None


def _ms(value: float | None) -> int | None:
    return None if value is None else int(value)
