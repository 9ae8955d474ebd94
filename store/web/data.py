"""What the viewer shows, as JSON-shaped documents: the API returns them as they are and the
pages render them, so a page never shows a number the API would not give.

Every function here only reads. The numbers of the context come from the functions
``pi-store inspect --leaf`` prints (``store.describe.context_doc`` over
``store.context_window.context_path``); this module adds where each message comes from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.exc import DBAPIError

from store import services
from store.analysis import fts
from store.analysis.listing import SORTS
from store.analysis.usage import main_models, usage_by_day
from store.context_window import context_rows
from store.db import queries
from store.db.engine import ReadOnly, make_engine, read_only_modes, read_transaction, sqlite_path
from store.db.faults import CANNOT_WRITE, sqlite_fault
from store.describe import HANG, context_numbers, id_of, safe, walk_loops
from store.errors import SessionNotFound, StoreError
from store.format import js_parse
from store.format.jsdate import parse_iso_date
from store.format.jsvalue import map_key, truthy
from store.gc_pause import gc_paused
from store.services import CompactionSettings, jsonable
from store.services.context import EDITABLE_ROLES as EDITABLE
from store.session_store import SessionStore
from store.tree import build_tree
from store.tree_view import entry_summary, layout, tree_structure

PAGE_SIZE = 50
SEARCH_LIMIT = 50
MAX_LIMIT = 2**63 - 2  # a page and the one more row that says whether another follows: a 64-bit LIMIT
KEEP = CompactionSettings().keep_recent_tokens  # the plan shown: Pi's default settings


class BadRequest(StoreError):
    """A query parameter the viewer cannot use (a bad date, sort, cursor or search text)."""


class EntryNotFound(StoreError):
    """A ``leaf`` that names no entry of the session."""


def readonly_engine(url: str) -> Engine:
    """An engine on ``url`` whose connections cannot write: a SQLite file opened read-only
    (``mode=ro``: nothing is created when the file is gone, no WAL mode is set, the last
    connection to close does not checkpoint), SQLite's ``query_only`` pragma, PostgreSQL
    transactions begun ``READ ONLY`` by psycopg (the driver connection's setting, not the server
    session's: behind a transaction pooler a session default would outlive the transaction and
    reach other clients). The viewer's guarantee, whatever its code does. A SQLite file that
    ``mode=ro`` cannot open (in a read-only folder no ``-shm`` file can be made) is opened
    ``immutable`` when no ``-wal`` file holds commits, as the CLI's read commands open it."""
    engine = make_engine(url, read_only=_sqlite_read_mode(url)) if sqlite_path(url) is not None else make_engine(url)

    @event.listens_for(engine, "connect")
    def _read_only(dbapi_conn: Any, _record: Any) -> None:
        if engine.dialect.name == "sqlite":
            dbapi_conn.execute("PRAGMA query_only=ON")
        else:
            dbapi_conn.read_only = True

    return engine


def _sqlite_read_mode(url: str) -> ReadOnly:
    """The first of ``read_only_modes`` that opens the file, as the CLI's read commands choose;
    ``ro`` when none does for want of writing, or for another fault (the pages report it)."""
    path = sqlite_path(url)
    modes = read_only_modes(path) if path is not None and path.is_file() else ("ro",)
    for mode in modes:
        probe = make_engine(url, read_only=mode)
        try:
            with probe.connect() as conn:
                conn.exec_driver_sql("SELECT count(*) FROM sqlite_master")
            return mode
        except DBAPIError as exc:
            if sqlite_fault(exc) not in CANNOT_WRITE:
                break
        finally:
            probe.dispose()
    return "ro"


# ---------------------------------------------------------------------------------------------- listing


