"""Full-text search over stored history: entry ids, snippets and where each hit stands.

A hit's provenance, computed from the derived tree columns without reading any payload:

``onPath`` / ``branch``
    whether the entry is on the session's current root→leaf path (``"current"``) or only on a
    branch that was left (``"abandoned"``).
``compaction``
    relative to the latest compaction on the current path: ``"before"`` (summarised away),
    ``"kept"`` (before it, but in the range it keeps: from ``firstKeptEntryId`` on), ``"after"``
    (the compaction itself or later); ``None`` when the path has no compaction. An abandoned
    entry is ``"before"``/``"after"`` by file order.
``edited``
    ``"hidden"`` / ``"replaced"`` when the latest context edit on the current path (one that is
    itself still in the context) targets the entry, else ``None``.

Hits come newest first (by storage order), ``limit`` at a time.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from html import escape
from typing import Any

from sqlalchemy import Connection, Engine, Row, bindparam, text

from store.analysis import fts
from store.db import queries
from store.db.engine import is_sqlite, read_transaction
from store.db.stored_text import db_text, may_be_escaped
from store.format import js_parse
from store.format.jsvalue import prop

_SCAN = 200  # candidates read per round while filtering on provenance
_SNIPPET_WORDS = 24


@dataclass(frozen=True, slots=True)
class Provenance:
    on_path: bool
    compaction: str | None
    edited: str | None

    @property
    def branch(self) -> str:
        return "current" if self.on_path else "abandoned"

    def to_json(self) -> dict:
        return {"onPath": self.on_path, "branch": self.branch, "compaction": self.compaction, "edited": self.edited}


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One matching entry."""

    entry_id: str | None
    session_id: str
    seq: int
    type: str | None
    role: str | None
    timestamp: str | None
    snippet: str
    provenance: Provenance

    def to_json(self) -> dict:
        return {
            "entryId": self.entry_id, "sessionId": self.session_id, "seq": self.seq, "type": self.type,
            "role": self.role, "timestamp": self.timestamp, "snippet": self.snippet,
            "provenance": self.provenance.to_json(),
        }


def search(engine: Engine, query: str, *, session: str | None = None, role: str | None = None,
           path_only: bool = False, limit: int = 20, sync: bool = True) -> list[SearchHit]:
    """Entries whose text matches ``query`` (syntax: ``store.analysis.fts``), newest first.

    ``session``: only this session id; ``role``: a message role (``user``, ``assistant``,
    ``toolResult``, ...) or, for other entries, their type (``compaction``, ``branch_summary``,
    ``custom_message``, ``label``, ...); ``path_only``: only entries on their session's current path;
    ``sync``: first bring SQLite's index up to date (a write when rows are pending); a read-only
    reader passes False and searches what is indexed (``fts.pending`` says how much is not).
    """
    if not (type(limit) is int and 1 <= limit < 2**63):
        raise ValueError(f"limit must be a whole number from 1 to 2**63 - 1, not {limit!r}")
    parsed = fts.parse_query(query)
    if sync:
        fts.sync(engine)
    with read_transaction(engine) as conn:
        session_pk = None if session is None else queries.stored_session(conn, session).pk
        sqlite = is_sqlite(conn)
        match = parsed.fts5() if sqlite else _pg_match(parsed)
        sessions: dict[int, _SessionPath] = {}
        chosen: list[tuple[Row, Provenance]] = []
        before = None
        while len(chosen) < limit:
            batch = _candidates(conn, sqlite, match, session_pk, role, before, _SCAN if path_only else limit)
            for row in batch:
                path = sessions.get(row.session_pk)
                if path is None:
                    path = sessions[row.session_pk] = _SessionPath.load(conn, row.session_pk)
                provenance = path.provenance(row)
                if provenance.on_path or not path_only:
                    chosen.append((row, provenance))
                    if len(chosen) == limit:
                        break
            if len(batch) < (_SCAN if path_only else limit):
                break
            before = batch[-1].pk
        snippets = _snippets(conn, parsed, [(row.session_pk, row.pk) for row, _ in chosen])
        entry_ids, session_ids = _ids_as_written(conn, [row for row, _ in chosen], sessions)
    return [
        SearchHit(entry_ids.get(row.pk, row.entry_id),
                  session_ids.get(row.session_pk, sessions[row.session_pk].session_id),
                  row.seq, row.type, row.role, row.timestamp, snippets.get(row.pk, ""), provenance)
        for row, provenance in chosen
    ]


