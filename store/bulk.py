"""Writing many rows of one session at once: a file streamed in by an import (a new session, or
lines appended to a stored one), or a session made from entries (new, forked, branched).

Two halves, so that the first can run in another process (``store.interchange.reading``):
:class:`RowBuilder` turns classified lines into ``entries`` rows — tree columns derived on the
way (``store.tree_columns.TreeBuilder``), listing columns of the session accumulated — without
touching the database; :class:`SessionWriter` inserts those rows in chunks inside the caller's
transaction and, at the end, settles what only the whole session tells (superseded duplicates,
links to later lines). Neither holds more than one chunk of rows; :func:`finish_session` /
:func:`advance_session` then write the ``sessions`` row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, bindparam, func, select, update

from store.analysis.activity_days import DayTotals
from store.analysis.pairs import SessionPairing
from store.db import current_path, queries
from store.db.appends import AppendCursor
from store.db.schema import entries, sessions
from store.db.stored_text import db_text
from store.db.writes import COPY_ROWS, ROW_COLUMNS, dbapi_sql, entry_values, insert_rows, insert_session
from store.format.jsdate import parse_js_date, storable_ms
from store.format.jsvalue import UNDEFINED, prop
from store.listing import ListingState
from store.loading import ENTRY, EXTRA_HEADER, HEADER, SKIPPED, VALUE, LineRow, LineWarning
from store.tree_columns import (
    NONE,
    TREE,
    IdKey,
    StoredRows,
    StoredTree,
    TreeBuilder,
    TreeColumns,
    TreeOutcome,
    id_key,
    setting_flags,
)

CHUNK_ROWS = 2000
_INT32 = (-(2**31), 2**31 - 1)  # the range of an INTEGER column on PostgreSQL
_IN_LIST = 500  # ids per IN (...) list
_KIND_AT, _RUN_START_AT = ROW_COLUMNS.index("kind"), ROW_COLUMNS.index("run_start")

_RELINK = """UPDATE entries SET parent_seq = ?, depth = ?, run_start = ?, compaction_seq = ?, thinking_seq = ?,
model_seq = ? WHERE session_pk = ? AND seq = ?"""
_SUPERSEDE = "UPDATE entries SET superseded = ? WHERE session_pk = ? AND seq = ?"


@dataclass(slots=True)
class RowsSummary:
    """What a :class:`RowBuilder` learnt about the rows it built (for the ``sessions`` row)."""

    first_seq: int
    rows: int = 0
    entries: int = 0
    header_seq: int | None = None
    leaf_seq: int | None = None
    conversation: bool = False
    named: bool = False  # a session_info entry was among the rows
    listing: ListingState = field(default_factory=ListingState)
    tree: TreeOutcome | None = None
    # rows appended to a stored session that only lengthen its path (``SessionWriter.finish``):
    # the turns they add to it; None when the path must be walked again
    path_growth: current_path.PathTurns | None = None


class RowBuilder:
    """``entries`` rows (``store.db.writes.entry_values`` tuples) of one session's lines, given in
    file order from ``first_seq`` on; no database access. ``stored``: the rows of the stored
    session that the lines name (appends; see :meth:`SessionWriter.look_up_stored`)."""

    def __init__(self, session_pk: int, *, first_seq: int = 0, derive_tree: bool = True,
                 stored: StoredRows | None = None) -> None:
        self.session_pk = session_pk
        self.tree = TreeBuilder(first_seq, stored) if derive_tree else None
        self.summary = RowsSummary(first_seq)

    def build(self, rows: list[LineRow]) -> list[tuple]:
        tree, spk, summary = self.tree, self.session_pk, self.summary
        add_listing = summary.listing.add
        values = []
        for row in rows:
            kind, value, cols = row.kind, row.value, None
            if kind in (ENTRY, VALUE):
                summary.entries += 1
                summary.leaf_seq = row.seq
                add_listing(value)
                if tree is not None:
                    cols = tree.add(row.seq, value)
                if kind == ENTRY and value.get("type") in ("message", "session_info"):
                    if value["type"] == "session_info":
                        summary.named = True
                    elif prop(value.get("message"), "role") in ("user", "assistant"):
                        summary.conversation = True
            else:
                if kind == EXTRA_HEADER:
                    add_listing(value)
                elif kind == HEADER:
                    summary.header_seq = row.seq
                elif kind == SKIPPED:
                    value = None
                if tree is not None:
                    tree.skip()
            values.append(entry_values(spk, row.seq, kind, value, row.line, cols, row.raw, row.eol))
        summary.rows += len(rows)
        return values

    def finish(self) -> RowsSummary:
        """The summary, with the tree's outcome (the builder's per-row memory is released)."""
        if self.tree is not None:
            self.summary.tree = self.tree.outcome()
            self.tree = None
        return self.summary


class SessionWriter:
    """The database side of storing rows of one session (see the module docstring). Use it as a
    context manager around the inserts and :meth:`finish`: on PostgreSQL the rows of a session
    written whole stream through one ``COPY`` that stays open from the first chunk to
    :meth:`finish` (the server stores a chunk while the next one is built), and a block that
    raises must abort it before the transaction can roll back."""

    def __init__(self, conn: Connection, session_pk: int, *, first_seq: int = 0) -> None:
        self.conn = conn
        self.session_pk = session_pk
        self.first_seq = first_seq
        self.stored = StoredRows() if first_seq else None  # appends: what the new rows name
        self._cursor = conn.connection.dbapi_connection.cursor()
        # PostgreSQL, every row of the session written here: its tool calls are paired in memory
        # and copied at the end (a statement per call and per result cost an import more than the
        # rows' own COPY). SQLite's executemany runs in-process: it keeps pairing in SQL.
        dialect = conn.dialect
        self._pairing = (SessionPairing() if not first_seq and dialect.name == "postgresql" and not dialect.is_async
                         else None)
        self._activity = DayTotals(failures=True)  # with _pairing: the activity totals, written at the end too
        self._copying = ExitStack()  # the open COPY of the rows, with _pairing
        self._copy: Any = None
        # appends: the turns of the rows, and the run of the last entry or value row among them (the leaf)
        self._turns = current_path.PathTurns() if first_seq else None
        self._stored_others: _StoredOthers | None = None  # appends: the stored rows' non-string ids, read once
        self._leaf_run: tuple[int | None] | None = None

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._copying.__exit__(*exc_info)  # an exception aborts an open COPY (psycopg sends CopyFail)

    def insert(self, values: list[tuple]) -> None:
        if self._turns is not None:
            self._turns.add_rows(values)
            for row in reversed(values):
                if row[_KIND_AT] in (ENTRY, VALUE):  # the leaf: the last entry or non-object value
                    self._leaf_run = (row[_RUN_START_AT],)
                    break
        if self._pairing is None:
            insert_rows(self.conn, values)
            return
        if self._copy is None:
            self._copy = self._copying.enter_context(self._cursor.copy(COPY_ROWS))
        write_row = self._copy.write_row
        for row in values:
            write_row(row[:-1])  # the columns, without the text's path (SQLite's: writes.without_path)
        self._pairing.add(values)
        self._activity.add(values)

    def finish(self, summary: RowsSummary) -> list[LineWarning]:
        """Settle what the whole session tells — rows superseded by later duplicates, rows whose
        parent id is defined at or after them — and return the tree's problems as warnings."""
        if self._pairing is not None:
            self._copying.close()  # the end of the rows' COPY: the server has stored them all
            self._copy = None
            self._activity.fail(self._pairing.failed_calls())
            self._pairing.copy(self._cursor)
            self._activity.write(self._cursor, self.conn.dialect)
        outcome = summary.tree
        if outcome is None:
            return []
        summary.path_growth = self._path_growth(outcome)
        if outcome.superseded:
            self._cursor.executemany(dbapi_sql(self.conn.dialect, _SUPERSEDE),
                                     [(True, self.session_pk, seq) for seq in outcome.superseded])
        problems = list(outcome.problems)
        if outcome.late_ids:
            problems += self._relink(outcome.late_ids, summary.first_seq + summary.rows)
        return [LineWarning(problem.seq + 1, problem.reason) for problem in problems]

    def _path_growth(self, outcome: TreeOutcome) -> current_path.PathTurns | None:
        """The appended rows' turns when they only lengthen the stored path: no stored row moves
        (no late id, no superseded duplicate) and the leaf's run, if a row that can be the leaf was appended,
        starts before them (``current_path.moved_run``); else None."""
        if self._turns is None or outcome.late_ids or outcome.superseded:
            return None
        if self._leaf_run is not None and (
                self._leaf_run[0] is None or current_path.moved_run(self.first_seq, self._leaf_run[0])):
            return None
        return self._turns

    def _relink(self, late_ids: set[IdKey], row_count: int) -> list:
        """Give the rows naming ``late_ids`` Pi's final answer — the last row with the id — and
        re-derive whatever that changes (loading the session's tree columns: a rare case)."""
        final = self._last_rows(late_ids)
        parents = {seq: final.get(parent_id, NONE)
                   for seq, parent_id, parent_seq in rows_naming(self.conn, self.session_pk, late_ids)
                   if final.get(parent_id, NONE) != (NONE if parent_seq is None else parent_seq)}
        if not parents:
            return []
        tree = StoredTree(self._tree_rows())
        if len(tree.flags) != row_count:
            raise RuntimeError(f"expected {row_count} rows of session {self.session_pk}, found {len(tree.flags)}")
        self._cursor.executemany(dbapi_sql(self.conn.dialect, _RELINK), [
            (c.parent_seq, c.depth, c.run_start, c.compaction_seq, c.thinking_seq, c.model_seq, self.session_pk, c.seq)
            for c in tree.relink(parents)
        ])
        return tree.problems

    def _last_rows(self, ids: Iterable[IdKey]) -> dict[IdKey, int]:
        """Per entry id, its last row (Pi's ``byId``)."""
        strings, others = _split(ids)
        by_text = {db_text(entry_id): entry_id for entry_id in strings}
        c = entries.c
        stmt = (select(c.entry_id, func.max(c.seq))
                .where(c.session_pk == self.session_pk, c.kind == ENTRY,
                       c.entry_id.in_(bindparam("ids", expanding=True)))
                .group_by(c.entry_id))
        last: dict[IdKey, int] = {by_text[text_id]: seq for texts in _chunks(list(by_text))
                                  for text_id, seq in self.conn.execute(stmt, {"ids": texts})}
        for seq, key, _row in queries.rows_keyed(self.conn, self.session_pk, "id", others):
            last[key] = max(seq, last.get(key, NONE))
        return last

    def _tree_rows(self) -> Iterator[tuple[int, int, int, int, int, int, int]]:
        c = entries.c
        stmt = (select(c.kind, c.type, c.role, c.parent_seq, c.depth, c.run_start, c.compaction_seq, c.thinking_seq,
                       c.model_seq)
                .where(c.session_pk == self.session_pk).order_by(c.seq))
        for kind, entry_type, role, *columns in self.conn.execute(stmt):
            flags = TREE | setting_flags(entry_type, role) if kind in (ENTRY, VALUE) else 0
            yield (flags, *(NONE if cell is None else cell for cell in columns))

    def look_up_stored(self, rows: list[LineRow], builder: RowBuilder) -> None:
        """Before ``builder`` builds a chunk of rows appended to a stored session: the stored rows
        that the chunk's ids and parent ids name, and whether stored rows name ids that the chunk
        defines anew (their parent then moves: a late id). Only this chunk's answers are kept."""
        stored, tree = self.stored, builder.tree
        if stored is None or tree is None:
            return
        stored.ids.clear()
        stored.columns.clear()
        wanted: set[IdKey] = set()
        defined: set[IdKey] = set()
        for row in rows:
            if row.kind != ENTRY:
                continue
            for key in ("id", "parentId"):
                entry_id = id_key(row.value.get(key))
                if entry_id and tree.ids.get(entry_id) == NONE:
                    wanted.add(entry_id)
                    if key == "id":
                        defined.add(entry_id)
        for entry_id in wanted:
            stored.ids[entry_id] = NONE
        strings, others = _split(wanted)
        c = entries.c
        columns = (c.seq, c.depth, c.run_start, c.compaction_seq, c.thinking_seq, c.model_seq)
        with_id = select(c.entry_id, *columns).where(
            c.session_pk == self.session_pk, c.kind == ENTRY, c.seq < self.first_seq,
            c.entry_id.in_(bindparam("ids", expanding=True)))
        by_text = {db_text(entry_id): entry_id for entry_id in strings}
        found = [(by_text[text_id], cells) for texts in _chunks(list(by_text))
                 for text_id, *cells in self.conn.execute(with_id, {"ids": texts})]
        stored_others = self._stored_non_string_ids() if others else None
        if stored_others is not None:
            found += [(key, stored_others.last[key]) for key in others if key in stored_others.last]
        for entry_id, (seq, *cells) in found:
            if seq > stored.ids[entry_id]:  # Pi's lookup: the last row with the id
                stored.ids[entry_id] = seq
                stored.columns[seq] = TreeColumns(seq, entry_id, None, *cells)
        strings, others = _split(defined)
        naming = select(c.parent_id).distinct().where(
            c.session_pk == self.session_pk, c.kind == ENTRY, c.seq < self.first_seq,
            c.parent_id.in_(bindparam("ids", expanding=True)))
        for texts in _chunks([db_text(entry_id) for entry_id in strings]):
            for (text_id,) in self.conn.execute(naming, {"ids": texts}):
                tree.late_ids.add(by_text[text_id])
        if others:
            tree.late_ids.update(others & self._stored_non_string_ids().named)

    def _stored_non_string_ids(self) -> _StoredOthers:
        """The stored rows' ids and parent ids that are not strings (files no Pi wrote), read once
        per import: a chunk of appended rows looks them up in memory, not on every row's line."""
        if self._stored_others is None:
            found = _StoredOthers()
            for seq, key, row in queries.rows_keyed(self.conn, self.session_pk, "id", None, below=self.first_seq):
                found.last[key] = (seq, *row[2:])  # in seq order: the last row with the id wins
            found.named = {key for _seq, key, _row in queries.rows_keyed(self.conn, self.session_pk, "parentId",
                                                                         None, below=self.first_seq)}
            self._stored_others = found
        return self._stored_others