@dataclass(frozen=True, slots=True)
class ListQuery:
    """The options of ``pi-store list``, from query parameters of the same names."""

    cwd: str | None = None
    sort: str = "modified"
    reverse: bool = False
    limit: int | None = None
    cursor: str | None = None
    name: str | None = None
    model: str | None = None
    since: str | None = None
    until: str | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, str], default_limit: int | None = None) -> ListQuery:
        sort = params.get("sort") or "modified"
        if sort not in SORTS:
            raise BadRequest(f"sort must be one of {', '.join(SORTS)}")
        limit = params.get("limit")
        try:
            size = int(limit) if limit else default_limit
        except ValueError as exc:
            raise BadRequest(f"limit is not a number: {limit!r}") from exc
        if size is not None and not 1 <= size <= MAX_LIMIT:
            raise BadRequest(f"limit must be from 1 to {MAX_LIMIT}")
        text = {k: (params.get(k) or None) for k in ("cwd", "cursor", "name", "model", "since", "until")}
        return cls(sort=sort, reverse=params.get("reverse") in ("1", "true", "on"), limit=size, **text)

    def params(self) -> dict[str, str]:
        """The non-default options as query parameters (for links to other pages of the list)."""
        out = {k: v for k in ("cwd", "name", "model", "since", "until") if (v := getattr(self, k))}
        if self.sort != "modified":
            out["sort"] = self.sort
        if self.reverse:
            out["reverse"] = "1"
        if self.limit is not None and self.limit != PAGE_SIZE:
            out["limit"] = str(self.limit)
        return out


def _date_ms(value: str | None, name: str) -> int | None:
    """A date typed in the viewer: ISO only, as on the command line (``parse_iso_date``)."""
    if value is None:
        return None
    ms = parse_iso_date(value)
    if ms is None:
        raise BadRequest(f"{name} is not a date: {value!r}")
    return int(ms)


def list_sessions(store: SessionStore, query: ListQuery) -> dict:
    """``{"sessions": <pi-store list --json for these options>, "nextCursor": <where the next
    page starts, or None>}``."""
    options = {"sort": query.sort, "reverse": query.reverse, "cursor": query.cursor, "name": query.name,
               "model": query.model, "since_ms": _date_ms(query.since, "since"),
               "until_ms": _date_ms(query.until, "until"), "limit": None if query.limit is None else query.limit + 1}
    infos = store.list(query.cwd, **options) if query.cwd else store.list_all(**options)
    next_cursor = None
    if query.limit is not None and len(infos) > query.limit:
        infos = infos[:query.limit]
        next_cursor = infos[-1].cursor
    items = [info.to_json() for info in infos]
    return {"sessions": items, "nextCursor": next_cursor}


def session_models(store: SessionStore, session_ids: list[str]) -> dict[str, str]:
    """The model each of these sessions used most (for the listing's model column)."""
    with read_transaction(store.engine) as conn:
        return main_models(conn, session_ids)


def search_hits(store: SessionStore, text: str, session: str | None = None, limit: int = SEARCH_LIMIT) -> dict:
    """``pi-store search --json`` hits (``hits``), searched read-only, and how many rows the
    SQLite index has not caught up with yet (``pending``: ``pi-store fts sync`` indexes them)."""
    try:
        hits = store.search(text, session=session, limit=limit, sync=False)
    except fts.BadQuery as exc:
        raise BadRequest(str(exc)) from exc
    with read_transaction(store.engine) as conn:
        pending = fts.pending(conn)
    return {"hits": [hit.to_json() for hit in hits], "pending": pending}


def usage(store: SessionStore, session_id: str | None = None) -> dict:
    """``pi-store stats --json`` (``stats``) and the same usage per day and model (``byDay``)."""
    stats = store.stats(session_id)
    with read_transaction(store.engine) as conn:
        pk = None if session_id is None else queries.stored_session(conn, session_id).pk
        days = usage_by_day(conn, pk)
    return {"stats": stats.to_json(), "byDay": [day.to_json() for day in days]}


# ---------------------------------------------------------------------------------------------- one session


def session_doc(store: SessionStore, session_id: str, selected: str | None = None,
                open_folds: Iterable[str] = ()) -> dict:
    """A session: its listing info, its current leaf, the selected entry (default: the leaf),
    the tree as display rows (``store.tree_view``), the root→selected path (``pathIds``) and the
    keys of ``open_folds`` that opened a fold (``openFolds``: the others are dropped)."""
    return session_view(store, session_id, selected, open_folds, tail=0)[0]


