"""A stored session described with the field names and shapes of the oracle's ``describe.mjs``.

``pi-store inspect`` prints this document, so the differential tests and the conformance runner
can compare it with what the real Pi computes for the same file, field by field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, select

from store import services
from store.context_window import context_path
from store.db import queries
from store.db.engine import read_transaction
from store.db.schema import entries
from store.format import js_parse
from store.format.jsvalue import UNDEFINED, prop, truthy
from store.listing import ListingState
from store.services import CompactionSettings, jsonable
from store.session_store import SessionStore
from store.tree import build_tree, flatten_tree
from store.tree_columns import id_key

CONTEXT_WINDOWS = (8192, 32768, 128000, 200000)
KEEP_RECENT = (0, 50, 500, 2000, 20000)
CONTEXT_FIELDS = ("contextEntryIds", "projection", "sessionContext", "estimateProjectedContextTokens",
                  "estimateContextTokens", "messageTokenEstimates", "shouldCompact")
LEAF_HANG_FIELDS = ("contextEntryIds", "projection", "estimateProjectedContextTokens", "prepareCompaction500")
# What describe.mjs reports where Pi's parent walk would never end (we cut the cycle; Pi loops).
HANG = {"$error": {"name": "OracleGuard", "message": "Pi would not terminate: parentId cycle reachable from the leaf"}}


def describe_session(store: SessionStore, session_id: str, leaf_id: str | None = None,
                     all_leaves: bool = False) -> dict:
    """The oracle-shaped document of one stored session (``leaf_id``: describe from that leaf)."""
    with read_transaction(store.engine) as conn:
        session = queries.stored_session(conn, session_id)
        rows = conn.execute(
            select(entries.c.seq, entries.c.kind, entries.c.line, entries.c.type)
            .where(entries.c.session_pk == session.pk).order_by(entries.c.seq)
        ).all()
    header = next((js_parse(r.line) for r in rows if r.kind == "header"), None)
    exact_id = header.get("id") if isinstance(header, dict) else None  # the column holds db_text's form
    doc: dict[str, Any] = {"sessionId": exact_id if isinstance(exact_id, str) else session.session_id}
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
    doc["tree"] = safe(lambda: flatten_tree(build_tree(body)))
    doc["sessionName"] = safe(manager.get_session_name)
    # Pi builds the context from its leaf id, falling back to the last entry when that id is
    # absent (a non-object last line); getBranch() is then empty.
    with read_transaction(store.engine) as conn:
        leaf_seq = queries.seq_of(conn, session.pk, leaf_id) if leaf_id is not None else session.leaf_seq
        window = context_path(conn, session.pk, leaf_seq)
        loops = walk_loops(conn, session.pk, leaf_seq)
    if loops:
        doc.update({field: HANG for field in CONTEXT_FIELDS})
        doc["prepareCompaction"] = {str(k): HANG for k in KEEP_RECENT}
    else:
        doc.update(context_doc(window, window if truthy(manager.get_leaf_id()) else []))
    if all_leaves:
        seen: set[str] = set()
        doc["allLeaves"] = []
        for value in body:
            entry_id = value.get("id") if isinstance(value, dict) else None
            if not isinstance(entry_id, str) or entry_id in seen:
                continue
            seen.add(entry_id)
            with read_transaction(store.engine) as conn:  # Pi's path from a falsy id ("") is the leaf's
                seq = queries.seq_of(conn, session.pk, entry_id) if entry_id else session.leaf_seq
                window = context_path(conn, session.pk, seq)
                loops = walk_loops(conn, session.pk, seq)
            item = {"leafId": entry_id, "pathIds": manager.get_branch_ids(entry_id)}
            if loops:
                item.update({field: HANG for field in LEAF_HANG_FIELDS}, thinkingLevel=None, model=None)
            else:
                item.update(leaf_context_doc(window, window if entry_id else []))
            doc["allLeaves"].append(item)
    manager.close()
    return doc


def walk_loops(conn: Connection, session_pk: int, leaf_seq: int | None) -> bool:
    """Whether Pi's parent walk from this row never ends: our walk stops at a row whose parent
    exists but was cut to break a cycle (``parent_seq`` is NULL though ``parent_id`` resolves)."""
    runs = queries.path_runs(conn, session_pk, leaf_seq)
    if not runs:
        return False
    root = conn.execute(
        select(entries.c.parent_seq, entries.c.line)
        .where(entries.c.session_pk == session_pk, entries.c.seq == runs[0][0])
    ).one()
    if root.parent_seq is not None:
        return False
    parent = id_key(prop(js_parse(root.line), "parentId"))  # (the column holds an escaped form of some ids)
    if not parent:  # no parent to look up ("" too: Pi's walk stops at a falsy parentId)
        return False
    if parent.__class__ is str:
        return queries.seq_of(conn, session_pk, parent) is not None
    return any(queries.rows_keyed(conn, session_pk, "id", {parent}))


def safe(compute: Callable[[], Any]) -> Any:
    """The value, or describe.mjs's ``{"$error": ...}`` shape where Pi's own code throws."""
    try:
        return compute()
    except (TypeError, RecursionError) as error:
        return {"$error": {"name": type(error).__name__, "message": str(error)}}


def id_of(entry: Any) -> Any:
    """describe.mjs's ``idOf``: ``e.id ?? null`` for objects, null otherwise."""
    if isinstance(entry, (dict, list)):
        value = prop(entry, "id")
        return None if value is UNDEFINED else value
    return None


