"""Importing session files: read each the way Pi reads it, keep every byte, store it in one
transaction, streaming (memory stays flat whatever the file's size).

What an import does with a file depends on what the store already holds for it (decided under
the store's write lock, so concurrent imports of one file agree):

* a new session: every line is stored (``imported``);
* the same bytes as stored: nothing (``unchanged``); so is a file that is the beginning of the
  stored bytes (an older copy);
* the stored bytes followed by more (Pi appended lines): only the lines after the stored ones are
  read and stored (``appended``), correcting what they change in earlier rows (a duplicate id
  supersedes an earlier entry and takes over its children); when the stored file ended in an
  unfinished line, or Pi had to migrate it, the session is stored again from the whole file
  instead (``rebuilt``) — nothing stored is lost either way, it is all in the file;
* anything else — a file rewritten (Pi's migration rewrites old files), truncated or edited — is a
  conflict: :class:`ImportConflict`, nothing changes.

Who owns a session's history (docs/design.md): the file it was imported from, until the store
writes to it (``sessions.diverged_seq``, the first row the store wrote). From then on a file that
changed is a conflict too — its new lines are never appended after the store's rows — and an
unchanged file is ``unchanged`` with a note that the store holds more. ``prefer`` resolves every
conflict explicitly: ``"file"`` stores the file's content instead of the stored one (``replaced``;
``replace=True`` says the same), ``"store"`` keeps the stored history and leaves the file alone
(``kept-store``): never a silent merge. A session a writer holds a live claim on
(``store.ownership``) is not changed by an import either: what would append, rebuild or
replace it is a conflict that no ``prefer`` overrides (``"store"`` keeps it, as always).
Every import that changes a stored session's rows counts one more ``sessions.row_version``, so
that managers open on it notice.

A file Pi would not open as a session — empty, binary, other JSON: its first JSON line is not a
header ``{"type": "session", "id": <string>}`` — is ``not-session``: nothing is stored, unless
``keep_non_sessions=True`` keeps its bytes as a session of its own (that Pi does not list).

``strict=True`` refuses (:class:`StrictRefusal`) a file with any oddity and stores nothing of it.
A crash mid-file leaves nothing of that file (one transaction); importing it again starts over.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from sqlalchemy import Connection, Row, delete, select, text, update
from sqlalchemy.exc import DBAPIError

from store.bulk import SessionWriter, advance_session, create_session, finish_session
from store.db import queries
from store.db.engine import is_sqlite, write_transaction
from store.db.schema import activity_days, entries, imports, sessions
from store.db.stored_text import db_text
from store.errors import FileChanged, ImportFailed, SessionExists
from store.format.lines import RawLine
from store.gc_pause import gc_paused
from store.interchange.exporting import session_sha256
from store.interchange.reading import (
    WORKER_MIN_BYTES,
    FileRows,
    Job,
    Progress,
    RowReading,
    Window,
    read_in_worker,
    sha256_of,
)
from store.loading import fallback_session_id, head_of, plan_v1_migration
from store.ownership import live_claim

if TYPE_CHECKING:
    from store.session_store import SessionStore

IMPORTED, APPENDED, REBUILT, REPLACED, UNCHANGED = "imported", "appended", "rebuilt", "replaced", "unchanged"
CONFLICT, REFUSED, FAILED, BUSY = "conflict", "refused", "failed", "busy"
NOT_SESSION, KEPT_STORE = "not-session", "kept-store"
PREFER = ("file", "store")  # who wins a conflict, when asked
LOCK_WAIT_SECONDS = 300.0  # PostgreSQL: longest wait for another import of the same session
_LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for lock_timeout


class ImportConflict(SessionExists):
    """The file holds a session the store has, with content that neither equals nor extends
    what is stored, or a writer holds a live claim on it (``claimed``: the import may pass once
    the claim ends); nothing was changed."""

    def __init__(self, message: str, session_id: str, *, claimed: bool = False) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.claimed = claimed


@dataclass(slots=True)
class ImportReport:
    """What one import did (``status``: one of the module's status words)."""

    path: str
    session_id: str | None
    status: str
    lines: int = 0  # rows stored by this import
    entries: int = 0  # of which entries
    bytes: int = 0  # bytes of the file read into the store (all of a new file; the new ones of an append)
    size: int = 0  # of the file as imported
    sha256: str = ""
    pi_valid: bool = True
    migrated_from: str | None = None
    revision: int = 0
    warnings: list[str] = field(default_factory=list)
    warning_count: int = 0
    error: str | None = None
    note: str | None = None  # why nothing was stored though nothing failed (not-session, kept-store, diverged)
    retry: bool = False  # failed for a fault of the database or the file system: trying again may succeed

    @property
    def imported(self) -> bool:
        """Whether this import stored anything."""
        return self.status in (IMPORTED, APPENDED, REBUILT, REPLACED)

    def to_json(self) -> dict:
        doc = {
            "path": self.path, "sessionId": self.session_id, "status": self.status, "imported": self.imported,
            "lines": self.lines, "entries": self.entries, "bytes": self.bytes, "size": self.size,
            "sha256": self.sha256, "piValid": self.pi_valid, "migratedFrom": self.migrated_from,
            "revision": self.revision, "warningCount": self.warning_count, "warnings": self.warnings,
        }
        if self.error is not None:
            doc["error"] = self.error
        if self.note is not None:
            doc["note"] = self.note
        if self.retry:
            doc["retry"] = True
        return doc


# a file whose status (inode change time) is older than this when it is read cannot change later
# without its stat changing too: a write in the same clock tick as the read is long past
STABLE_NS = 2_000_000_000


def file_stat(info: os.stat_result) -> str:
    """What ``imports.source_stat`` records of a file: device, inode, size, modification and
    status change times (ns). Any write, truncation, rename over it or ``touch`` changes it."""
    return f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}"