def session_view(store: SessionStore, session_id: str, selected: str | None = None, open_folds: Iterable[str] = (),
                 tail: int | None = None, *, context: bool = False,
                 context_tail: int | None = None) -> tuple[dict, list, dict | None]:
    """:func:`session_doc`; the parsed entries of the last ``tail`` entries (all: None) of the
    root→selected path, for the conversation view; and (``context``) :func:`context_view` of the
    selected entry with ``context_tail``. One read transaction: the path is read once and a
    line the context has parsed is not parsed again for the conversation."""
    info = store.find_by_id(session_id)
    if info is None:
        raise SessionNotFound(f"no session {session_id!r} in the store")
    with read_transaction(store.engine) as conn, gc_paused():
        session = queries.stored_session(conn, session_id)
        leaf = queries.tree_columns_of(conn, session.pk, session.leaf_seq) if session.leaf_seq is not None else None
        leaf_id = queries.ids_of(conn, session.pk, [leaf])[0] if leaf is not None and leaf.depth is not None else None
        if selected is None:  # the leaf row, also when its id is not a string (as context_view)
            seq = session.leaf_seq
            chosen = leaf_id if isinstance(leaf_id, str) else None  # what a link can select
        else:
            chosen, seq = selected, queries.seq_of(conn, session.pk, selected)
            if seq is None:
                raise EntryNotFound(f"no entry {selected!r} in session {session_id}")
        path = queries.path_rows(conn, session.pk, seq, "seq", "entry_id") if seq is not None else []
        path_ids = queries.ids_of(conn, session.pk, path)
        context_doc, parsed = None, {}
        if context and seq is not None:
            context_doc, parsed = _context(conn, session, seq, leaf_id if selected is None else selected, path_ids,
                                           context_tail)
        entries, summaries = tree_entries(conn, session.pk)
        shown = path if tail is None else path[len(path) - tail:] if tail else []
        lines = queries.lines_at(conn, session.pk, [row.seq for row in shown if row.seq not in parsed])
        branch = [parsed[row.seq] if row.seq in parsed else js_parse(lines[row.seq]) for row in shown]
        open_folds = list(dict.fromkeys(open_folds))
        opened: set[str] = set()
        items = tree_structure(build_tree(entries), leaf_id=leaf_id, path_ids=path_ids, selected_id=chosen,
                               open_folds=open_folds, summaries=summaries, opened_runs=opened)
    doc = {"session": info.to_json(), "leafId": leaf_id, "selectedId": chosen, "entryCount": len(entries),
           "tree": [row.to_json() for row in layout(items)], "pathIds": path_ids,
           "openFolds": [key for key in open_folds if key in opened]}
    return doc, branch, context_doc


_TREE_ROWS = text("""
SELECT seq, entry_id, parent_id, role, timestamp,
       CASE WHEN type = 'message' AND kind = 'entry' AND entry_id IS NOT NULL AND timestamp IS NOT NULL
                 AND (parent_id IS NOT NULL OR parent_seq IS NULL)
            THEN NULL ELSE line END AS line_or_null
FROM entries WHERE session_pk = :spk AND kind IN ('entry', 'value')
ORDER BY seq
""")


def tree_entries(conn: Connection, session_pk: int) -> tuple[list, Callable[[Sequence[Any]], list[str]]]:
    """A session's entries in file order as :func:`store.tree.build_tree` needs them, and the
    ``summaries`` function of :func:`store.tree_view.tree_structure` for them.

    A message row whose id, parent id and timestamp are plain strings in its columns (or whose
    parent id is absent and leads nowhere) is built from those columns instead of parsing its
    line: the tree reads nothing else of a message, and a 5,000-entry session's lines are
    megabytes of tool output. Every other row is parsed. The lines of such messages are read and
    parsed for their summaries only when they stay visible (not folded)."""
    entries: list = []
    columns: dict[int, int] = {}  # id() of an entry built from columns -> its row
    for seq, entry_id, parent_id, role, timestamp, line in conn.execute(_TREE_ROWS, {"spk": session_pk}).all():
        if line is not None or "\\" in entry_id or (parent_id is not None and "\\" in parent_id):
            entries.append(js_parse(line if line is not None else queries.lines_at(conn, session_pk, [seq])[seq]))
            continue
        entry = {"type": "message", "id": entry_id, "parentId": parent_id, "timestamp": timestamp,
                 "message": {"role": role}}
        entries.append(entry)
        columns[id(entry)] = seq

    def summaries(shown: Sequence[Any]) -> list[str]:
        lines = queries.lines_at(conn, session_pk, [columns[id(entry)] for entry in shown if id(entry) in columns])
        return [entry_summary(js_parse(lines[columns[id(entry)]]) if id(entry) in columns else entry)
                for entry in shown]

    return entries, summaries