@dataclass(slots=True)
class _StoredOthers:
    """:meth:`SessionWriter._stored_non_string_ids`: per id, the columns of its last stored row
    (``seq``, ``depth``, ``run_start``, ``compaction_seq``, ``thinking_seq``, ``model_seq``); the
    ids that stored rows name as their parent."""

    last: dict[IdKey, tuple] = field(default_factory=dict)
    named: set[IdKey] = field(default_factory=set)


def rows_naming(conn: Connection, session_pk: int, ids: Iterable[IdKey]) -> Iterator[tuple[int, IdKey, int | None]]:
    """``(seq, parent id, parent_seq)`` of every entry row whose ``parentId`` is one of ``ids``."""
    strings, others = _split(ids)
    by_text = {db_text(entry_id): entry_id for entry_id in strings}
    c = entries.c
    stmt = select(c.seq, c.parent_id, c.parent_seq).where(
        c.session_pk == session_pk, c.kind == ENTRY, c.parent_id.in_(bindparam("ids", expanding=True)))
    for texts in _chunks(list(by_text)):
        for seq, parent_id, parent_seq in conn.execute(stmt, {"ids": texts}):
            yield seq, by_text[parent_id], parent_seq
    for seq, key, row in queries.rows_keyed(conn, session_pk, "parentId", others):
        yield seq, key, row[1]