@dataclass(frozen=True, slots=True)
class KnownFile:
    """A file the store holds whole, as it was when it was last read (:func:`known_files`)."""

    session_id: str
    size: int
    sha256: str
    revision: int
    pi_valid: bool
    migrated_from: str | None
    note: str | None  # the session's history parts from the file's (as _compare says)

    def report(self, path: str) -> ImportReport:
        return ImportReport(path, self.session_id, UNCHANGED, size=self.size, sha256=self.sha256,
                            pi_valid=self.pi_valid, migrated_from=self.migrated_from, revision=self.revision,
                            note=self.note)


KNOWN_BATCH = 500  # paths asked for in one query


def known_files(conn: Connection, paths: Collection[str]) -> dict[tuple[str, str], KnownFile]:
    """``(path, stat)`` of the recorded files among ``paths`` (real paths, as imports record them)
    whose stored bytes are still all their session holds from files (its last import, or an older
    one of the same bytes), for a quick check: a file found with that stat now is ``unchanged``
    without being read. One query per ``KNOWN_BATCH`` paths, on the primary key's second column."""
    wanted = sorted({db_text(path) for path in paths})
    query = (select(imports.c.source_path, imports.c.source_stat, imports.c.source_bytes, imports.c.source_sha256,
                    imports.c.revision, sessions.c.session_id, sessions.c.pi_valid, sessions.c.migrated_from,
                    sessions.c.diverged_seq, sessions.c.last_seq)
             .join(sessions, sessions.c.pk == imports.c.session_pk)
             .where(imports.c.source_stat.is_not(None), imports.c.source_sha256 == sessions.c.source_sha256,
                    imports.c.source_bytes == sessions.c.source_bytes, sessions.c.pi_valid))
    return {(row.source_path, row.source_stat): KnownFile(
        row.session_id, row.source_bytes, row.source_sha256, row.revision, row.pi_valid, row.migrated_from,
        None if row.diverged_seq is None else f"{_diverged_reason(row)}; the file has not changed since")
        for start in range(0, len(wanted), KNOWN_BATCH)
        for row in conn.execute(query.where(imports.c.source_path.in_(wanted[start:start + KNOWN_BATCH])))}


