"""``SessionStore``: the database of many sessions, and the way to managers of single sessions.

It owns the engine; ``create``/``open``/``continue_recent``/``fork_from``/``in_memory`` hand out
:class:`~store.manager.SessionManager` objects; ``list``/``list_all``/``find_by_id`` answer from
the ``sessions`` table alone; ``import_jsonl``/``export_jsonl`` move single files in and out.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from store import new_entries
from store.analysis.listing import ListFilter, Usage, list_rows, session_usage
from store.db import queries
from store.db.engine import (
    close_engine,
    default_url,
    make_engine,
    read_transaction,
    resolve_url,
    write_transaction,
)
from store.db.schema import entries, sessions
from store.db.stored_text import db_text, may_be_escaped
from store.format import js_parse
from store.format.jsdate import js_iso
from store.listing import ListingState

if TYPE_CHECKING:  # the rest is imported where it is used: ``pi-store list`` loads none of it
    from sqlalchemy import Engine

    from store.analysis.search import SearchHit
    from store.analysis.stats import SessionStats
    from store.interchange.importing import ImportReport
    from store.manager import SessionManager
    from store.ownership import Claim
    from store.retention import DeleteReport, PruneReport, RetentionPolicy


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What ``list`` shows of a session (Pi's ``SessionInfo``, without the all-text field, plus
    the usage totals of ``/session``). ``cursor`` continues a listing after this session."""

    id: str
    cwd: str
    name: str | None
    parent_session: str | None
    created: str | None
    modified: str | None
    message_count: int
    first_message: str
    tokens: int = 0
    cost: float = 0.0
    cursor: str = field(default="", compare=False, repr=False)

    def to_json(self) -> dict:
        return {
            "id": self.id, "cwd": self.cwd, "name": self.name, "parentSession": self.parent_session,
            "created": self.created, "modified": self.modified, "messageCount": self.message_count,
            "firstMessage": self.first_message, "tokens": self.tokens, "cost": self.cost,
        }