def _ids_as_written(conn: Connection, rows: list[Row],
                    sessions: dict[int, _SessionPath]) -> tuple[dict[int, str], dict[int, str]]:
    """The hits' entry ids (by row key) and session ids (by session key) whose columns may hold
    ``db_text``'s escape (rare: only those are read), as their lines have them."""
    escaped: dict[int, list[Row]] = {}
    for row in rows:
        if row.entry_id is not None and may_be_escaped(row.entry_id):
            escaped.setdefault(row.session_pk, []).append(row)
    entry_ids: dict[int, str] = {}
    for session_pk, group in escaped.items():  # one read of their lines per session
        for row, entry_id in zip(group, queries.ids_of(conn, session_pk, group), strict=True):
            if isinstance(entry_id, str):
                entry_ids[row.pk] = entry_id
    session_ids: dict[int, str] = {}
    for session_pk, path in sessions.items():
        session = queries.session_by_pk(conn, session_pk) if may_be_escaped(path.session_id) else None
        if session is not None and "session_id" in (written := queries.header_as_written(conn, session)):
            session_ids[session_pk] = written["session_id"]
    return entry_ids, session_ids


_COLUMNS = "e.pk, e.session_pk, e.seq, e.entry_id, e.type, e.role, e.timestamp, e.depth"


def _candidates(conn: Connection, sqlite: bool, match: str, session_pk: int | None, role: str | None,
                before: int | None, count: int) -> list[Row]:
    """Up to ``count`` matching rows below key ``before``, newest first (payloads not read)."""
    key = "f.rowid" if sqlite else "e.pk"  # FTS5 walks its index in rowid order: no sort
    filters = []
    if session_pk is not None:
        filters.append("e.session_pk = :spk")
    if role is not None:
        filters.append("(e.role = :role OR (e.role IS NULL AND e.type = :role))")
    if before is not None:
        filters.append(f"{key} < :before")
    where = "".join(f" AND {f}" for f in filters)
    if sqlite:
        source = "entries_fts AS f JOIN entries AS e ON e.pk = f.rowid WHERE entries_fts MATCH :q"
    else:
        source = f"entries AS e WHERE {match}"
    stmt = text(f"SELECT {_COLUMNS} FROM {source}{where} ORDER BY {key} DESC LIMIT :n")
    params = {"q": match, "spk": session_pk, "role": None if role is None else db_text(role), "before": before,
              "n": count}
    return list(conn.execute(stmt, {k: v for k, v in params.items() if f":{k}" in stmt.text}))


_LONGEST_WORD = 2047  # bytes: a longer word is no lexeme (pi_search_words and to_tsvector leave it out)


def _pg_match(query: fts.Query) -> str:
    """PostgreSQL's condition for ``query``: the rows whose words it asks for (the GIN index on
    ``pi_search_words``), and where it has a phrase, the phrase checked on them with the words'
    positions (``pi_search_vector``). The queries as literals: a prepared statement's generic plan
    cannot see how rare a word is (words are letters and digits: ``fts.parse_query``). A word
    longer than the index keeps is a ``BadQuery`` (``CAST`` refused it: an error from the server)."""
    too_long = [w for terms in query.alternatives for t in terms for w in t.words if len(w.encode()) > _LONGEST_WORD]
    if too_long:
        raise fts.BadQuery(f"{too_long[0][:20]}… ({len(too_long[0].encode())} bytes): PostgreSQL's index keeps "
                           f"words of at most {_LONGEST_WORD} bytes (text search drops longer ones)")
    words = f"pi_search_words(e.search_text) @@ CAST(lower({_literal(query.words_tsquery())}) AS tsquery)"
    if not query.has_phrase():
        return words
    return f"{words} AND pi_search_vector(e.search_text) @@ to_tsquery('simple', {_literal(query.tsquery())})"


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _snippets(conn: Connection, query: fts.Query, keys: list[tuple[int, int]]) -> dict[int, str]:
    """The hits' snippets (by row key, of rows given as ``(session_pk, pk)``), cut and marked here
    rather than by the engine, so that both engines give the same text (PostgreSQL's
    ``ts_headline`` parses words differently from its index). Looked up with their session keys:
    PostgreSQL's primary key is ``(session_pk, pk)``."""
    if not keys:
        return {}
    # SQLite: the view gives the texts that migration 0010 keeps in ``line`` alone (fts.ROW_TEXT)
    source = "entries_search AS e JOIN entries AS r ON r.pk = e.pk" if is_sqlite(conn) else "entries AS e"
    stmt = text(f"SELECT e.pk, e.search_text FROM {source} WHERE session_pk IN :spks AND e.pk IN :pks").bindparams(
        bindparam("spks", expanding=True), bindparam("pks", expanding=True))
    params = {"spks": sorted({spk for spk, _ in keys}), "pks": [pk for _, pk in keys]}
    return {pk: highlight(body, query) for pk, body in conn.execute(stmt, params)}