def _lines(stream: BinaryIO, end: int) -> Iterator[RawLine]:
    return Window(stream, 0, end).lines()


@dataclass(slots=True)
class _Plan:
    """What to do with a file (see the module docstring)."""

    status: str
    session: Row | None = None
    hasher: Any = None  # sha256 of the bytes before ``start``
    start: int = 0
    reason: str = ""  # of a conflict
    note: str | None = None  # for the report
    claimed: bool = False  # a conflict with a writer's live claim (no ``prefer`` settles it)


def import_file(store: SessionStore, path: str | os.PathLike, *, strict: bool = False, replace: bool = False,
                prefer: str | None = None, keep_non_sessions: bool = False, progress: Progress | None = None,
                parallel: bool = True, known: Mapping[tuple[str, str], KnownFile] | None = None) -> ImportReport:
    """Store one session file (see the module docstring); raises ``ImportFailed`` (unreadable),
    ``StrictRefusal`` or :class:`ImportConflict`, and then stores nothing. ``prefer`` (``"file"``
    or ``"store"``) settles a conflict instead; ``replace=True`` is ``prefer="file"``. ``parallel``:
    a big new file may be read by a worker process (``store.interchange.reading``). ``known``
    (:func:`known_files`): a file found there with the stat it had when it was read is
    ``unchanged`` as it stands there, not read again (the quick check)."""
    if prefer is not None and prefer not in PREFER:
        raise ValueError(f"prefer must be one of {PREFER}, not {prefer!r}")
    prefer = "file" if replace else prefer
    path = Path(path)
    source = db_text(os.path.realpath(path))  # a name that is not UTF-8 holds surrogates (os.fsdecode)
    try:  # without blocking: a FIFO would wait for a writer (regular files ignore the flag)
        stream = os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)),
                           "rb")
    except OSError as exc:
        raise ImportFailed(f"{path}: cannot read: {exc.strerror or exc}") from exc
    with stream:
        info = os.fstat(stream.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ImportFailed(f"{path}: not a regular file")
        if known is not None and (hit := known.get((source, file_stat(info)))) is not None:
            return hit.report(str(path))
        # recorded for the next quick check only if no write can have gone unseen by the read
        still = file_stat(info) if time.time_ns() - info.st_ctime_ns > STABLE_NS else None
        size = info.st_size  # bytes appended while this runs are left for the next import
        head = head_of(_lines(stream, size))
        if head.header is None and not keep_non_sessions:
            stream.seek(0)
            reason = head.not_session_reason(size, stream.read(3) == b"\xef\xbb\xbf")
            return ImportReport(str(path), None, NOT_SESSION, size=size, pi_valid=False,
                                note=f"{path}: not a Pi session: {reason}; nothing was stored "
                                     "(--keep-non-sessions stores it anyway)")
        session_id = db_text(head.header["id"] if head.header is not None else fallback_session_id(
            _lines(stream, size), path.name, lambda: sha256_of(stream, size).hexdigest()))
        plan = plan_v1_migration(_lines(stream, size)) if head.needs_plan else None
        with write_transaction(store.engine) as conn:
            _lock(conn, path, session_id)
            decided = _decide(conn, stream, size, source, session_id, prefer, head.header, store.clock())
            report = ImportReport(str(path), session_id, decided.status, size=size, note=decided.note)
            if head.header is None and report.note is None:
                report.note = f"{path}: not a Pi session (Pi neither opens nor lists it); stored as asked"
            if decided.status == CONFLICT:
                raise ImportConflict(f"{path}: session {session_id}: {decided.reason}; nothing was changed " + (
                    "(import it again once the claim is released or expired)" if decided.claimed else
                    "(--prefer file stores the file instead, --prefer store keeps the stored history)"), session_id,
                    claimed=decided.claimed)
            session = decided.session
            if decided.status in (UNCHANGED, KEPT_STORE):
                assert session is not None
                report.pi_valid, report.migrated_from = session.pi_valid, session.migrated_from
                if decided.status == UNCHANGED:
                    report.sha256 = decided.hasher.hexdigest()  # type: ignore[attr-defined]
                    report.revision = _record(conn, source, session.pk, size, report.sha256, info.st_mtime, still)
                return report
            append = decided.status == APPENDED
            if session is None:
                spk = create_session(conn, session_id)
            else:
                spk = session.pk
                if not append:  # stored again from the whole file, under the same key
                    conn.execute(delete(entries).where(entries.c.session_pk == spk))
                    conn.execute(delete(activity_days).where(activity_days.c.session_pk == spk))  # the rows' totals
            job = Job(stream, decided.start, size, spk, str(path), strict, plan,
                      first_seq=session.last_seq + 1 if append and session is not None else 0, in_body=append,
                      derive_tree=append or (head.header is not None and (plan is None or plan.error is None)))
            read = _store_rows(conn, job, decided.hasher if append else None, progress,
                               parallel and not append and size - decided.start >= WORKER_MIN_BYTES)
            _check_unchanged(stream, path, info, read.sha256)
            origin = {"source_path": source, "source_sha256": read.sha256, "source_bytes": size,
                      "source_mtime_ms": int(info.st_mtime * 1000)}
            if append:
                advance_session(conn, spk, read.summary)
                conn.execute(update(sessions).where(sessions.c.pk == spk).values(**origin))
            else:
                finish_session(conn, spk, read.header, read.summary, pi_valid=read.pi_valid,
                               mtime_ms=info.st_mtime * 1000, migrated_from=read.migrated_from, **origin)
            report.sha256, report.bytes = read.sha256, size - decided.start
            report.lines, report.entries = read.summary.rows, read.summary.entries
            report.pi_valid, report.migrated_from = read.pi_valid, read.migrated_from
            report.revision = _record(conn, source, spk, size, read.sha256, info.st_mtime, still)
    report.warnings, report.warning_count = read.warnings.rendered(), read.warnings.count
    return report


def _check_unchanged(stream: BinaryIO, path: Path, info: os.stat_result, sha256: str) -> None:
    """Raise ``FileChanged`` when the first ``info.st_size`` bytes of the file are no longer those
    that were read (hashed to ``sha256``): it was truncated or rewritten while it was read, and
    what was read may be parts of two files. Looked at again only when the file's size or time
    moved: bytes Pi appends meanwhile are left for the next import."""
    now = os.fstat(stream.fileno())
    if (now.st_size, now.st_mtime_ns) == (info.st_size, info.st_mtime_ns):
        return
    if now.st_size < info.st_size or sha256_of(stream, info.st_size).hexdigest() != sha256:
        raise FileChanged(f"{path}: the file was rewritten or truncated while it was read; nothing of it was "
                          "stored (import it again)")


def _store_rows(conn: Connection, job: Job, hasher: Any, progress: Progress | None, in_worker: bool) -> FileRows:
    """Read ``job`` and insert its rows as they come; then settle the tree (see ``SessionWriter``).
    The cyclic GC rests meanwhile (a worker inherits that): parsed lines hold no cycles, and its
    passes over every chunk of rows in flight cost more than they find."""
    with gc_paused():
        return _stream_rows(conn, job, hasher, progress, in_worker)


def _stream_rows(conn: Connection, job: Job, hasher: Any, progress: Progress | None, in_worker: bool) -> FileRows:
    with SessionWriter(conn, job.session_pk, first_seq=job.first_seq) as writer:
        if in_worker:
            read = None
            for item in read_in_worker(job, progress):
                if isinstance(item, FileRows):
                    read = item
                else:
                    writer.insert(item)
            assert read is not None
        else:
            reading = RowReading(job, hasher, progress, writer.look_up_stored if job.first_seq else None,
                                 writer.stored)
            for values in reading.chunks():
                writer.insert(values)
            read = reading.result
            assert read is not None
        for warning in writer.finish(read.summary):
            read.warnings(warning)
    return read


def _lock(conn: Connection, path: Path, session_id: str) -> None:
    """Serialise imports of one session id (SQLite: the write transaction already holds the
    database's write lock; PostgreSQL: a transaction-scoped advisory lock on the id, waited for
    ``LOCK_WAIT_SECONDS`` at most)."""
    if is_sqlite(conn):
        return
    key = int.from_bytes(hashlib.sha256(f"pi-store import {session_id}".encode()).digest()[:8], "big", signed=True)
    # and no JIT in this transaction: the import's statements read one session, but on the
    # statistics of a store being filled their estimates can pass the JIT threshold
    before = conn.execute(text("SELECT current_setting('lock_timeout'), set_config('lock_timeout', :wait, true), "
                               "set_config('jit', 'off', true)"),
                          {"wait": f"{round(LOCK_WAIT_SECONDS * 1000)}ms"}).scalar_one()
    try:
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) != _LOCK_NOT_AVAILABLE:
            raise
        raise ImportFailed(
            f"{path}: session {session_id}: another import of this session has held its lock for more than "
            f"{LOCK_WAIT_SECONDS:g} s; nothing was stored (is a process stuck? PostgreSQL's pg_stat_activity "
            "shows the connection holding the lock, pg_locks the advisory lock)") from exc
    conn.execute(text("SELECT set_config('lock_timeout', :before, true)"), {"before": before})