def _split(ids: Iterable[IdKey]) -> tuple[list[str], set[IdKey]]:
    """String ids (the ``entry_id`` / ``parent_id`` columns find them) and the others."""
    strings: list[str] = []
    others: set[IdKey] = set()
    for entry_id in ids:
        if entry_id.__class__ is str:
            strings.append(entry_id)  # type: ignore[arg-type]
        else:
            others.add(entry_id)
    return strings, others


def _chunks(items: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(items), _IN_LIST):
        yield items[start:start + _IN_LIST]


# ---------------------------------------------------------------------------------------------
# the sessions row


def create_session(conn: Connection, session_id: str) -> int:
    """A ``sessions`` row to hang rows on; :func:`finish_session` fills it in. Returns its key."""
    return insert_session(conn, session_id=session_id, cwd="", entry_count=0, message_count=0, last_seq=-1,
                          pi_valid=True, pi_listable=True, has_conversation=False)


def finish_session(conn: Connection, session_pk: int, head: dict | None, summary: RowsSummary, *, pi_valid: bool,
                   mtime_ms: float | None, **more: Any) -> None:
    """Write the header and listing columns of a session whose every row is ``summary``'s
    (``more``: further ``sessions`` columns, such as where the file came from)."""
    listing = summary.listing
    listing.header = head
    listable = head is not None and listing.pi_listable
    head = head or {}
    timestamp = head.get("timestamp", UNDEFINED)
    version = head.get("version")
    conn.execute(update(sessions).where(sessions.c.pk == session_pk).values(
        version=_int32(version),
        cwd=_db_text(head.get("cwd")) or "",
        parent_session=_db_text(head.get("parentSession")),
        created=_db_text(timestamp),
        created_ms=_ms(parse_js_date(timestamp)) if timestamp is not UNDEFINED else None,
        activity_ms=_ms(listing.last_activity_ms),
        modified_ms=_ms(listing.modified_ms(mtime_ms)),
        name=_db_text(listing.name),
        first_message=_db_text(listing.first_message or None),
        entry_count=summary.entries,
        message_count=listing.message_count,
        header_seq=summary.header_seq,
        last_seq=summary.first_seq + summary.rows - 1,
        leaf_seq=summary.leaf_seq if pi_valid else None,
        pi_valid=pi_valid,
        pi_listable=listable,
        has_conversation=summary.conversation,
        row_version=sessions.c.row_version + 1,  # a stored-again session is a change open managers must see
        diverged_seq=None,  # every row is the file's (or, made from entries, there is no file)
        **more,
    ))
    current_path.refresh_on(conn, session_pk)