def _prep(path: list, keep: int, projection: Any = None) -> Any:
    prep = services.prepare_compaction(path, CompactionSettings(keep_recent_tokens=keep), projection)
    return None if prep is None else prep.describe_json()


def context_doc(path: list, branch: list) -> dict[str, Any]:
    """The oracle's main-leaf context fields: ``path`` is what context building walks (Pi's
    buildSessionPath from the leaf), ``branch`` is getBranch() (estimates and compaction use it)."""
    doc: dict[str, Any] = {"contextEntryIds": safe(lambda: [id_of(e) for e in services.build_context_entries(path)])}
    projection = safe(lambda: services.build_session_projection(path))
    if isinstance(projection, dict):  # Pi throws: every field built on it does too
        for field in ("projection", "sessionContext", "estimateProjectedContextTokens", "estimateContextTokens",
                      "messageTokenEstimates"):
            doc[field] = projection
        doc["shouldCompact"] = _not_due(CompactionSettings())
        doc["prepareCompaction"] = {str(k): safe(lambda k=k: _prep(branch, k)) for k in KEEP_RECENT}
        return doc
    doc["projection"] = projection.describe_json()
    doc["sessionContext"] = projection.context().to_json()
    doc.update(context_numbers(path, branch, projection))
    return doc


def context_numbers(path: list, branch: list, projection: Any,
                    keep_recent: tuple[int, ...] = KEEP_RECENT) -> dict[str, Any]:
    """The numbers of a built context (``projection``: ``build_session_projection(path)``,
    ``branch``: getBranch()): ``estimateProjectedContextTokens``, ``estimateContextTokens``,
    ``messageTokenEstimates``, ``shouldCompact`` and ``prepareCompaction`` for each budget of
    ``keep_recent``. ``pi-store inspect`` and the web viewer both print these."""
    settings = CompactionSettings()
    doc: dict[str, Any] = {}
    projected = safe(lambda: services.estimate_projected_context_tokens(projection, branch))
    doc["estimateProjectedContextTokens"] = projected if isinstance(projected, dict) else projected.to_json()
    doc["estimateContextTokens"] = safe(lambda: services.estimate_context_tokens(projection.messages).to_json())
    doc["messageTokenEstimates"] = [
        safe(lambda m=m: jsonable(services.estimate_tokens(m))) for m in projection.messages
    ]
    if isinstance(projected, dict):
        doc["shouldCompact"] = _not_due(settings)
    else:
        doc["shouldCompact"] = {
            "contextTokens": jsonable(projected.tokens),
            "settings": settings.to_json(),
            "byContextWindow": {
                str(w): services.should_compact(projected.tokens, w, settings) for w in CONTEXT_WINDOWS
            },
        }
    same = projection if branch is path else None  # compaction plans over the same path reuse it
    doc["prepareCompaction"] = {str(k): safe(lambda k=k: _prep(branch, k, same)) for k in keep_recent}
    return doc


def _not_due(settings: CompactionSettings) -> dict[str, Any]:
    """``shouldCompact`` where the estimate failed: describe.mjs reads ``.tokens`` of the error
    object (undefined: no ``contextTokens``), and ``undefined > n`` is false for every window."""
    return {"settings": settings.to_json(), "byContextWindow": {str(w): False for w in CONTEXT_WINDOWS}}


def leaf_context_doc(path: list, branch: list | None = None, *, with_projection: bool = True) -> dict[str, Any]:
    """One ``allLeaves`` item's context fields for the path of a known entry id (``branch``:
    getBranch() of it, when that is not ``path``: empty for the falsy id ``""``)."""
    branch = path if branch is None else branch
    doc: dict[str, Any] = {"contextEntryIds": safe(lambda: [id_of(e) for e in services.build_context_entries(path)])}
    projection = safe(lambda: services.build_session_projection(path))
    if isinstance(projection, dict):
        doc.update(projection=projection, thinkingLevel=None, model=None, estimateProjectedContextTokens=projection)
    else:
        described = projection.describe_json()
        if with_projection:
            doc["projection"] = described["entries"]
            if "thinkingLevel" in described:
                doc["thinkingLevel"] = described["thinkingLevel"]
            doc["model"] = described["model"]
        doc["estimateProjectedContextTokens"] = safe(
            lambda: services.estimate_projected_context_tokens(projection, branch).to_json())
    doc["prepareCompaction500"] = safe(lambda: _prep(branch, 500))
    return doc