def _diverged_reason(session: Row) -> str:
    """How the store's history of a session parts from the file's (``diverged_seq`` is set)."""
    after = session.last_seq - session.diverged_seq + 1
    return (f"the store changed this session after the file's line {session.diverged_seq} (API appends, a "
            f"compaction or a prune; {after} row{'s' * (after != 1)} after that line now): the store owns its "
            "history now")


def _decide(conn: Connection, stream: BinaryIO, size: int, source: str, session_id: str, prefer: str | None,
            header: dict | None, now_ms: float) -> _Plan:
    # locked as an API writer locks it, before anything is read or written: a writer's batch then
    # commits first (and this import sees its rows) or waits for the import (and is told the
    # session changed); and the locks are taken in the writers' order (no deadlock)
    session = queries.session_by_id(conn, session_id, lock=True)
    if session is None:
        return _Plan(IMPORTED)
    plan = _compare(conn, stream, size, source, session, header)
    if plan.status == CONFLICT and prefer is not None:
        plan = _Plan(REPLACED, session) if prefer == "file" else _Plan(
            KEPT_STORE, session, note=f"kept the stored history of session {session_id}, the file is left as it "
                                      f"is: {plan.reason}")
    if plan.status in (APPENDED, REBUILT, REPLACED):  # a write: not while another writer holds a claim
        claim = live_claim(session.claim_owner, session.claim_token, session.claim_expires_ms, now_ms)
        if claim is not None and prefer == "store":
            return _Plan(KEPT_STORE, session, note=f"kept the stored history of session {session_id}, the file "
                                                   f"is left as it is: the session is {claim}")
        if claim is not None:
            return _Plan(CONFLICT, session, reason=f"it is {claim}, and while the claim lasts only its holder "
                                                   "writes to it", claimed=True)
    return plan


