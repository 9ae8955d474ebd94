"""A stored session described with the field names and shapes of the oracle's ``describe.mjs``.

``pi-store inspect`` prints this document, so the differential tests and the conformance runner
can compare it with what the real Pi computes for the same file, field by field.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from store.db import queries
from store.db.engine import read_transaction
from store.db.schema import entries
from store.errors import SessionNotFound
from store.format import js_parse
from store.listing import ListingState
from store.session_store import SessionStore
from store.tree import build_tree, flatten_tree


def describe_session(store: SessionStore, session_id: str, leaf_id: str | None = None,
                     all_leaves: bool = False) -> dict:
    """The oracle-shaped document of one stored session (``leaf_id``: describe from that leaf)."""
    with read_transaction(store.engine) as conn:
        session = queries.session_by_id(conn, session_id)
        if session is None:
            raise SessionNotFound(f"no session {session_id!r} in the store")
        rows = conn.execute(
            select(entries.c.seq, entries.c.kind, entries.c.line, entries.c.type)
            .where(entries.c.session_pk == session.pk).order_by(entries.c.seq)
        ).all()
    doc: dict[str, Any] = {"sessionId": session.session_id}
    header = next((js_parse(r.line) for r in rows if r.kind == "header"), None)
    listing = ListingState(header=header, texts=[])
    body = []
    for r in rows:
        if r.kind in ("entry", "value", "extra_header"):
            value = js_parse(r.line)
            listing.add(value)
            if r.kind != "extra_header":
                body.append(value)
    doc["listInfo"] = listing.info(session.source_mtime_ms)
    if not session.pi_valid:
        doc["openError"] = {"name": "Error", "message": "Session file is not a valid pi session"}
        return doc
    doc["openError"] = None
    manager = store.open(session_id)
    if leaf_id is not None:
        manager.branch(leaf_id)
    doc["header"] = header
    doc["entries"] = body
    doc["leafId"] = manager.get_leaf_id()
    doc["branchIds"] = manager.get_branch_ids()
    compactions = [r.seq for r in rows if r.kind == "entry" and r.type == "compaction"]
    doc["latestCompactionId"] = js_parse(rows[compactions[-1]].line).get("id") if compactions else None
    doc["tree"] = _guarded(lambda: flatten_tree(build_tree(body)))
    doc["sessionName"] = _guarded(manager.get_session_name)
    if all_leaves:
        seen: set[str] = set()
        doc["allLeaves"] = []
        for value in body:
            entry_id = value.get("id") if isinstance(value, dict) else None
            if not isinstance(entry_id, str) or entry_id in seen:
                continue
            seen.add(entry_id)
            doc["allLeaves"].append({"leafId": entry_id, "pathIds": manager.get_branch_ids(entry_id)})
    manager.close()
    return doc


def _guarded(compute) -> Any:
    """The value, or the oracle's ``{"$error": ...}`` shape where Pi's own code would throw."""
    try:
        return compute()
    except TypeError as exc:
        return {"$error": {"name": "TypeError", "message": str(exc)}}