def advance_session(conn: Connection, session_pk: int, summary: RowsSummary) -> None:
    """Record rows appended to a stored session in its ``sessions`` row."""
    if not summary.rows:
        return
    listing = summary.listing
    AppendCursor.on(conn).advance(
        session_pk, last_seq=summary.first_seq + summary.rows - 1, leaf_seq=summary.leaf_seq,
        entries=summary.entries, messages=listing.message_count, activity_ms=listing.last_activity_ms,
        first_message=_db_text(listing.first_message or None),
        name=(_db_text(listing.name),) if summary.named else None,
        conversation=summary.conversation, listable=listing.pi_listable,
    )
    if summary.path_growth is not None:  # the path only grew: add its new turns
        current_path.extend(conn.connection.dbapi_connection.cursor(), conn.dialect, session_pk, summary.path_growth)
    else:  # a new run, or the new rows relinked stored ones
        current_path.refresh_on(conn, session_pk)


def store_session_rows(conn: Connection, session_id: str, head: dict | None, rows: list[LineRow], *, pi_valid: bool,
                       mtime_ms: float | None, warnings: list[LineWarning] | None = None) -> int:
    """Insert a session and all its rows (a session made from entries); returns its key."""
    spk = create_session(conn, session_id)
    builder = RowBuilder(spk, derive_tree=pi_valid)
    with SessionWriter(conn, spk) as writer:
        for start in range(0, len(rows), CHUNK_ROWS):
            writer.insert(builder.build(rows[start:start + CHUNK_ROWS]))
        summary = builder.finish()
        problems = writer.finish(summary)
    if warnings is not None:
        warnings.extend(problems)
    finish_session(conn, spk, head, summary, pi_valid=pi_valid, mtime_ms=mtime_ms)
    return spk


def _db_text(value: Any) -> str | None:
    """A string value as the ``sessions`` columns hold it (``db_text``; the line keeps the original)."""
    return db_text(value) if isinstance(value, str) else None


def _int32(value: Any) -> int | None:
    """An integer header field as a 32-bit INTEGER column holds it, else None (the header line
    keeps any number as written; PostgreSQL refuses a larger one)."""
    if isinstance(value, int) and not isinstance(value, bool) and _INT32[0] <= value <= _INT32[1]:
        return value
    return None


def _ms(value: float | None) -> int | None:
    return None if value is None else storable_ms(value)