class SessionStore:
    """Many sessions in one database (SQLite by default, PostgreSQL by URL)."""

    def __init__(self, engine: Engine, clock: Callable[[], float] | None = None,
                 ids: new_entries.IdSource | None = None) -> None:
        self.engine = engine
        self.clock: Callable[[], float] = clock or (lambda: time.time() * 1000)
        self.ids = ids

    @classmethod
    def connect(cls, url: str | None = None, clock: Callable[[], float] | None = None,
                ids: new_entries.IdSource | None = None) -> SessionStore:
        """Open (and on first use create or upgrade) the database at ``url``, a URL or a SQLite
        file path (default: see :func:`store.db.engine.default_url`). ``clock`` returns ms since
        the epoch and ``ids`` the new ids (see :data:`store.new_entries.IdSource`); both default to
        the real ones and exist so that a run can be repeated exactly (tests, the differential
        against Pi)."""
        from store.db.engine import ensure_schema

        engine = make_engine(resolve_url(url) if url else default_url(make_folder=True))
        ensure_schema(engine)
        return cls(engine, clock, ids)

    def new_uuid(self) -> str:
        """The next random UUID of the id source (entry ids are its first 8 characters)."""
        return self.ids("uuid") if self.ids is not None else new_entries.random_uuid()

    def new_session_id(self, ms: float) -> str:
        """The next session id of the id source (default: a UUIDv7 of ``ms``)."""
        return self.ids("session") if self.ids is not None else new_entries.uuid7(ms)

    def close(self) -> None:
        """Close the database connections; the store (and its managers) cannot be used after."""
        close_engine(self.engine)

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ sessions
    def create(self, cwd: str, session_id: str | None = None, parent_session: str | None = None) -> SessionManager:
        """A new persistent session; nothing is stored until it holds a user or assistant message."""
        ms = self.clock()
        head = new_entries.header(
            self._chosen_or_new_id(session_id, ms), new_entries.now_iso(ms), new_entries.resolve_cwd(cwd),
            parent_session,
        )
        return self.session_from_entries(head, [], persist=True)

    def in_memory(self, cwd: str = ".", session_id: str | None = None) -> SessionManager:
        """A session with the same tree model that is never stored."""
        ms = self.clock()
        head = new_entries.header(
            self._chosen_or_new_id(session_id, ms), new_entries.now_iso(ms), new_entries.resolve_cwd(cwd)
        )
        return self.session_from_entries(head, [], persist=False)

    def _chosen_or_new_id(self, session_id: str | None, ms: float) -> str:
        if session_id is None:
            return self.new_session_id(ms)
        new_entries.check_session_id(session_id)
        return session_id

    def open(self, session_id: str) -> SessionManager:
        """The stored session ``session_id``, its leaf restored from its last entry."""
        with read_transaction(self.engine) as conn:
            return self._open_on(conn, session_id)

    def _open_on(self, conn: Connection, session_id: str) -> SessionManager:
        """:meth:`open` in the read transaction of ``conn`` (one snapshot: the row, then its leaf)."""
        from store.manager import SessionManager

        row = queries.stored_session(conn, session_id)
        return SessionManager(self, self.engine, row.pk, persist=True, flushed=True, read=(conn, row))

    def continue_recent(self, cwd: str) -> SessionManager:
        """The most recently modified session of ``cwd``, or a new one."""
        with read_transaction(self.engine) as conn:
            session_id = conn.execute(
                select(sessions.c.session_id)
                .where(sessions.c.cwd == db_text(new_entries.resolve_cwd(cwd)), sessions.c.pi_valid.is_(True))
                .order_by(sessions.c.modified_ms.desc().nulls_last(), sessions.c.pk.desc())
                .limit(1)
            ).scalar()
            if session_id is not None:
                return self._open_on(conn, session_id)
        return self.create(cwd)

    def fork_from(self, session_id: str, target_cwd: str, new_session_id: str | None = None) -> SessionManager:
        """A new session (id ``new_session_id`` or a fresh one) in ``target_cwd`` holding every entry
        of ``session_id`` (all branches), stored at once; its header names the source as parent."""
        source = self.open(session_id)
        ms = self.clock()
        head = new_entries.header(
            self._chosen_or_new_id(new_session_id, ms), new_entries.now_iso(ms),
            new_entries.resolve_cwd(target_cwd), session_id,
        )
        manager = self.session_from_entries(head, source.get_entries(), persist=True, force_write=True)
        source.close()
        return manager

    def find_by_id(self, session_id: str) -> SessionInfo | None:
        with read_transaction(self.engine) as conn:
            row = queries.session_by_id(conn, session_id)
            if row is None:
                return None
            usage = session_usage(conn, [row.pk]).get(row.pk)
            return _info(row, usage, exact=_as_written(conn, row))

    def list(self, cwd: str, **options: Any) -> list[SessionInfo]:
        """Sessions of one working directory, most recently modified first (``options``: see
        :meth:`list_all`)."""
        return self._list(new_entries.resolve_cwd(cwd), **options)

    def list_all(self, *, sort: str = "modified", reverse: bool = False, limit: int | None = None,
                 cursor: str | None = None, name: str | None = None, model: str | None = None,
                 since_ms: int | None = None, until_ms: int | None = None) -> list[SessionInfo]:
        """All sessions, most recently modified first, read from the ``sessions`` table alone.

        ``sort``: ``modified`` / ``created`` (newest first), ``name`` (A→Z), ``cost`` (highest
        first); ``reverse`` flips it; sessions without the sort value come last. ``limit`` /
        ``cursor``: a page, and where to continue (the last item's ``cursor``). Filters: ``name``
        (substring, case-insensitive), ``model`` (``model`` or ``provider/model`` billed in the
        session), ``since_ms`` / ``until_ms`` (modified time, ms since the epoch).
        """
        return self._list(None, sort=sort, reverse=reverse, limit=limit, cursor=cursor, name=name, model=model,
                          since_ms=since_ms, until_ms=until_ms)

    def _list(self, cwd: str | None, *, sort: str = "modified", reverse: bool = False, limit: int | None = None,
              cursor: str | None = None, name: str | None = None, model: str | None = None,
              since_ms: int | None = None, until_ms: int | None = None) -> list[SessionInfo]:
        where = ListFilter(cwd=cwd, name=name, model=model, since_ms=since_ms, until_ms=until_ms)
        with read_transaction(self.engine) as conn:
            rows = list_rows(conn, where, sort=sort, reverse=reverse, limit=limit, cursor=cursor)
            usage = session_usage(conn, [row.pk for row, _ in rows])
            return [_info(row, usage.get(row.pk), position, exact=_as_written(conn, row))
                    for row, position in rows]

    def search(self, query: str, **options: Any) -> list[SearchHit]:
        """Full-text search over stored history (``store.analysis.search.search``)."""
        from store.analysis.search import search

        return search(self.engine, query, **options)

    def stats(self, session_id: str | None = None) -> SessionStats:
        """Token and cost totals like Pi's ``/session`` (all sessions when ``session_id`` is None)."""
        from store.analysis.stats import session_stats

        return session_stats(self.engine, session_id)

    def session_from_entries(self, head: dict, body: Iterable[Any], *, persist: bool,
                             force_write: bool = False) -> SessionManager:
        """A manager for a session made of ``head`` and ``body`` (parsed entries): stored now when
        it is persistent and holds a conversation (or ``force_write``), else kept private."""
        from store.bulk import store_session_rows
        from store.errors import SessionExists
        from store.format.jsjson import js_stringify
        from store.loading import ENTRY, HEADER, VALUE, LineRow
        from store.manager import SessionManager

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
            spk = store_session_rows(conn, head["id"], head, rows, pi_valid=True, mtime_ms=None)
        return SessionManager(self, engine, spk, persist=persist, flushed=stored)

    # ------------------------------------------------------------------ claims (store.ownership)
    def claim(self, session_id: str, owner: str, ttl_ms: int | None = 60_000, *, force: bool = False) -> Claim:
        """Claim a session for ``owner`` with a new fencing token (see ``SessionManager.claim``,
        which also makes that manager write under it)."""
        from store.ownership import take_claim

        with write_transaction(self.engine) as conn:
            return take_claim(conn, session_id, owner, ttl_ms=ttl_ms, now_ms=self.clock(), force=force)

    def release_claim(self, session_id: str, *, owner: str | None = None, token: int | None = None) -> bool:
        """End a session's claim (only if ``owner`` / ``token`` match, when given); returns whether
        one ended. The token stays: the old holder cannot write again."""
        from store.ownership import release_claim

        with write_transaction(self.engine) as conn:
            return release_claim(conn, session_id, owner=owner, token=token)

    def claims(self) -> list[Claim]:
        """Every session's current claim, live or expired (``Claim.live``)."""
        from store.ownership import list_claims

        with read_transaction(self.engine) as conn:
            return list_claims(conn)

    # ------------------------------------------------------------------ interchange
    def import_jsonl(self, path: str | os.PathLike, *, keep_non_sessions: bool = False) -> str:
        """Store one session file (any Pi version, any oddity) and return its session id; a file
        that is not a Pi session raises ``ImportFailed`` unless ``keep_non_sessions``."""
        from store.errors import ImportFailed
        from store.interchange.importing import import_file

        report = import_file(self, path, keep_non_sessions=keep_non_sessions)
        if report.session_id is None:
            raise ImportFailed(report.note or f"{path}: not stored")
        return report.session_id

    def import_file(self, path: str | os.PathLike, *, prefer: str | None = None,
                    keep_non_sessions: bool = False) -> ImportReport:
        """Store one session file; re-importing the same bytes changes nothing. A file that is
        not a Pi session is reported (``not-session``) and stored only with ``keep_non_sessions``;
        ``prefer`` ("file" or "store") settles a conflict (``store.interchange.importing``)."""
        from store.interchange.importing import import_file

        return import_file(self, path, prefer=prefer, keep_non_sessions=keep_non_sessions)

    def import_path(self, *paths: str | os.PathLike, strict: bool = False, replace: bool = False,
                    prefer: str | None = None, keep_non_sessions: bool = False,
                    checksum: bool = False) -> list[ImportReport]:
        """Store session files, or every ``*.jsonl`` below folders (Pi's layout): one report per
        file, failures (conflicts, strict refusals) and files that are not sessions included, none
        for a file found in a folder and deleted before it was read (``store.interchange.syncing``).
        A file whose stat is the one recorded when it was read is ``unchanged`` without being read
        again; ``checksum=True`` reads every file."""
        from store.interchange.syncing import import_paths

        return list(import_paths(self, paths, strict=strict, replace=replace, prefer=prefer,
                                 keep_non_sessions=keep_non_sessions, checksum=checksum))

    def export_jsonl(self, session_id: str, path: str | os.PathLike, as_migrated: bool = False,
                     force: bool = False) -> int:
        """Write a session as JSONL (see ``store.interchange.exporting.export_jsonl``): a file at
        ``path`` that holds more than the session is refused (``ExportRefused``) unless ``force``."""
        from store.interchange.exporting import export_jsonl

        return export_jsonl(self, session_id, path, as_migrated, force)

    def iter_export(self, session_id: str, as_migrated: bool = False) -> Iterator[bytes]:
        """The bytes of :meth:`export_jsonl`, in chunks of whole lines."""
        from store.interchange.exporting import iter_export

        return iter_export(self, session_id, as_migrated)

    # ------------------------------------------------------------------ retention
    def delete(self, session_ids: str | Iterable[str], *, dry_run: bool = False,
               ignore_missing: bool = False, force: bool = False) -> DeleteReport:
        """Delete one session or several in one transaction (``store.retention``). An unknown id
        raises ``SessionNotFound`` naming every unknown id and deletes nothing, unless
        ``ignore_missing`` (then the report lists them); a session a writer holds a live claim on
        raises ``SessionClaimed`` and deletes nothing, unless ``force``."""
        from store.retention import delete_sessions

        return delete_sessions(self.engine, session_ids, now_ms=self.clock(), dry_run=dry_run,
                               ignore_missing=ignore_missing, force=force)

    def prune(self, policy: RetentionPolicy, apply: bool = False, *, vacuum: bool = True,
              force: bool = False) -> PruneReport:
        """Trim old abandoned branches (or, with ``policy.delete_sessions``, old sessions) by
        ``policy``; a dry run unless ``apply``. Sessions a writer holds a live claim on are kept
        whole and listed in the report, unless ``force``. SQLite files are compacted after an
        applied prune unless ``vacuum`` is False (``store.retention``)."""
        from store.retention import prune

        return prune(self.engine, policy, now_ms=self.clock(), apply=apply, vacuum=vacuum, force=force)


