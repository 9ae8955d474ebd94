"""``SessionStore``: the database of many sessions, and the way to managers of single sessions.

It owns the engine; ``create``/``open``/``continue_recent``/``fork_from``/``in_memory`` hand out
:class:`~store.manager.SessionManager` objects; ``list``/``list_all``/``find_by_id`` answer from
the ``sessions`` table alone; ``import_jsonl``/``export_jsonl`` move single files in and out.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy import Engine, select

from store import new_entries
from store.db import queries
from store.db.engine import default_url, ensure_schema, make_engine, read_transaction, write_transaction
from store.db.schema import Base, entries, sessions
from store.db.writes import db_text, entry_values, insert_rows, insert_session
from store.errors import ImportFailed, SessionExists, SessionNotFound
from store.format import iter_lines, js_stringify
from store.format.jsdate import js_iso, parse_js_date
from store.format.jsvalue import UNDEFINED
from store.listing import ListingState
from store.loading import ENTRY, EXTRA_HEADER, HEADER, SKIPPED, VALUE, LineRow, LineWarning, load_lines, session_id_for
from store.manager import SessionManager
from store.tree_columns import derive_file


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What ``list`` shows of a session (Pi's ``SessionInfo``, without the all-text field)."""

    id: str
    cwd: str
    name: str | None
    parent_session: str | None
    created: str | None
    modified: str | None
    message_count: int
    first_message: str

    def to_json(self) -> dict:
        return {
            "id": self.id, "cwd": self.cwd, "name": self.name, "parentSession": self.parent_session,
            "created": self.created, "modified": self.modified, "messageCount": self.message_count,
            "firstMessage": self.first_message,
        }


@dataclass(slots=True)
class ImportReport:
    """What one import did."""

    path: str
    session_id: str
    imported: bool  # False: the same bytes were already stored
    lines: int = 0
    entries: int = 0
    bytes: int = 0
    sha256: str = ""
    pi_valid: bool = True
    migrated_from: str | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "path": self.path, "sessionId": self.session_id, "imported": self.imported, "lines": self.lines,
            "entries": self.entries, "bytes": self.bytes, "sha256": self.sha256, "piValid": self.pi_valid,
            "migratedFrom": self.migrated_from, "warnings": self.warnings,
        }