def context_view(store: SessionStore, session_id: str, leaf_id: str | None = None, tail: int | None = None) -> dict:
    """What the model sees with ``leaf_id`` as leaf (default: the session's leaf).

    The numbers are those ``pi-store inspect --leaf`` prints, from the same functions over the
    same path (``store.context_window.context_path`` and ``store.describe.context_numbers``):
    ``contextEntryIds``, ``estimateProjectedContextTokens``, ``estimateContextTokens``,
    ``messageTokenEstimates``, ``shouldCompact``, ``prepareCompaction`` (for Pi's default
    keep-recent budget), ``thinkingLevel`` and ``model``. ``messages`` is the projection's
    messages, each with its source entry, token estimate and provenance (instead of inspect's
    ``projection`` and ``sessionContext``, which repeat the messages twice); ``tail``: only the
    last that many of them (``messageCount`` says how many there are)."""
    with read_transaction(store.engine) as conn, gc_paused():
        session = queries.stored_session(conn, session_id)
        seq = session.leaf_seq if leaf_id is None else queries.seq_of(conn, session.pk, leaf_id)
        if leaf_id is not None and seq is None and session.pi_valid:
            raise EntryNotFound(f"no entry {leaf_id!r} in session {session_id}")
        if leaf_id is None and seq is not None:
            columns = queries.tree_columns_of(conn, session.pk, seq)
            leaf_id = (queries.ids_of(conn, session.pk, [columns])[0]
                       if columns is not None and columns.depth is not None else None)
        path_ids = queries.ids_of(conn, session.pk, queries.path_rows(conn, session.pk, seq, "entry_id", "seq"))
        return _context(conn, session, seq, leaf_id, path_ids, tail)[0]


def _context(conn: Connection, session: Any, seq: int | None, leaf_id: str | None, path_ids: list,
             tail: int | None) -> tuple[dict, dict[int, Any]]:
    """:func:`context_view`'s document for the path ending at row ``seq`` (``path_ids``: its
    entry ids), and the entries it parsed by row key."""
    session_id = queries.header_as_written(conn, session).get("session_id", session.session_id)
    if not session.pi_valid:
        return {"sessionId": session_id, "leafId": None, "openError": "Session file is not a valid pi session",
                "messages": [], "messageCount": 0, "hidden": [], "summarised": None, "pathLength": 0}, {}
    seqs, window = context_rows(conn, session.pk, seq)
    doc: dict[str, Any] = {"sessionId": session_id, "leafId": leaf_id, "openError": None,
                           "pathLength": len(path_ids)}
    if walk_loops(conn, session.pk, seq):
        doc.update({"contextEntryIds": HANG, "error": HANG, "messages": [], "messageCount": 0, "hidden": [],
                    "summarised": None})
    else:
        # Pi's getBranch() from a falsy leaf id ("", 0, false) is empty, as from none
        doc.update(_context_numbers(window, window if truthy(leaf_id) else [], path_ids, tail))
    return doc, dict(zip(seqs, window, strict=True))


def _context_numbers(path: list, branch: list, path_ids: list, tail: int | None) -> dict:
    """``store.describe.context_doc``'s computation (``path``: what context building walks,
    ``branch``: what estimates and compaction use), with provenance instead of the messages
    printed twice."""
    projection = safe(lambda: services.build_session_projection(path))
    if isinstance(projection, dict):  # Pi throws: so does everything built on the projection
        return {"contextEntryIds": safe(lambda: [id_of(e) for e in services.build_context_entries(path)]),
                "error": projection, "messages": [], "messageCount": 0, "hidden": [], "summarised": None}
    source_ids = [_json_id(item.source_entry) for item in projection.entries]
    doc = {"contextEntryIds": source_ids, "thinkingLevel": jsonable(projection.thinking_level),
           "model": jsonable(projection.model), **context_numbers(path, branch, projection, (KEEP,))}
    doc.update(_provenance(projection, source_ids, doc["messageTokenEstimates"], path_ids, tail))
    return doc