def highlight(body: str, query: fts.Query, words: int = _SNIPPET_WORDS) -> str:
    """About ``words`` words of ``body`` around the first matching one, as an HTML fragment: the
    text escaped (``&amp; &lt; &gt;``), the matches in ``<mark>`` (the only markup, so that a
    ``<mark>`` the text itself holds is not taken for a match)."""
    exact, prefixes = set(), []
    for terms in query.alternatives:
        for term in terms:
            if not term.excluded:
                exact.update(term.words[:-1] if term.prefix else term.words)
                if term.prefix:
                    prefixes.append(term.words[-1])
    tokens = _words(body)

    def matches(word: str) -> bool:
        word = word.lower()
        return word in exact or any(word.startswith(p) for p in prefixes)

    first = next((i for i, (_, _, word) in enumerate(tokens) if matches(word)), 0)
    start = max(0, min(first - words // 3, len(tokens) - words))
    window = tokens[start:start + words]
    if not window:
        return _text(body[:200])
    out, position = [], window[0][0]
    for begin, end, word in window:
        out.append(_text(body[position:begin]))
        out.append(f"<mark>{_text(body[begin:end])}</mark>" if matches(word) else _text(body[begin:end]))
        position = end
    head = "…" if start > 0 else _text(body[:window[0][0]])
    tail = "…" if start + words < len(tokens) else _text(body[position:])
    return head + "".join(out) + tail


def _words(body: str) -> list[tuple[int, int, str]]:
    """The words of ``body`` as (start, end, word): ``end`` past the combining marks that follow the
    word, so that a decomposed accent is marked with its letter (``cafe`` + U+0301)."""
    words = []
    for match in fts.WORD.finditer(body):
        end = match.end()
        while end < len(body) and unicodedata.category(body[end]).startswith("M"):
            end += 1
        words.append((match.start(), end, match.group()))
    return words


def _text(part: str) -> str:
    return escape(part, quote=False)


_SESSION = text("""
SELECT s.session_id, s.leaf_seq, c.seq AS compaction_seq, c.depth AS compaction_depth,
       c.facts ->> 'firstKeptEntryId' AS kept_id
FROM sessions AS s
LEFT JOIN entries AS leaf ON leaf.session_pk = s.pk AND leaf.seq = s.leaf_seq
LEFT JOIN entries AS c ON c.session_pk = s.pk AND c.seq = leaf.compaction_seq
WHERE s.pk = :spk
""")
_EDITS = text("SELECT target_id, seq, depth, facts ->> 'hides' AS hides FROM entries "
              "WHERE session_pk = :spk AND type = 'context_edit' AND kind = 'entry' AND type <> 'message'")


@dataclass(slots=True)
class _SessionPath:
    """What provenance needs of one session, read once per session (a few index lookups): its
    current path, the latest compaction on it, and its context edits."""

    session_id: str
    runs: list[tuple[int, int]]
    compaction: tuple[int, int] | None = None  # (seq, depth) of the latest compaction on the path
    kept_depth: int | None = None  # depth of its firstKeptEntryId row when that row is on the path before it
    edits: dict[str, list[Any]] = field(default_factory=dict)  # target id -> context edits of the session

    @classmethod
    def load(cls, conn: Connection, session_pk: int) -> _SessionPath:
        session = conn.execute(_SESSION, {"spk": session_pk}).one()
        path = cls(session.session_id, queries.path_runs(conn, session_pk, session.leaf_seq))
        if session.compaction_seq is not None:
            path.compaction = (session.compaction_seq, session.compaction_depth)
            kept_id = session.kept_id  # as facts hold it: an id with a lone surrogate or NUL escaped
            if kept_id is not None and may_be_escaped(kept_id):
                compaction_line = queries.lines_at(conn, session_pk, [session.compaction_seq])[session.compaction_seq]
                kept_id = prop(js_parse(compaction_line), "firstKeptEntryId")
            kept_seq = queries.seq_of(conn, session_pk, kept_id)  # None for a missing id
            kept = queries.tree_columns_of(conn, session_pk, kept_seq) if kept_seq is not None else None
            if kept is not None and path.contains(kept.seq) and kept.depth < session.compaction_depth:
                path.kept_depth = kept.depth
        for edit in conn.execute(_EDITS, {"spk": session_pk}):
            path.edits.setdefault(edit.target_id, []).append(edit)
        return path

    def contains(self, seq: int) -> bool:
        return any(first <= seq <= last for first, last in self.runs)

    def stage(self, seq: int, depth: int | None, on_path: bool) -> str | None:
        """``before`` / ``kept`` / ``after`` the latest compaction (see the module docstring)."""
        if self.compaction is None:
            return None
        compaction_seq, compaction_depth = self.compaction
        if not on_path or depth is None:
            return "before" if seq < compaction_seq else "after"
        if depth >= compaction_depth:
            return "after"
        return "kept" if self.kept_depth is not None and depth >= self.kept_depth else "before"

    def provenance(self, row: Any) -> Provenance:
        on_path = self.contains(row.seq)
        return Provenance(on_path, self.stage(row.seq, row.depth, on_path), self._edit_of(row) if on_path else None)

    def _edit_of(self, row: Any) -> str | None:
        """The latest context edit on the path, itself still in the context, that targets ``row``."""
        live = [e for e in self.edits.get(row.entry_id, ())
                if self.contains(e.seq) and self.stage(e.seq, e.depth, True) in (None, "kept", "after")]
        if not live:
            return None
        return "hidden" if int(max(live, key=lambda e: e.depth).hides) else "replaced"