def _compare(conn: Connection, stream: BinaryIO, size: int, source: str, session: Row, header: dict | None) -> _Plan:
    """How the file relates to the stored session (UNCHANGED, APPENDED, REBUILT or CONFLICT)."""
    diverged = session.diverged_seq is not None
    note = f"{_diverged_reason(session)}; the file has not changed since" if diverged else None
    if session.source_sha256 is None:
        return _Plan(CONFLICT, session, reason="a session with this id was created through the store's API")
    record = conn.execute(select(imports).where(imports.c.session_pk == session.pk,
                                                imports.c.source_path == source)).first()
    # what this very path gave last time, if that is still what the session holds (another file may
    # have replaced it since: the records of other paths are not cleared)
    if record is not None and record.source_bytes == size and record.source_sha256 == session.source_sha256:
        hasher = sha256_of(stream, size)
        if hasher.hexdigest() == record.source_sha256:
            return _Plan(UNCHANGED, session, hasher, note=note)
    stored_bytes = session.source_bytes or 0
    if size >= stored_bytes:
        hasher = sha256_of(stream, stored_bytes)
        if hasher.hexdigest() == session.source_sha256:
            if size == stored_bytes:
                return _Plan(UNCHANGED, session, hasher, note=note)
            if diverged:  # never append the file's new lines after the store's rows
                return _Plan(CONFLICT, session, reason=f"{_diverged_reason(session)}, and the file has "
                             f"{size - stored_bytes} more bytes since it was imported")
            if _can_append(conn, session):
                return _Plan(APPENDED, session, hasher, start=stored_bytes)
            return _Plan(REBUILT, session)
        reason = (f"its first {stored_bytes} bytes differ from the {stored_bytes} bytes stored (sha256 "
                  f"{session.source_sha256[:12]}…): the file was rewritten or edited, not appended to")
        if session.source_path is not None and session.source_path != source:
            reason = (f"the session was stored from another file, {session.source_path}, and this one does not "
                      f"continue it: its first {stored_bytes} bytes differ from the ones stored (sha256 "
                      f"{session.source_sha256[:12]}…)")
        if session.migrated_from is not None and header is not None and header.get("version") == 3:
            reason += f" (Pi migrates a v{session.migrated_from} file to v3 and rewrites it when it opens it)"
    else:
        hasher = sha256_of(stream, size)
        if hasher.digest() == session_sha256(conn, session.pk, limit=size)[0].digest():
            return _Plan(UNCHANGED, session, hasher, note=note)  # an older copy: the store holds all of it and more
        reason = (f"the file has {size} bytes, fewer than the {stored_bytes} stored, and is not their beginning: "
                  "it was truncated or rewritten")
    if diverged:
        reason = f"{reason}; also, {_diverged_reason(session)}"
    return _Plan(CONFLICT, session, reason=reason)