def _json_id(entry: Any) -> Any:
    value = id_of(entry)
    return value if value is None or type(value) is str else jsonable(value)


def _provenance(projection: Any, source_ids: list, estimates: list, path_ids: list, tail: int | None) -> dict:
    """``messages`` (with ``provenance``; the last ``tail`` only, when given), ``messageCount``,
    ``hidden`` (entries a context edit hides) and ``summarised`` (the path entries the latest
    compaction replaced by its summary)."""
    sources = [item.source_entry for item in projection.entries]
    first = sources[0] if sources else None
    compaction = first if isinstance(first, dict) and first.get("type") == "compaction" else None
    kept: set[int] = set()
    if compaction is not None:  # the context entries that lie before the compaction on the path
        position = {map_key(entry_id): n for n, entry_id in enumerate(path_ids)}
        at = position.get(map_key(compaction.get("id")), len(path_ids))
        kept = {id(e) for e in sources[1:] if isinstance(e, dict) and position.get(map_key(e.get("id")), at) < at}
    edits: dict[Any, dict] = {}
    for entry in sources:
        if isinstance(entry, dict) and entry.get("type") == "context_edit":
            edits[map_key(entry.get("targetId"))] = entry
    count = len(projection.messages)
    first_shown = 0 if tail is None else max(count - tail, 0)
    messages: list[dict] = []
    hidden: list[dict] = []
    index = 0
    for n, item in enumerate(projection.entries):
        source = item.source_entry if isinstance(item.source_entry, dict) else {}
        edit = edits.get(map_key(source.get("id"))) if edits and source.get("type") != "context_edit" else None
        if edit is not None and edit.get("replacement") is None:
            hidden.append({"entryId": source_ids[n], "editId": edit.get("id")})
        for message in item.messages:
            index += 1
            if index <= first_shown:
                continue
            role = message.get("role") if isinstance(message, dict) else None
            if n == 0 and compaction is not None:
                provenance = {"status": "checkpoint" if role == "system" else "summary",
                              "compactionId": compaction.get("id")}
            elif source.get("type") == "branch_summary":
                provenance = {"status": "branchSummary", "fromId": source.get("fromId")}
            elif id(item.source_entry) in kept:
                provenance = {"status": "kept", "compactionId": compaction.get("id") if compaction else None}
            else:
                provenance = {"status": "path"}
            if edit is not None and edit.get("replacement") is not None and isinstance(role, str) and role in EDITABLE:
                provenance["replacedBy"] = edit.get("id")
            # a message read from the file is JSON already; one the projection made may hold undefined
            shown = message if message is source.get("message") else jsonable(message)
            messages.append({"index": index - 1, "sourceId": source_ids[n], "sourceType": source.get("type"),
                             "role": role, "tokens": estimates[index - 1], "provenance": provenance,
                             "message": shown})
    return {"messages": messages, "messageCount": count, "hidden": hidden,
            "summarised": _summarised(compaction, path_ids)}


def _summarised(compaction: dict | None, path_ids: list) -> dict | None:
    """The path entries before the latest compaction's first kept entry (all before the
    compaction when that id is not on the path before it): what its summary stands for."""
    if compaction is None:
        return None
    ids = list(path_ids)
    at = max((n for n, i in enumerate(ids) if i == compaction.get("id")), default=len(ids))
    kept = compaction.get("firstKeptEntryId")
    end = next((n for n in range(at - 1, -1, -1) if ids[n] == kept), at)
    gone = ids[:end]
    return {"compactionId": compaction.get("id"), "count": len(gone),
            "firstId": gone[0] if gone else None, "lastId": gone[-1] if gone else None}
