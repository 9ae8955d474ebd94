"""``SessionManager``: Pi's session API (snake_case) over one session's rows.

A manager holds only the session's identity and its leaf; every answer comes from the database.
Until a persistent session holds a user or assistant message it lives in a private in-memory
SQLite database (Pi writes no file until then); the first such message copies it, together with
that message, into the store in one transaction. ``SessionStore.in_memory`` sessions never leave
the private database. All writes go through :class:`_Batch`: appended entries are buffered,
then committed in one write transaction that allocates their rows (a single append under the
leaf runs that transaction on the driver's connection); when anything fails nothing is stored
and the manager keeps its previous leaf.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import Connection, Engine, Row, literal_column, select
from sqlalchemy.exc import DBAPIError

from store import new_entries, services
from store.analysis import fts
from store.analysis.pairs import row_pairing
from store.context_window import context_path
from store.db import current_path, queries
from store.db.appends import AppendCursor, LockedSession, Seen, session_changes
from store.db.engine import (
    ConnectionLost,
    behind_pooler,
    driver_error,
    driver_statement,
    driver_write_transaction,
    read_transaction,
    write_transaction,
)
from store.db.schema import entries as entries_table
from store.db.stored_text import db_text, may_be_escaped
from store.db.writes import ROW_COLUMNS, entry_values, insert_rows, insert_session
from store.errors import (
    EntryNotFound,
    InvalidEntry,
    NotEditable,
    NotOnActiveBranch,
    NotPiSession,
    SessionClaimed,
    SessionExists,
    SessionNotFound,
)
from store.format import js_parse, js_stringify
from store.format.jsvalue import UNDEFINED, prop, truthy
from store.gc_pause import gc_paused
from store.listing import ListingState, trimmed_session_name
from store.ownership import Claim, check_write, release_claim, renew_claim, take_claim
from store.tree import TreeNode, build_tree, resolve_labels
from store.tree_columns import TreeColumns, derive_child, id_key

if TYPE_CHECKING:
    from store.session_store import SessionStore

EDITABLE_ROLES = ("user", "assistant", "toolResult")
LOAD_IDS_AFTER = 256  # appends in one batch after which the session's ids are loaded once


@dataclass(slots=True)
class _Batch:
    """An open write transaction collecting appends (see ``SessionManager.batch``)."""

    conn: Connection | None  # None on the single-append path (no SQLAlchemy reads there)
    cursor: AppendCursor
    last_seq: int
    rows: int = 0
    unwritten: list[tuple] = field(default_factory=list)  # rows not yet sent to the database
    new_ids: set[str] = field(default_factory=set)
    known_ids: set[str] | None = None  # all ids of the session, once a long batch loaded them
    listing: ListingState = field(default_factory=lambda: ListingState(texts=None))
    name: tuple[str | None] | None = None
    conversation: bool = False
    leaf_run_start: int = 0  # run_start of the last appended row (store.db.current_path)
    turns: current_path.PathTurns = field(default_factory=current_path.PathTurns)  # what the rows add to


@dataclass(slots=True)
class _Attempt:
    """A single append: its entry id and timestamp, drawn before anything is written (so that a
    refused append leaves the same draw unused on both engines), and how its try without the lock
    went (``SessionManager._append_unlocked``, PostgreSQL)."""

    entry_id: str  # the first of Pi's id candidates
    timestamp: str
    candidates: Iterator[str]  # the candidates after it
    entry: dict = field(default_factory=dict)
    seq: int = 0
    line: str = ""
    leaf: tuple = (None, None)  # the leaf (columns, id) the entry makes
    written: bool = False
    sent: bool = False
    lost: bool = False  # the connection failed once the statement was sent: written or not, the lock will tell


_LINE = ROW_COLUMNS.index("line")


def _is_conversation(entry: dict) -> bool:
    return entry.get("type") == "message" and prop(entry.get("message"), "role") in ("user", "assistant")


class SessionManager:
    """One session: append entries, move the leaf, read the tree (Pi's ``SessionManager``)."""

    def __init__(self, store: SessionStore, engine: Engine, session_pk: int, *, persist: bool,
                 flushed: bool, read: tuple[Connection, Row] | None = None) -> None:
        """``read``: a read transaction's connection and the session row it read (the leaf is
        read in that transaction too); else the row is read in a transaction of its own."""
        self._store = store
        self._engine = engine
        self._spk = session_pk
        self._persist = persist
        self._flushed = flushed
        self._batch: _Batch | None = None
        self._claim: Claim | None = None
        if read is None:
            self._load_identity()
        else:
            self._take_identity(*read)

    def _load_identity(self, session_id: str | None = None) -> None:
        """Read identity, version and leaf from the session row (``session_id``: the one this
        manager already names, which must still be the row's)."""
        with self._reading() as conn:
            row = queries.session_by_pk(conn, self._spk)
            if row is None or (session_id is not None and row.session_id != db_text(session_id)):
                raise SessionNotFound(f"session {session_id} is no longer in the store")
            self._take_identity(conn, row)

    def _take_identity(self, conn: Connection, row: Row) -> None:
        """Identity, version and leaf from the session ``row``, read on ``conn`` (the leaf's
        columns read there too); ``NotPiSession`` when Pi would not open the session's file."""
        if not row.pi_valid:
            raise NotPiSession(f"session {row.session_id} is not a valid Pi session: Pi refuses to open its file "
                               "(it has no session header first, or Pi cannot migrate it), so it is not opened or "
                               "written here either; it can be exported or deleted")
        self._stored_id: str = row.session_id  # db_text's form: what the columns hold and are compared with
        written = queries.header_as_written(conn, row)
        self.session_id: str = written.get("session_id", row.session_id)
        self._header_seq: int | None = row.header_seq
        self.cwd: str = written.get("cwd", row.cwd)
        self._version: int = row.row_version
        self._last_seq: int | None = row.last_seq
        # a file's history, not written to since: its last line may lack its newline (see _end_file_line)
        self._maybe_unended = row.diverged_seq is None and row.source_sha256 is not None and row.last_seq >= 0
        # the leaf: Pi's leafId (the id of the last entry or of the entry branched to: any JSON value
        # when a file has other than string ids, UNDEFINED when it has none), and its row's columns
        # (None when the id is null: Pi's context is then empty)
        self._leaf_id: Any = None
        self._leaf: TreeColumns | None = None
        if row.leaf_seq is not None:
            self._set_leaf_from_seq(conn, row.leaf_seq)

    def refresh(self) -> None:
        """Read the session again as it is stored now: its version, and its leaf by Pi's rule
        (the last entry in file order). Call it after :class:`~store.errors.SessionChanged`.
        Raises ``SessionNotFound`` when the session was deleted."""
        if self._batch is not None:
            raise RuntimeError("refresh() inside batch(): the batch's view is the one it writes")
        self._load_identity(self.session_id)

    def get_version(self) -> int:
        """The session version this manager last opened, refreshed or wrote (``row_version``)."""
        return self._version

    def _set_leaf_from_seq(self, conn, seq: int) -> None:
        cols = queries.tree_columns_of(conn, self._spk, seq)
        leaf_id = None
        if cols is not None and cols.depth is not None:
            leaf_id = cols.entry_id  # a string id as stored, else as the line has it (a file no Pi wrote)
            if leaf_id is None or may_be_escaped(leaf_id):
                leaf_id = prop(js_parse(queries.lines_at(conn, self._spk, [seq])[seq]), "id")
        if leaf_id is None:
            self._leaf, self._leaf_id = None, None
            return
        self._leaf = TreeColumns(
            cols.seq, cols.entry_id, cols.parent_seq, cols.depth, cols.run_start,
            cols.compaction_seq, cols.thinking_seq, cols.model_seq,
        )
        self._leaf_id = leaf_id

    def _branch_seq(self) -> int | None:
        """The row Pi's ``getBranch()`` starts from: the leaf's, when its id can be looked up."""
        return self._leaf.seq if self._leaf is not None and truthy(self._leaf_id) else None

    def close(self) -> None:
        """Release a private (not yet stored or in-memory) session's database."""
        if self._engine is not self._store.engine:
            self._engine.dispose()

    # ------------------------------------------------------------------ identity
    def is_persisted(self) -> bool:
        return self._persist

    def get_session_id(self) -> str:
        return self.session_id

    def get_cwd(self) -> str:
        return self.cwd

    # ------------------------------------------------------------------ claims (store.ownership)
    def claim(self, owner: str, ttl_ms: int | None = 60_000, *, force: bool = False) -> Claim:
        """Make this manager the session's only writer, as ``owner``, with a new fencing token.

        Other writers are refused while the claim is live; this manager's writes are refused as
        soon as another writer takes the claim over (after ``ttl_ms`` without :meth:`renew_claim`,
        or by ``force``), however late they arrive. Refused (``SessionClaimed``) while another
        owner's claim is live, unless ``force``."""
        self._require_stored("claimed")
        with write_transaction(self._engine) as conn:
            self._claim = take_claim(conn, self.session_id, owner, ttl_ms=ttl_ms, now_ms=self._store.clock(),
                                     force=force)
        return self._claim

    def renew_claim(self, ttl_ms: int | None = 60_000) -> Claim:
        """Extend this manager's claim; ``SessionClaimed`` if it was taken over or released."""
        if self._claim is None:
            raise SessionClaimed(f"session {self.session_id}: this manager holds no claim")
        with write_transaction(self._engine) as conn:
            self._claim = renew_claim(conn, self._claim, ttl_ms=ttl_ms, now_ms=self._store.clock())
        return self._claim

    def release_claim(self) -> None:
        """Give this manager's claim up (nothing happens if it no longer holds the session's claim)."""
        claim, self._claim = self._claim, None
        if claim is None:
            return
        with write_transaction(self._engine) as conn, suppress(SessionClaimed):  # taken over: not ours
            release_claim(conn, self.session_id, owner=claim.owner, token=claim.token)

    def get_claim(self) -> Claim | None:
        """The claim this manager writes under, if any."""
        return self._claim

    def _require_stored(self, what: str) -> None:
        if not (self._persist and self._flushed):
            raise SessionNotFound(f"session {self.session_id} is not in the store (yet) and cannot be {what}: "
                                  "a persistent session is stored with its first user or assistant message")

    # ------------------------------------------------------------------ writing
    @contextmanager
    def batch(self) -> Iterator[SessionManager]:
        """Run the block's appends in one write transaction, committed when the block ends.

        Reads inside the block see the block's entries. If the block raises, nothing of it is
        stored and the leaf goes back to where it was. The transaction holds the database's write
        lock (SQLite) or the session row's lock (PostgreSQL) until the block ends. A ``batch()``
        inside another is part of the outer one (no savepoint): what it appended stays if the outer
        block catches its exception, and is stored or dropped with the outer block.
        """
        if self._batch is not None:
            yield self
            return
        base = (self._leaf, self._leaf_id)
        private = self._engine
        try:
            with write_transaction(private) as conn:
                try:  # the batch's statements go past SQLAlchemy: its driver errors, as SQLAlchemy's
                    cursor = AppendCursor.on(conn)
                    self._batch = _Batch(conn, cursor, last_seq=self._lock(cursor))
                    yield self
                    wrote = self._write(self._batch)
                except private.dialect.loaded_dbapi.Error as exc:
                    raise driver_error(private, exc) from exc
                last_seq = self._batch.last_seq
        except BaseException:
            self._leaf, self._leaf_id = base
            raise
        finally:
            self._batch = None
        if wrote:
            self._count_write(last_seq)
        if self._engine is not private:  # moved into the store: the private database is done
            private.dispose()

    def _lock(self, cursor: AppendCursor, opening: str = "", locked: LockedSession | None = None) -> int:
        """Lock the session row (``locked``: as read under the lock already) and check that this
        manager may write it (``store.ownership``); returns the session's ``last_seq``."""
        if locked is None:
            locked = cursor.lock_session(self._spk, opening)
        check_write(locked, session_id=self._stored_id, expected_version=self._version, claim=self._claim,
                    clock=self._store.clock)
        assert locked is not None
        return locked.last_seq

    def _changes(self, batch: _Batch) -> tuple:
        """The batch's changes of the session row (``store.db.appends.session_changes``)."""
        return session_changes(
            self._spk, last_seq=batch.last_seq, leaf_seq=batch.last_seq, entries=batch.rows,
            messages=batch.listing.message_count, activity_ms=batch.listing.last_activity_ms,
            first_message=db_text(batch.listing.first_message) if batch.listing.first_message else None,
            name=None if batch.name is None else (batch.name[0] and db_text(batch.name[0]),),
            conversation=batch.conversation, listable=batch.listing.pi_listable,
            diverge_at=batch.last_seq - batch.rows + 1,
        )

    def _refresh_path(self, batch: _Batch) -> None:
        """Rewrite the session's ``path_runs`` after the session row has its new leaf, only when
        the leaf's run changed (``store.db.current_path``); a linear append only adds its
        messages to the path's turns."""
        if self._moved_run(batch):
            batch.cursor.refresh_path(self._spk)
        else:
            batch.cursor.extend_path(self._spk, batch.turns)

    @staticmethod
    def _moved_run(batch: _Batch) -> bool:
        return current_path.moved_run(batch.last_seq - batch.rows + 1, batch.leaf_run_start)

    def _write(self, batch: _Batch) -> bool:
        """Send the batch's unwritten rows and its listing changes (inside its transaction);
        returns whether the batch changed the session (and so its version)."""
        if batch.rows:
            self._end_file_line(batch.cursor)
        batch.cursor.insert(batch.unwritten)
        if not batch.rows:
            return False
        batch.cursor.advance_with(self._changes(batch))
        self._refresh_path(batch)
        if self._persist and not self._flushed and batch.conversation:
            assert batch.conn is not None  # single appends never take the private-to-store step
            self._store_private_session(batch.conn)
        return True

    def _append(self, build: Callable[[str, str | None, str], dict], parent: str | bool | None = False) -> dict:
        """Create an entry under the leaf (or under ``parent`` when given) and make it the leaf."""
        if self._batch is not None:
            return self._append_to(self._batch, build, parent)
        if parent is False and (self._flushed or not self._persist):
            return self._append_single(build)
        with self.batch():
            assert self._batch is not None
            return self._append_to(self._batch, build, parent)

    def _append_single(self, build: Callable[[str, str | None, str], dict]) -> dict:
        """The common case on its own fast path: one entry under the leaf, in a transaction run
        on the driver's connection (see ``driver_write_transaction``). Its timestamp and id
        candidates are drawn first (:meth:`_draw`), whatever the engine. Pi's first candidate id is
        not looked up: the insert itself checks it (on PostgreSQL the insert and the session
        update are one statement); in the rare case that it is taken, the entry is made again,
        as Pi would have made it, with the next free candidate and the same timestamp.

        On PostgreSQL the append first goes as one statement without a transaction around it
        (:meth:`_append_unlocked`); the locked transaction only runs when that wrote nothing."""
        base = (self._leaf, self._leaf_id)
        attempt = self._draw()
        if self._may_write_unlocked():
            self._append_unlocked(build, attempt)
            if attempt.written:
                return self._appended(attempt.entry, attempt.seq)
        begin = partial(self._begin_single, lost=attempt) if attempt.lost else self._begin_single
        landed = False
        try:
            with driver_write_transaction(self._engine, begin) as (cursor, last_seq):
                landed = last_seq is None  # the lost attempt had been written (counted once this ends)
                if not landed:
                    entry, last_seq = self._write_single(build, cursor, last_seq, attempt)
        except DBAPIError:
            if not landed:  # found committed, the entry stays so whatever ends the reading transaction
                self._leaf, self._leaf_id = base
                raise
        except BaseException:
            self._leaf, self._leaf_id = base
            raise
        if landed:
            self._leaf, self._leaf_id = attempt.leaf
            return self._appended(attempt.entry, attempt.seq)
        return self._appended(entry, last_seq)

    def _write_single(self, build: Callable[[str, str | None, str], dict], cursor: AppendCursor, last_seq: int,
                      attempt: _Attempt) -> tuple[dict, int]:
        """The locked single append (inside its transaction, ``last_seq`` read under the lock):
        the entry and the session's new last row."""
        base = (self._leaf, self._leaf_id)
        candidates, timestamp = itertools.chain((attempt.entry_id,), attempt.candidates), attempt.timestamp
        batch = _Batch(None, cursor, last_seq=last_seq)
        entry = self._append_to(batch, build, False, entry_id=next(candidates), timestamp=timestamp)
        moved = self._moved_run(batch)
        self._end_file_line(cursor)
        if cursor.insert_new(batch.unwritten.pop(), self._changes(batch), None if moved else batch.turns):
            if moved:
                cursor.refresh_path(self._spk)
            return entry, batch.last_seq
        self._leaf, self._leaf_id = base
        batch = _Batch(None, cursor, last_seq=last_seq)
        entry_id = self._new_id(batch, candidates)
        entry = self._append_to(batch, build, False, entry_id=entry_id, timestamp=timestamp)
        self._write(batch)
        return entry, batch.last_seq

    def _end_file_line(self, cursor: AppendCursor) -> None:
        """Before the store's first write to a file's history: if the file's last line has no
        newline, give it one, as Pi does when it opens such a file, so that the export keeps the
        new entry on a line of its own (the write lock is held and the version checked: that line
        is still the last)."""
        if self._maybe_unended and self._last_seq is not None:
            cursor.end_line(self._spk, self._last_seq)

    def _appended(self, entry: dict, last_seq: int) -> dict:
        self._count_write(last_seq)
        return entry

    def _count_write(self, last_seq: int) -> None:
        """Count a write of this manager in the version it knows, with the session's last row."""
        self._version += 1
        self._last_seq = last_seq
        self._maybe_unended = False

    def _draw(self) -> _Attempt:
        """A single append's timestamp and Pi's id candidates for it, drawn before it writes (the
        locked path makes the entry with them again when the unlocked try wrote nothing)."""
        timestamp = self._now()
        candidates = new_entries.id_candidates(self._store.new_uuid)
        return _Attempt(next(candidates), timestamp, candidates)

    def _may_write_unlocked(self) -> bool:
        """PostgreSQL, where this manager knows the session's last row (and it needs no line end:
        :meth:`_end_file_line`), and not behind a transaction pooler (its timeouts are set per
        transaction)."""
        return (self._last_seq is not None and not self._maybe_unended and self._engine.dialect.name == "postgresql"
                and not behind_pooler(self._engine.url))

    def _append_unlocked(self, build: Callable[[str, str | None, str], dict], attempt: _Attempt) -> None:
        """Write one entry under the leaf as one statement that is its own transaction
        (``AppendCursor.insert_if_current``: one round trip where the locked transaction takes
        three), if the session row is as this manager last saw it — its version, its last row,
        its claim — and the entry lengthens the leaf's run and is not a failed tool result
        (whose failures are counted first, ``store.analysis.pairs.pair_inserted``);
        else nothing is written and the locked path takes over with the same id and timestamp.
        A connection that fails leaves it unknown whether the entry was written
        (``attempt.lost``): the locked path finds out first."""
        assert self._last_seq is not None
        base = (self._leaf, self._leaf_id)
        seen = Seen(self._stored_id, self._version, self._last_seq,
                    None if self._claim is None else (self._claim.owner, self._claim.token))

        def run(dbapi_connection: Any) -> bool:
            cursor = AppendCursor(dbapi_connection, self._engine.dialect)
            batch = _Batch(None, cursor, last_seq=seen.last_seq)
            attempt.entry = self._append_to(batch, build, False, entry_id=attempt.entry_id, timestamp=attempt.timestamp)
            row = batch.unwritten[0]
            attempt.seq, attempt.line, attempt.leaf = batch.last_seq, row[_LINE], (self._leaf, self._leaf_id)
            pairing = row_pairing(row)
            if self._moved_run(batch) or pairing is None:
                return False
            attempt.sent = True
            return cursor.insert_if_current(row, self._changes(batch), batch.turns, seen, pairing)

        try:
            attempt.written = driver_statement(self._engine, run)
        except ConnectionLost:  # found dead before the statement was sent: the locked path starts again
            attempt.lost = attempt.sent
        except BaseException:
            self._leaf, self._leaf_id = base
            raise
        if not attempt.written:
            self._leaf, self._leaf_id = base

    def _begin_single(self, dbapi_connection: Any, opening: str,
                      lost: _Attempt | None = None) -> tuple[AppendCursor, int | None]:
        """The single append's cursor and the session's ``last_seq``, checked under the lock
        (``opening``: see ``driver_write_transaction``); None for ``last_seq`` when the ``lost``
        unlocked attempt turns out to have been written (the session holds its entry as its line)."""
        cursor = AppendCursor(dbapi_connection, self._engine.dialect)
        if lost is None:
            return cursor, self._lock(cursor, opening)
        locked = cursor.lock_session(self._spk, opening)
        # its row is there, whatever was written since: this manager's write, one version on from
        # what it knew (the next append learns of the others' writes as usual)
        if (locked is not None and locked.session_id == self._stored_id
                and cursor.holds(self._spk, lost.seq, lost.entry_id, lost.line)):
            return cursor, None
        return cursor, self._lock(cursor, locked=locked)

    def _append_to(self, batch: _Batch, build: Callable[[str, str | None, str], dict], parent: str | bool | None,
                   *, entry_id: str | None = None, timestamp: str | None = None) -> dict:
        """Make the entry (with ``entry_id`` and ``timestamp`` when given, else a new id and the
        clock's time), buffer its row and make it the leaf."""
        if parent is False:  # under the leaf, if a re-read of the file finds it by the parentId written
            parent_id = self._leaf_id
            parent_cols = self._leaf if _finds_itself(parent_id) else None
        else:
            parent_id = parent  # type: ignore[assignment]
            parent_cols = self._columns_of(batch.conn, parent_id) if parent_id is not None else None
        entry = build(self._new_id(batch) if entry_id is None else entry_id, parent_id,
                      self._now() if timestamp is None else timestamp)
        if parent_id is UNDEFINED:  # a leaf without an id: JSON.stringify leaves the key out
            del entry["parentId"]
        try:
            line = js_stringify(entry)
        except (TypeError, ValueError, RecursionError) as exc:  # a set, an object, a cycle
            raise InvalidEntry(f"the {entry.get('type')} entry cannot be written as JSON: {exc}") from exc
        seq = batch.last_seq + 1
        cols = derive_child(seq, entry["id"], entry, parent_cols)
        row = entry_values(self._spk, seq, "entry", entry, line, cols)
        batch.unwritten.append(row)
        batch.turns.add_rows((row,))
        batch.last_seq, batch.rows, batch.leaf_run_start = seq, batch.rows + 1, cols.run_start
        batch.listing.add(entry)
        if entry["type"] == "session_info":
            batch.name = (trimmed_session_name(entry),)
        batch.conversation = batch.conversation or _is_conversation(entry)
        self._leaf, self._leaf_id = cols, entry["id"]
        return entry

    def _columns_of(self, conn: Connection, entry_id: str) -> TreeColumns:
        seq = queries.seq_of(conn, self._spk, entry_id)
        cols = queries.tree_columns_of(conn, self._spk, seq) if seq is not None else None
        if cols is None:
            raise EntryNotFound(f"Entry {entry_id} not found")
        return TreeColumns(cols.seq, cols.entry_id, cols.parent_seq, cols.depth, cols.run_start,
                           cols.compaction_seq, cols.thinking_seq, cols.model_seq)

    def _new_id(self, batch: _Batch, candidates: Iterator[str] | None = None) -> str:
        """An id no entry of the session has (Pi: 8 hex digits, 100 tries, then a full UUID;
        ``candidates``: the tries left after some were found taken).

        The batch holds the write lock, so checking is exact. The first appends of a batch ask
        the database once per id; a long batch loads the session's ids once instead."""
        if batch.known_ids is None and batch.rows >= LOAD_IDS_AFTER:
            batch.known_ids = batch.cursor.all_ids(self._spk) | batch.new_ids
        known = batch.known_ids

        def taken(candidate: str) -> bool:
            if known is not None:
                return candidate in known
            return candidate in batch.new_ids or batch.cursor.id_taken(self._spk, candidate)

        new_id = new_entries.entry_id(self._store.new_uuid, taken, candidates)
        batch.new_ids.add(new_id)
        if known is not None:
            known.add(new_id)
        return new_id

    def _now(self) -> str:
        return new_entries.now_iso(self._store.clock())

    def _store_private_session(self, private: Connection) -> None:
        """Copy this session from its private database into the store (one transaction), then
        switch to it. Raises SessionExists — and changes nothing — if the id is taken there."""
        session = queries.session_by_pk(private, self._spk)._asdict()
        rows = [row._asdict() for row in private.execute(
            select(entries_table, literal_column(fts.ROW_TEXT.format(r="entries")).label("kept_text"))
            .where(entries_table.c.session_pk == self._spk).order_by(entries_table.c.seq)
        )]
        with write_transaction(self._store.engine) as conn:
            if queries.session_by_id(conn, session["session_id"]) is not None:
                raise SessionExists(f"session {session['session_id']} already exists in the store")
            session.pop("pk")
            spk = insert_session(conn, **session)
            for row in rows:
                row["session_pk"] = spk
            insert_rows(conn, [_with_text(row) for row in rows])
            current_path.refresh_on(conn, spk)
        self._engine, self._spk, self._flushed = self._store.engine, spk, True

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        """The open batch's connection (reads see its entries), else a read snapshot."""
        if self._batch is not None:
            self._batch.cursor.insert(self._batch.unwritten)
            self._batch.unwritten.clear()
            yield self._batch.conn
        else:
            with read_transaction(self._engine) as conn:
                yield conn

    # ------------------------------------------------------------------ append_*
    def append_message(self, message: Any) -> str:
        """Append a message (a dict or a ``store.format.models`` message) under the leaf."""
        msg = _as_dict(message)
        if not isinstance(msg.get("role"), str):
            raise InvalidEntry("a message needs a string 'role'")
        return self._append(lambda i, p, t: new_entries.message(i, p, t, msg))["id"]

    def append_thinking_level_change(self, thinking_level: str) -> str:
        return self._append(lambda i, p, t: new_entries.thinking_level_change(i, p, t, thinking_level))["id"]

    def append_model_change(self, provider: str, model_id: str) -> str:
        return self._append(lambda i, p, t: new_entries.model_change(i, p, t, provider, model_id))["id"]

    def append_usage(self, kind: str, provider: str, model: str, usage: dict, note: str | None = None) -> dict:
        """Append model-attributed usage outside the LLM context; returns the entry (as Pi does)."""
        return self._append(lambda i, p, t: new_entries.usage(i, p, t, kind, provider, model, usage, note))

    def append_compaction(self, summary: str, first_kept_entry_id: str | None, tokens_before: int,
                          details: Any = None, from_hook: bool | None = None, usage: Any = None) -> str:
        """Append a compaction; ``first_kept_entry_id=None`` keeps nothing (stores the entry's own
        id). It stores the system message replayed from the current projection as checkpoint."""
        messages = self.build_session_projection().messages

        def build(entry_id: str, parent_id: str | None, timestamp: str) -> dict:
            return services.build_compaction_entry(
                summary, first_kept_entry_id, tokens_before, entry_id=entry_id, parent_id=parent_id,
                timestamp=timestamp, projection_messages=messages, details=_given(details),
                from_hook=_given(from_hook), usage=_given(usage),
            )

        return self._append(build)["id"]

    def append_custom_entry(self, custom_type: str, data: Any = None) -> str:
        return self._append(lambda i, p, t: new_entries.custom(i, p, t, custom_type, data))["id"]

    def append_session_info(self, name: str) -> str:
        return self._append(lambda i, p, t: new_entries.session_info(i, p, t, name))["id"]

    def append_custom_message_entry(self, custom_type: str, content: Any, display: bool,
                                    details: Any = None) -> str:
        return self._append(lambda i, p, t: new_entries.custom_message(
            i, p, t, custom_type, content, display, details))["id"]

    def append_label_change(self, target_id: str, label: str | None) -> str:
        """Set (or, with None / "", clear) the label of an existing entry."""
        self._require_entry(target_id)
        return self._append(lambda i, p, t: new_entries.label(i, p, t, target_id, label))["id"]

    def append_context_edit(self, target_id: str, replacement: dict | None) -> str:
        """Replace (``{"content": ...}``) or hide (None) an earlier entry's model-visible content."""
        new_entries.check_replacement(replacement)
        target = self._require_entry(target_id)
        if target_id not in self._active_branch_ids():
            raise NotOnActiveBranch(f"Entry {target_id} is not on the active branch")
        role = prop(target.get("message"), "role") if target.get("type") == "message" else None
        if not (target.get("type") == "custom_message" or role in EDITABLE_ROLES):
            raise NotEditable(f"Entry {target_id} does not contribute editable model content")
        if replacement is not None and role in ("assistant", "toolResult") and isinstance(replacement["content"], str):
            replacement = {"content": [{"type": "text", "text": replacement["content"]}]}
        return self._append(lambda i, p, t: new_entries.context_edit(i, p, t, target_id, replacement))["id"]

    def _require_entry(self, entry_id: str) -> dict:
        entry = self.get_entry(entry_id)
        if entry is None:
            raise EntryNotFound(f"Entry {entry_id} not found")
        return entry

    def _active_branch_ids(self) -> list[Any]:
        """The ids on the active branch, as :meth:`get_branch_ids` gives them (a list: an id that
        is not a string may be an object)."""
        return self.get_branch_ids()

    # ------------------------------------------------------------------ leaf movement
    def branch(self, branch_from_id: str) -> None:
        """Move the leaf to an existing entry (writes nothing)."""
        with self._reading() as conn:
            seq = queries.seq_of(conn, self._spk, branch_from_id)
            if seq is None:
                raise EntryNotFound(f"Entry {branch_from_id} not found")
            self._set_leaf_from_seq(conn, seq)

    def reset_leaf(self) -> None:
        """Set the leaf to none: the next append starts a new root."""
        self._leaf, self._leaf_id = None, None

    def branch_with_summary(self, branch_from_id: str | None, summary: str, details: Any = None,
                            from_hook: bool | None = None, usage: Any = None) -> str:
        """Move the leaf to ``branch_from_id`` and append a branch summary of the path left behind."""
        from_id = self._leaf_id if self._leaf_id is not None and self._leaf_id is not UNDEFINED else "root"
        if branch_from_id is not None:
            self._require_entry(branch_from_id)
        return self._append(
            lambda i, p, t: new_entries.branch_summary(i, p, t, from_id, summary, details, usage, from_hook),
            parent=branch_from_id,
        )["id"]

    # ------------------------------------------------------------------ reading
    def get_leaf_id(self) -> Any:
        """Pi's leaf id: a string, None for no leaf (or, in files no Pi wrote, the leaf's other id)."""
        return None if self._leaf_id is UNDEFINED else self._leaf_id

    def _leaf_seq(self) -> int | None:
        return self._leaf.seq if self._leaf is not None else None

    def get_leaf_entry(self) -> dict | None:
        seq = self._branch_seq()
        if seq is None:
            return None
        with self._reading() as conn:
            return js_parse(queries.lines_at(conn, self._spk, [seq])[seq])

    def get_entry(self, entry_id: str) -> dict | None:
        with self._reading() as conn:
            seq = queries.seq_of(conn, self._spk, entry_id)
            lines = queries.lines_at(conn, self._spk, [seq]) if seq is not None else {}
        return js_parse(lines[seq]) if lines else None

    def _seq_of_id(self, conn: Connection, entry_id: str) -> int | None:
        """The row Pi's ``getBranch(entry_id)`` starts from (none for the falsy id ``""``)."""
        return queries.seq_of(conn, self._spk, entry_id) if entry_id else None

    def get_branch(self, from_id: str | None = None) -> list:
        """Entries from the root to ``from_id`` (default: the leaf), root first."""
        with self._reading() as conn, gc_paused():
            seq = self._branch_seq() if from_id is None else self._seq_of_id(conn, from_id)
            return [js_parse(row.line) for row in queries.path_rows(conn, self._spk, seq, "line")]

    def get_branch_ids(self, from_id: str | None = None) -> list[Any]:
        """Ids of :meth:`get_branch` without parsing any payload (but the lines of ids that are
        not strings: files no Pi wrote)."""
        with self._reading() as conn:
            seq = self._branch_seq() if from_id is None else self._seq_of_id(conn, from_id)
            return queries.ids_of(conn, self._spk, queries.path_rows(conn, self._spk, seq, "entry_id", "seq"))

    def get_children(self, parent_id: str) -> list[dict]:
        with self._reading() as conn:
            return [js_parse(line) for line in queries.child_lines(conn, self._spk, parent_id)]

    def get_label(self, entry_id: str) -> str | None:
        with self._reading() as conn:
            line = queries.last_label_line(conn, self._spk, entry_id)
        if line is None:
            return None
        label = prop(js_parse(line), "label")
        return label if isinstance(label, str) and label else None

    def get_session_name(self) -> str | None:
        """The latest ``session_info`` name in file order, trimmed (blank clears it)."""
        with self._reading() as conn:
            line = queries.last_line_of_type(conn, self._spk, "session_info")
        return trimmed_session_name(js_parse(line)) if line is not None else None

    def get_header(self) -> dict | None:
        if self._header_seq is None:
            return None
        with self._reading() as conn:
            return js_parse(queries.lines_at(conn, self._spk, [self._header_seq])[self._header_seq])

    def get_entries(self) -> list:
        """All entries in file order (everything Pi keeps after the header, duplicates included)."""
        with self._reading() as conn, gc_paused():
            return [js_parse(row.line) for row in conn.execute(
                select(entries_table.c.line)
                .where(entries_table.c.session_pk == self._spk, entries_table.c.kind.in_(("entry", "value")))
                .order_by(entries_table.c.seq)
            )]

    def get_tree(self) -> list[TreeNode]:
        return build_tree(self.get_entries())

    # ------------------------------------------------------------------ context (store.services)
    def context_path(self) -> list:
        """The entries of the leaf's path that its context depends on (see ``store.context_window``)."""
        with self._reading() as conn:
            return context_path(conn, self._spk, self._leaf_seq())

    def build_context_entries(self) -> list:
        """Pi's ``buildContextEntries``: the latest compaction, the kept entries, the rest."""
        with gc_paused():
            return services.build_context_entries(self.context_path())

    def build_session_projection(self) -> services.Projection:
        """The model's context with each message's source entry (context edits applied)."""
        with gc_paused():
            return services.build_session_projection(self.context_path())

    def build_session_context(self) -> services.SessionContext:
        """Messages, thinking level and model for the next request."""
        return self.build_session_projection().context()

    def prepare_compaction(self, settings: services.CompactionSettings | None = None
                           ) -> services.CompactionPreparation | None:
        """What a compaction at the leaf would summarise and keep (None: nothing to do)."""
        with gc_paused():
            return services.prepare_compaction(self.context_path(), settings)

    def compact(self, summarizer: services.Summarizer, settings: services.CompactionSettings | None = None,
                *, model_max_tokens: int | None = None, custom_instructions: str | None = None) -> str | None:
        """Prepare, summarise and append a compaction at the leaf (``fromHook: false``, as Pi's own
        compaction writes it); returns its id, or None when there is nothing to compact. A failed
        summary (``SummaryFailed``) stores nothing."""
        preparation = self.prepare_compaction(settings)
        if preparation is None:
            return None
        result = services.compact(preparation, summarizer, model_max_tokens=model_max_tokens,
                                  custom_instructions=custom_instructions)
        return self.append_compaction(result.summary, result.first_kept_entry_id, result.tokens_before,
                                      details=result.details, from_hook=False, usage=result.usage)

    def branch_with_generated_summary(self, target_id: str | None, summarizer: services.Summarizer,
                                      **options: Any) -> str | None:
        """Summarise the branch being left (old leaf back to the common ancestor with
        ``target_id``) and move there with :meth:`branch_with_summary` (``fromHook: false``, as Pi's
        ``navigateTree`` writes it); returns the summary's id.
        When that branch holds nothing (``target_id`` is the leaf or further along its path), the
        leaf just moves there and nothing is written (None), as Pi moves in its tree."""
        old_path, target_path = self.paths_to_summarize(target_id)
        if self.move_when_nothing_is_left(old_path, target_path, target_id):
            return None
        result = services.summarize_branch(old_path, target_path, summarizer, **options)
        return self.branch_with_summary(target_id, result.summary, details=result.details, from_hook=False,
                                        usage=result.usage)

    def move_when_nothing_is_left(self, old_path: list, target_path: list, target_id: str | None) -> bool:
        """Whether moving from ``old_path``'s end to ``target_id`` leaves no entry behind; if so,
        the leaf has moved (:meth:`branch_with_generated_summary`)."""
        if services.collect_entries_for_branch_summary(old_path, target_path)[0]:
            return False
        if target_id is None:
            self.reset_leaf()
        else:
            self.branch(target_id)
        return True

    def paths_to_summarize(self, target_id: str | None) -> tuple[list, list]:
        """The paths :meth:`branch_with_generated_summary` summarises: the current one and the
        target's (``EntryNotFound`` when ``target_id`` names no entry)."""
        old_path = self.get_branch()
        target_path = self.get_branch(target_id) if target_id is not None else []
        if target_id is not None and not target_path:
            raise EntryNotFound(f"Entry {target_id} not found")
        return old_path, target_path

    # ------------------------------------------------------------------ new sessions from this one
    def create_branched_session(self, leaf_id: str) -> str:
        """Make this manager a new session holding only root→``leaf_id`` (labels re-emitted at the
        end); returns the new session id. Its parent session is this one. Not inside
        :meth:`batch` (whose transaction writes this session: call it after the block)."""
        if self._batch is not None:
            raise RuntimeError("create_branched_session() inside batch(): the batch writes this session; "
                               "branch into a new one after the block")
        path = self.get_branch(leaf_id)
        if not path:
            raise EntryNotFound(f"Entry {leaf_id} not found")
        kept: list[dict] = []
        replaced_label: dict[str, str] = {}
        waiting_labels: list[str] = []
        parent_id = None
        for entry in path:
            if entry.get("type") == "label":
                waiting_labels.append(entry["id"])
                continue
            for label_id in waiting_labels:
                replaced_label[label_id] = entry["id"]
            waiting_labels.clear()
            copy = dict(entry)
            copy["parentId"] = parent_id
            if entry.get("type") == "compaction":
                first_kept = entry.get("firstKeptEntryId")
                copy["firstKeptEntryId"] = (
                    first_kept if first_kept == entry["id"] else replaced_label.get(first_kept, first_kept)
                )
            kept.append(copy)
            parent_id = entry["id"]
        labels, stamps = resolve_labels(self.get_entries())
        kept_ids = {entry["id"] for entry in kept}
        tail = kept[-1]["id"] if kept else None
        label_entries = []
        for key, text in labels.items():
            target = key[1] if key[0] == "string" else None
            if target not in kept_ids:
                continue
            label_id = new_entries.entry_id(self._store.new_uuid, kept_ids.__contains__)
            kept_ids.add(label_id)
            label_entries.append(new_entries.label(label_id, tail, stamps[key], target, text))
            tail = label_id
        ms = self._store.clock()
        timestamp, new_id = new_entries.now_iso(ms), self._store.new_session_id(ms)
        head = new_entries.header(new_id, timestamp, self.cwd, self.session_id if self._persist else None)
        manager = self._store.session_from_entries(head, kept + label_entries, persist=self._persist)
        self._become(manager)
        return new_id

    def _become(self, other: SessionManager) -> None:
        self.close()
        self._engine, self._spk = other._engine, other._spk
        self._persist, self._flushed = other._persist, other._flushed
        self._load_identity()


def _given(value: Any) -> Any:
    """None (the Python default) means "not given": Pi leaves such keys out."""
    return UNDEFINED if value is None else value


def _as_dict(message: Any) -> dict:
    if isinstance(message, dict):
        return message
    if hasattr(message, "model_dump"):
        return message.model_dump(mode="python", exclude_unset=True)
    raise InvalidEntry(f"a message must be a dict or a pydantic model, not {type(message).__name__}")


def _with_text(row: dict) -> tuple:
    """A row of a private (SQLite) database as ``entry_values`` gives it: the text and facts
    without what migration 0010 added (a text kept in ``line`` alone back in ``search_text``),
    and its path, so that the store decides for itself (PostgreSQL keeps every text in
    ``search_text``)."""
    at = None
    if '"textAt"' in row["facts"]:
        facts = orjson.loads(row["facts"])
        at = facts.pop("textAt", None)
        if at is not None:
            facts.pop("textChars", None)
            row["facts"] = orjson.dumps(facts).decode()
            if row["search_text"] == "":
                row["search_text"] = row["kept_text"]
    return (*(row[c] for c in ROW_COLUMNS), at)


def _finds_itself(leaf_id: Any) -> bool:
    """Whether an entry whose ``parentId`` is ``leaf_id``, written and read back, has the leaf as
    parent (the file is the truth: Pi's memory may link what its next open does not). A falsy id
    finds nothing (Pi: a new root); an object or array is a new value when read again; a number
    past a double is written as null."""
    if leaf_id.__class__ is str:
        return leaf_id != ""
    key = id_key(leaf_id)
    return key is not None and id_key(js_parse(js_stringify(leaf_id))) == key