def _can_append(conn: Connection, session: Row) -> bool:
    """Lines after the stored ones can be added as they are: the stored file is a session Pi
    opens without migrating it, and its last line was complete."""
    if not session.pi_valid or session.header_seq is None or session.migrated_from is not None:
        return False
    eol = conn.execute(select(entries.c.eol).where(entries.c.session_pk == session.pk,
                                                   entries.c.seq == session.last_seq)).scalar()
    return bool(eol)


def _record(conn: Connection, source: str, session_pk: int, size: int, sha256: str, mtime: float,
            seen_stat: str | None) -> int:
    """Remember which bytes of ``source`` are stored in the session, and the file's stat when
    they were read (None: it had changed too recently to be trusted); returns the revision of
    the path's record for that session."""
    now = int(time.time() * 1000)
    key = (imports.c.session_pk == session_pk, imports.c.source_path == source)
    row = conn.execute(select(imports.c.revision, imports.c.source_sha256, imports.c.source_stat).where(*key)).first()
    values = {"source_bytes": size, "source_sha256": sha256, "source_mtime_ms": int(mtime * 1000),
              "source_stat": seen_stat, "imported_ms": now}
    if row is None:
        conn.execute(imports.insert().values(session_pk=session_pk, source_path=source, revision=1, **values))
        return 1
    if row.source_sha256 == sha256:  # the same bytes: at most a new stat
        if row.source_stat != seen_stat:
            conn.execute(update(imports).where(*key).values(source_stat=seen_stat,
                                                            source_mtime_ms=int(mtime * 1000)))
        return row.revision
    conn.execute(update(imports).where(*key).values(revision=row.revision + 1, **values))
    return row.revision + 1