class _HashingReader:
    """A binary reader that hashes and counts what passes through it."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self.sha256 = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self.sha256.update(data)
        self.size += len(data)
        return data


class SessionStore:
    """Many sessions in one database (SQLite by default, PostgreSQL by URL)."""

    def __init__(self, engine: Engine, clock: Callable[[], float] | None = None) -> None:
        self.engine = engine
        self.clock: Callable[[], float] = clock or (lambda: time.time() * 1000)

    @classmethod
    def connect(cls, url: str | None = None, clock: Callable[[], float] | None = None) -> SessionStore:
        """Open (and on first use create or upgrade) the database at ``url`` (default: see
        :func:`store.db.engine.default_url`). ``clock`` returns ms since the epoch, for tests."""
        engine = make_engine(url or default_url())
        ensure_schema(engine)
        return cls(engine, clock)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ sessions
    def create(self, cwd: str, session_id: str | None = None, parent_session: str | None = None) -> SessionManager:
        """A new persistent session; nothing is stored until it holds a user or assistant message."""
        ms = self.clock()
        head = new_entries.header(
            session_id or new_entries.uuid7(ms), new_entries.now_iso(ms), new_entries.resolve_cwd(cwd), parent_session
        )
        return self.session_from_entries(head, [], persist=True)

    def in_memory(self, cwd: str = ".") -> SessionManager:
        """A session with the same tree model that is never stored."""
        ms = self.clock()
        head = new_entries.header(new_entries.uuid7(ms), new_entries.now_iso(ms), new_entries.resolve_cwd(cwd))
        return self.session_from_entries(head, [], persist=False)

    def open(self, session_id: str) -> SessionManager:
        """The stored session ``session_id``, its leaf restored from its last entry."""
        with read_transaction(self.engine) as conn:
            row = queries.session_by_id(conn, session_id)
        if row is None:
            raise SessionNotFound(f"no session {session_id!r} in the store")
        return SessionManager(self, self.engine, row.pk, persist=True, flushed=True)

    def continue_recent(self, cwd: str) -> SessionManager:
        """The most recently modified session of ``cwd``, or a new one."""
        with read_transaction(self.engine) as conn:
            session_id = conn.execute(
                select(sessions.c.session_id)
                .where(sessions.c.cwd == new_entries.resolve_cwd(cwd), sessions.c.pi_valid.is_(True))
                .order_by(sessions.c.modified_ms.desc().nulls_last(), sessions.c.pk.desc())
                .limit(1)
            ).scalar()
        return self.open(session_id) if session_id is not None else self.create(cwd)

    def fork_from(self, session_id: str, target_cwd: str) -> SessionManager:
        """A new session in ``target_cwd`` holding every entry of ``session_id`` (all branches),
        stored at once; its header names the source as parent session."""
        source = self.open(session_id)
        ms = self.clock()
        head = new_entries.header(
            new_entries.uuid7(ms), new_entries.now_iso(ms), new_entries.resolve_cwd(target_cwd), session_id
        )
        manager = self.session_from_entries(head, source.get_entries(), persist=True, force_write=True)
        source.close()
        return manager

    def find_by_id(self, session_id: str) -> SessionInfo | None:
        with read_transaction(self.engine) as conn:
            row = conn.execute(select(sessions).where(sessions.c.session_id == session_id)).first()
        return _info(row) if row is not None else None

    def list(self, cwd: str) -> list[SessionInfo]:
        """Sessions of one working directory, most recently modified first."""
        return self._list(new_entries.resolve_cwd(cwd))

    def list_all(self) -> list[SessionInfo]:
        """All sessions, most recently modified first."""
        return self._list(None)

    def _list(self, cwd: str | None) -> list[SessionInfo]:
        stmt = select(sessions).order_by(sessions.c.modified_ms.desc().nulls_last(), sessions.c.pk.desc())
        if cwd is not None:
            stmt = stmt.where(sessions.c.cwd == cwd)
        with read_transaction(self.engine) as conn:
            return [_info(row) for row in conn.execute(stmt)]

    def session_from_entries(self, head: dict, body: Iterable[Any], *, persist: bool,
                             force_write: bool = False) -> SessionManager:
        """A manager for a session made of ``head`` and ``body`` (parsed entries): stored now when
        it is persistent and holds a conversation (or ``force_write``), else kept private."""
        values = [head, *body]
        rows = [LineRow(seq, HEADER if seq == 0 else (ENTRY if isinstance(v, dict) else VALUE), v,
                        js_stringify(v), None, "\n") for seq, v in enumerate(values)]
        has_conversation = any(
            isinstance(v, dict) and v.get("type") == "message"
            and isinstance(v.get("message"), dict) and v["message"].get("role") in ("user", "assistant")
            for v in body
        )
        stored = persist and (has_conversation or force_write)
        engine = self.engine if stored else _private_engine()
        with write_transaction(engine) as conn:
            if queries.session_by_id(conn, head["id"]) is not None:
                raise SessionExists(f"session {head['id']} already exists in the store")
            spk = _store_rows(conn, head["id"], head, rows, pi_valid=True, mtime_ms=None)
        return SessionManager(self, engine, spk, persist=persist, flushed=stored)

    # ------------------------------------------------------------------ interchange
    def import_jsonl(self, path: str | os.PathLike) -> str:
        """Store one session file (any Pi version, any oddity) and return its session id."""
        return self.import_file(path).session_id

    def import_file(self, path: str | os.PathLike) -> ImportReport:
        """Store one session file; re-importing the same bytes changes nothing."""
        path = Path(path)
        try:
            with path.open("rb") as stream:
                reader = _HashingReader(stream)
                loaded = load_lines(iter_lines(reader))
                stat = os.fstat(stream.fileno())
        except OSError as exc:
            raise ImportFailed(f"{path}: cannot read: {exc.strerror or exc}") from exc
        sha = reader.sha256.hexdigest()
        session_id = session_id_for(loaded, path.name, sha)
        report = ImportReport(
            str(path), session_id, imported=True, lines=len(loaded.rows),
            entries=sum(row.kind in (ENTRY, VALUE) for row in loaded.rows), bytes=reader.size, sha256=sha,
            pi_valid=loaded.pi_valid, migrated_from=loaded.migrated_from,
        )
        warnings = list(loaded.warnings)
        if loaded.invalid_reason:
            warnings.insert(0, LineWarning(1, loaded.invalid_reason))
        with write_transaction(self.engine) as conn:
            existing = queries.session_by_id(conn, session_id)
            if existing is not None:
                if existing.source_sha256 == sha:
                    report.imported = False
                    return report
                raise SessionExists(
                    f"{path}: session {session_id} is already stored with different content "
                    f"(stored sha256 {existing.source_sha256 or 'none: written through the API'}, file {sha})"
                )
            spk = _store_rows(
                conn, session_id, loaded.header, loaded.rows, pi_valid=loaded.pi_valid,
                mtime_ms=stat.st_mtime * 1000, warnings=warnings,
            )
            conn.execute(sessions.update().where(sessions.c.pk == spk).values(
                source_path=str(path.resolve()), source_sha256=sha, source_bytes=reader.size,
                source_mtime_ms=int(stat.st_mtime * 1000), migrated_from=loaded.migrated_from,
            ))
        report.warnings = [w.render(str(path)) for w in warnings]
        return report

    def export_jsonl(self, session_id: str, path: str | os.PathLike, as_migrated: bool = False) -> int:
        """Write a session as JSONL: the imported bytes exactly (or, with ``as_migrated`` and a file
        that needed migration, the v3 file Pi rewrites on open); returns the bytes written."""
        written = 0
        with Path(path).open("wb") as out:
            for chunk in self.iter_export(session_id, as_migrated):
                out.write(chunk)
                written += len(chunk)
        return written

    def iter_export(self, session_id: str, as_migrated: bool = False) -> Iterator[bytes]:
        """The bytes of :meth:`export_jsonl`, in chunks of whole lines."""
        with read_transaction(self.engine) as conn:
            row = queries.session_by_id(conn, session_id)
            if row is None:
                raise SessionNotFound(f"no session {session_id!r} in the store")
            stmt = (select(entries.c.kind, entries.c.line, entries.c.raw, entries.c.eol)
                    .where(entries.c.session_pk == row.pk).order_by(entries.c.seq))
            as_migrated = as_migrated and row.migrated_from is not None
            buffer: list[bytes] = []
            size = 0
            for kind, line, raw, eol in conn.execute(stmt).yield_per(2000):
                if as_migrated:
                    if kind == SKIPPED:
                        continue
                    data = line.encode("utf-8", "surrogatepass") + b"\n"
                else:
                    data = (raw if raw is not None else line.encode("utf-8")) + eol.encode("ascii")
                buffer.append(data)
                size += len(data)
                if size >= 1 << 20:
                    yield b"".join(buffer)
                    buffer, size = [], 0
            if buffer:
                yield b"".join(buffer)


def _private_engine() -> Engine:
    engine = make_engine("sqlite://")
    Base.metadata.create_all(engine)
    return engine


def _store_rows(conn, session_id: str, head: dict | None, rows: list[LineRow], *, pi_valid: bool,
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


def _info(row: Any) -> SessionInfo:
    modified = js_iso(row.modified_ms) if row.modified_ms is not None else None
    return SessionInfo(
        id=row.session_id, cwd=row.cwd, name=row.name, parent_session=row.parent_session,
        created=js_iso(row.created_ms) if row.created_ms is not None else None, modified=modified,
        message_count=row.message_count, first_message=row.first_message or "(no messages)",
    )