def _private_engine() -> Engine:
    from store.db.schema import metadata

    engine = make_engine("sqlite://")
    metadata.create_all(engine)
    return engine


def _as_written(conn: Connection, row: Any) -> dict[str, Any]:
    """The listing's text columns that may hold ``db_text``'s escape of a lone surrogate or NUL
    (rare: only then is anything read), as the session's lines have them: id, cwd and parent
    session from the header, name and first message by Pi's listing rule over its entries."""
    exact: dict[str, Any] = dict(queries.header_as_written(conn, row))
    if may_be_escaped(row.name or "") or may_be_escaped(row.first_message or ""):
        listing = ListingState()
        for (line,) in conn.execute(select(entries.c.line).where(
                entries.c.session_pk == row.pk, entries.c.kind == "entry",
                entries.c.type.in_(("message", "session_info"))).order_by(entries.c.seq)):
            listing.add(js_parse(line))
        exact.update(name=listing.name, first_message=listing.first_message)
    return exact


def _info(row: Any, usage: Usage | None = None, cursor: str = "", exact: dict[str, Any] | None = None) -> SessionInfo:
    modified = js_iso(row.modified_ms) if row.modified_ms is not None else None
    text = {column: getattr(row, column) for column in ("session_id", "cwd", "parent_session", "name", "first_message")}
    text.update(exact or {})
    return SessionInfo(
        id=text["session_id"], cwd=text["cwd"], name=text["name"], parent_session=text["parent_session"],
        created=js_iso(row.created_ms) if row.created_ms is not None else None, modified=modified,
        message_count=row.message_count, first_message=text["first_message"] or "(no messages)",
        tokens=usage.tokens if usage else 0, cost=usage.cost if usage else 0.0, cursor=cursor,
    )
