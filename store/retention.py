"""Deleting sessions and tree-aware retention (``pi-store delete`` / ``pi-store prune``).

**Delete** removes whole sessions in one transaction: their ``entries`` rows (the SQLite
full-text index loses them through the ``entries_fts_delete`` trigger of migration 0003; the
PostgreSQL GIN index follows the table), their ``sessions`` row and, by cascade, their
``imports`` records. Everything else — usage totals, listing columns, the views — is computed
from those rows, so nothing else needs writing. Unknown ids abort the whole call (nothing is
deleted) unless ``ignore_missing``.

**Claims.** Both are writers without a claim (``store.ownership``): a session that a writer
holds a live claim on is not theirs to change. ``delete`` naming one raises ``SessionClaimed``
and deletes nothing; ``prune`` keeps it whole and lists it (``PruneReport.claimed``). ``force``
overrides both (a host that died without releasing a claim with no expiry); the claim's holder
then finds its session changed or gone at its next write, as after any other writer's change.

**Prune** trims old abandoned branches. Sessions modified at or after the cutoff D, and the
latest N sessions of each working directory, are kept whole. In the others it keeps

* every row that is not an entry (header, second headers, non-object values, skipped lines);
* the path from the root to the leaf (the last entry in file order: what Pi opens);
* for each target whose latest label entry sets a label, the target and the label entry; a latest
  label entry that clears when an older one of its target is kept for another reason (else the
  older label would be the target's again);
* the latest ``session_info`` entry (it names the session in Pi's list, from any branch);
* every entry whose timestamp is at or after D, or cannot be read as a date;
* every row whose entry id occurs more than once (Pi's ``byId`` picks the last: dropping one of
  them could move a lookup to another row);

each with its path to the root, and drops the rest. The kept set is closed under the parent
link, so every kept row keeps its parent, depth and latest compaction / thinking / model source
(they all lie on its path). The kept rows are then renumbered ``0..n-1`` in file order (``seq`` is
the line of the export) and their tree columns re-derived (``tree_columns.StoredTree``): only
``run_start`` can change, where removing rows makes a child follow its parent directly.
A pruned session imported from a file no longer holds the file's history: ``diverged_seq``
becomes the first removed row (if it was not set before, or was later); ``row_version`` grows so
that open managers notice. With ``delete_sessions`` the sessions that would be trimmed are
deleted whole instead. The whole prune is one transaction; on SQLite the file is then compacted
(``VACUUM``, after a WAL checkpoint), unless another connection is reading it
(:func:`compact_sqlite`).
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine, bindparam, case, select, text

from store.analysis import activity_days, pairs
from store.db import current_path, session_times
from store.db.engine import is_sqlite, read_transaction, write_transaction
from store.db.faults import fault_reason
from store.db.schema import entries, sessions
from store.db.schema import session_ids as directory
from store.db.stored_text import db_text
from store.db.writes import dbapi_sql
from store.errors import SessionClaimed, SessionNotFound, StoreError
from store.format import js_parse
from store.format.jsdate import parse_js_date
from store.format.jsvalue import prop, truthy
from store.loading import ENTRY, VALUE
from store.ownership import live_claim
from store.tree_columns import NONE, TREE, IdKey, StoredTree, id_key, setting_flags

_IN_LIST = 500
READER_WAIT_MS = 2_000  # how long compaction waits for another connection's reads to finish
_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", re.IGNORECASE)


class BadPolicy(StoreError, ValueError):
    """A retention policy that cannot be applied (a duration that is not one)."""


def parse_duration(value: str) -> int:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (or a sum: ``1d12h``) in milliseconds."""
    total, at = 0.0, 0
    for match in _DURATION.finditer(value):
        if match.start() != at:
            break
        total += float(match.group(1)) * _UNITS_MS[match.group(2).lower()]
        at = match.end()
    if at == 0 or at != len(value) or not math.isfinite(total):
        raise BadPolicy(f"not a duration: {value!r} (write e.g. 30d, 12h, 90m, 1d12h)")
    return int(total)


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What ``prune`` keeps: history newer than ``older_than_ms`` before now, the latest
    ``keep_latest`` sessions of each cwd whole; ``delete_sessions``: delete the other sessions
    whole instead of trimming their old branches."""

    older_than_ms: int
    keep_latest: int = 0
    delete_sessions: bool = False

    def __post_init__(self) -> None:
        if self.older_than_ms < 0 or self.keep_latest < 0:
            raise BadPolicy("older_than_ms and keep_latest must not be negative")

    def to_json(self) -> dict:
        return {"olderThanMs": self.older_than_ms, "keepLatest": self.keep_latest,
                "deleteSessions": self.delete_sessions}


@dataclass(slots=True)
class Removed:
    """Rows removed (or that would be), and the bytes of their ``line`` and ``raw`` columns."""

    rows: int = 0
    line_bytes: int = 0
    raw_bytes: int = 0

    @property
    def bytes(self) -> int:
        return self.line_bytes + self.raw_bytes

    def add(self, other: Removed) -> None:
        self.rows += other.rows
        self.line_bytes += other.line_bytes
        self.raw_bytes += other.raw_bytes

    def to_json(self) -> dict:
        return {"rows": self.rows, "lineBytes": self.line_bytes, "rawBytes": self.raw_bytes, "bytes": self.bytes}


@dataclass(slots=True)
class DeleteReport:
    """What ``delete`` removed (``dry_run``: would remove); ``missing``: ids not stored (only
    with ``ignore_missing``: otherwise the call raises and deletes nothing)."""

    session_ids: list[str]
    missing: list[str]
    removed: Removed
    dry_run: bool

    @property
    def sessions(self) -> int:
        return len(self.session_ids)

    def to_json(self) -> dict:
        return {"dryRun": self.dry_run, "sessions": self.sessions, "sessionIds": self.session_ids,
                "missing": self.missing, **self.removed.to_json()}


@dataclass(slots=True)
class SessionPrune:
    """One trimmed session: rows before, what goes, and the first row that goes (in the old
    numbering; ``diverged``: the session came from a file and now differs from it)."""

    session_id: str
    rows_before: int
    removed: Removed
    first_removed_seq: int
    diverged: bool

    def to_json(self) -> dict:
        return {"sessionId": self.session_id, "rowsBefore": self.rows_before, "rowsKept":
                self.rows_before - self.removed.rows, "firstRemovedSeq": self.first_removed_seq,
                "diverged": self.diverged, **self.removed.to_json()}


@dataclass(slots=True)
class Vacuum:
    """The SQLite file before and after compaction (bytes: main file plus WAL); ``skipped``: why
    it was not compacted (another connection was reading it)."""

    bytes_before: int
    bytes_after: int
    seconds: float
    skipped: str | None = None

    def to_json(self) -> dict:
        doc = {"bytesBefore": self.bytes_before, "bytesAfter": self.bytes_after, "seconds": round(self.seconds, 3)}
        if self.skipped is not None:
            doc["skipped"] = self.skipped
        return doc


@dataclass(slots=True)
class PruneReport:
    """What ``prune`` did (``applied``) or would do; ``to_json`` is what ``pi-store prune --json`` prints."""

    applied: bool
    policy: RetentionPolicy
    cutoff_ms: int
    sessions_seen: int = 0
    kept_whole: int = 0
    trimmed: list[SessionPrune] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    claimed: list[str] = field(default_factory=list)  # kept whole: a writer holds a live claim on them
    deleted_removed: Removed = field(default_factory=Removed)
    vacuum: Vacuum | None = None

    @property
    def removed(self) -> Removed:
        """Everything removed: trimmed rows and deleted sessions' rows."""
        total = Removed()
        for item in self.trimmed:
            total.add(item.removed)
        total.add(self.deleted_removed)
        return total

    def to_json(self) -> dict:
        return {
            "applied": self.applied, "policy": self.policy.to_json(), "cutoffMs": self.cutoff_ms,
            "sessionsSeen": self.sessions_seen, "keptWhole": self.kept_whole,
            "trimmed": [item.to_json() for item in self.trimmed],
            "deleted": {"sessionIds": self.deleted, **self.deleted_removed.to_json()},
            "claimed": self.claimed,
            "total": self.removed.to_json(),
            "vacuum": self.vacuum.to_json() if self.vacuum else None,
        }


# ------------------------------------------------------------------------------------- delete
def delete_sessions(engine: Engine, session_ids: str | Iterable[str], *, now_ms: float, dry_run: bool = False,
                    ignore_missing: bool = False, force: bool = False) -> DeleteReport:
    """Delete sessions (one id or many) in one transaction; see the module docstring."""
    wanted = list(dict.fromkeys([session_ids] if isinstance(session_ids, str) else session_ids))
    transaction = read_transaction if dry_run else write_transaction
    with transaction(engine) as conn:
        found = _session_pks(conn, wanted, lock=not dry_run)
        missing = [session_id for session_id in wanted if session_id not in found]
        if missing and not ignore_missing:
            raise SessionNotFound(f"no session {', '.join(repr(m) for m in missing)} in the store: nothing deleted"
                                  + (" (--ignore-missing deletes the others)" if len(missing) < len(wanted) else ""))
        claimed = {} if force else _live_claims(conn, found, now_ms)
        if claimed:
            raise SessionClaimed("; ".join(f"session {session_id} is {claim}" for session_id, claim in claimed.items())
                                 + ": nothing deleted (--force deletes sessions that writers hold)")
        pks = list(found.values())
        removed = _measure(conn, "session_pk", pks)
        if not dry_run:
            _remove_sessions(conn, found)
    return DeleteReport([s for s in wanted if s in found], missing, removed, dry_run)


def _session_pks(conn: Connection, session_ids: list[str], *, lock: bool) -> dict[str, int]:
    """The keys of the sessions named (those stored); ``lock``: their rows locked (PostgreSQL;
    SQLite's ``BEGIN IMMEDIATE`` already holds the write lock)."""
    stmt = select(sessions.c.session_id, sessions.c.pk).where(
        sessions.c.session_id.in_(bindparam("ids", expanding=True)))
    given = {db_text(session_id): session_id for session_id in session_ids}  # ids are stored in this form
    found: dict[str, int] = {}
    for chunk in _chunks(list(given)):
        found.update((given[session_id], pk) for session_id, pk in conn.execute(stmt, {"ids": chunk}))
    if lock and not is_sqlite(conn):
        held = _lock_sessions(conn, list(found.values()))
        found = {session_id: pk for session_id, pk in found.items() if pk in held}  # (deleted meanwhile)
    return found


def _live_claims(conn: Connection, found: dict[str, int], now_ms: float) -> dict[str, str]:
    """The sessions among ``found`` (id -> key) that a writer holds a live claim on, described
    (read after their rows are locked: a claim cannot be taken meanwhile)."""
    s = sessions.c
    stmt = select(s.pk, s.claim_owner, s.claim_token, s.claim_expires_ms).where(
        s.pk.in_(bindparam("pks", expanding=True)), s.claim_owner.is_not(None))
    held: dict[int, str] = {}
    for chunk in _chunks(list(found.values())):
        for row in conn.execute(stmt, {"pks": chunk}):
            if (claim := live_claim(row.claim_owner, row.claim_token, row.claim_expires_ms, now_ms)) is not None:
                held[row.pk] = claim
    return {session_id: held[pk] for session_id, pk in found.items() if pk in held}


def _lock_sessions(conn: Connection, pks: list[int]) -> set[int]:
    """PostgreSQL: lock these session rows in key order (``delete`` and ``prune`` alike, so that
    they cannot deadlock); the keys of the rows that still exist."""
    lock = select(sessions.c.pk).where(sessions.c.pk.in_(bindparam("pks", expanding=True))) \
        .order_by(sessions.c.pk).with_for_update()
    held: set[int] = set()
    for chunk in _chunks(sorted(pks)):
        held.update(conn.execute(lock, {"pks": chunk}).scalars())
    return held


def _measure(conn: Connection, column: str, keys: Sequence[int], session_pk: int | None = None) -> Removed:
    """Rows and ``line`` / ``raw`` bytes of the entries whose ``column`` is among ``keys`` (of the
    session ``session_pk`` only, when given)."""
    line_bytes = "length(CAST(line AS BLOB))" if is_sqlite(conn) else "octet_length(line)"
    where = "" if session_pk is None else " AND session_pk = :spk"
    stmt = text(f"SELECT count(*), coalesce(sum({line_bytes}), 0), coalesce(sum(length(raw)), 0) "
                f"FROM entries WHERE {column} IN :keys{where}").bindparams(bindparam("keys", expanding=True))
    total = Removed()
    for chunk in _chunks(keys):
        rows, line, raw = conn.execute(stmt, {"keys": chunk, "spk": session_pk}).one()
        total.add(Removed(rows, int(line), int(raw)))
    return total


def _remove_sessions(conn: Connection, found: dict[str, int]) -> None:
    """Delete the sessions (session id -> key) and everything of theirs."""
    for chunk in _chunks([db_text(session_id) for session_id in found]):  # as stored (a caller's id may not be)
        # by id, not by the cascade from sessions: on Citus that foreign key cannot exist (the
        # directory is distributed on the id, docs/design.md "Distributing on Citus")
        conn.execute(directory.delete().where(directory.c.session_id.in_(chunk)))
    for chunk in _chunks(list(found.values())):
        # entries first and explicitly (not by cascade), so the SQLite full-text trigger sees each row
        conn.execute(entries.delete().where(entries.c.session_pk.in_(chunk)))
        conn.execute(sessions.delete().where(sessions.c.pk.in_(chunk)))  # imports: ON DELETE CASCADE


# -------------------------------------------------------------------------------------- prune
@dataclass(slots=True)
class _Plan:
    """The rows of one session to drop (entry keys, ascending seq) and what renumbering changes."""

    session_pk: int
    session_id: str
    rows_before: int
    drop_pks: list[int]
    first_removed_seq: int
    imported: bool


def prune(engine: Engine, policy: RetentionPolicy, *, now_ms: float, apply: bool = False,
          vacuum: bool = True, force: bool = False) -> PruneReport:
    """Apply ``policy`` (``apply``) or report what it would remove; see the module docstring.
    Sessions a writer holds a live claim on are kept whole and listed (``claimed``) unless ``force``."""
    cutoff = int(now_ms) - policy.older_than_ms
    report = PruneReport(applied=apply, policy=policy, cutoff_ms=cutoff)
    transaction = write_transaction if apply else read_transaction
    with transaction(engine) as conn:
        candidates = _candidates(conn, policy, cutoff, report)
        if not force:
            candidates = _unclaimed(candidates, now_ms, report)
        if apply and not is_sqlite(conn) and candidates:  # SQLite: BEGIN IMMEDIATE holds the write lock
            candidates = _locked_candidates(conn, policy, cutoff, candidates, report)
            if not force:  # (a claim taken between the first look and the lock)
                candidates = _unclaimed(candidates, now_ms, report)
        if policy.delete_sessions:
            found = {row.session_id: row.pk for row in candidates}
            report.deleted = list(found)
            report.deleted_removed = _measure(conn, "session_pk", list(found.values()))
            if apply:
                _remove_sessions(conn, found)
            candidates = []
        for row in candidates:
            plan = _plan_session(conn, row, cutoff)
            if plan is None:
                continue
            removed = _measure(conn, "pk", plan.drop_pks, plan.session_pk)
            report.trimmed.append(SessionPrune(plan.session_id, plan.rows_before, removed, plan.first_removed_seq,
                                               plan.imported))
            if apply:
                _apply(conn, plan, row)
    if apply and vacuum and is_sqlite(engine) and (report.trimmed or report.deleted):
        report.vacuum = compact_sqlite(engine)
    return report


def _locked_candidates(conn: Connection, policy: RetentionPolicy, cutoff: int, candidates: list,
                       report: PruneReport) -> list:
    """PostgreSQL: lock the rows of the sessions to trim — those alone, so that writers of the
    sessions kept whole (claimed ones included) never wait, and in key order, as ``delete``
    locks, so that the two cannot deadlock — then choose again (``report`` counts that look, and
    keeps the claimed sessions the first look left out): a session written to meanwhile may be
    recent now; one that became a candidate meanwhile is not locked, and kept whole."""
    locked = _lock_sessions(conn, [row.pk for row in candidates])
    report.sessions_seen = report.kept_whole = 0
    again = _candidates(conn, policy, cutoff, report)
    report.kept_whole += sum(row.pk not in locked for row in again)
    return [row for row in again if row.pk in locked]


def _unclaimed(candidates: list, now_ms: float, report: PruneReport) -> list:
    """The candidates no writer holds a live claim on; the others are kept whole and listed."""
    out = []
    for row in candidates:
        if live_claim(row.claim_owner, row.claim_token, row.claim_expires_ms, now_ms) is None:
            out.append(row)
        else:
            report.claimed.append(row.session_id)
            report.kept_whole += 1
    return out


def _candidates(conn: Connection, policy: RetentionPolicy, cutoff: int, report: PruneReport) -> list:
    """Sessions not kept whole: modified before the cutoff and not among the latest of their cwd."""
    s = sessions.c
    stmt = (select(s.pk, s.session_id, s.cwd, s.modified_ms, s.pi_valid, s.leaf_seq, s.last_seq, s.source_sha256,
                   s.diverged_seq, s.source_mtime_ms, s.claim_owner, s.claim_token, s.claim_expires_ms)
            .order_by(s.cwd, s.modified_ms.desc().nulls_last(), s.pk.desc()))
    rank: dict[str, int] = {}
    out = []
    for row in conn.execute(stmt):
        report.sessions_seen += 1
        rank[row.cwd] = position = rank.get(row.cwd, -1) + 1
        if position < policy.keep_latest or row.modified_ms is None or row.modified_ms >= cutoff:
            report.kept_whole += 1
        elif policy.delete_sessions or row.pi_valid:  # a file Pi would not open has no tree to trim
            out.append(row)
    return out


def _plan_session(conn: Connection, session, cutoff: int) -> _Plan | None:
    """Decide which rows of one session to keep (module docstring); None when all stay."""
    c = entries.c
    rows = conn.execute(
        select(c.pk, c.seq, c.kind, c.entry_id, c.parent_seq, c.type, c.target_id, c.timestamp,
               # the label decides whether a label entry sets or clears (Pi: ``if (entry.label)``); an
               # id or target that is not a string (files no Pi wrote) is read from the line too
               case((c.type == "label", c.line), (c.entry_id.is_(None), c.line)).label("line"))
        .where(c.session_pk == session.pk).order_by(c.seq)
    ).all()
    if [row.seq for row in rows] != list(range(len(rows))):
        raise StoreError(f"session {session.session_id}: its rows are not numbered 0..{len(rows) - 1}; "
                         "run verify before pruning")
    parent = [NONE if row.parent_seq is None else row.parent_seq for row in rows]
    keep = bytearray(len(rows))

    def keep_path(seq: int) -> None:
        while seq != NONE and not keep[seq]:
            keep[seq] = 1
            seq = parent[seq]

    by_id: dict[IdKey, list[int]] = {}
    labels_of: dict[IdKey, list[int]] = {}  # a target's label entries, in file order
    latest_info = NONE
    for row in rows:
        if row.kind != ENTRY:
            keep[row.seq] = 1
            continue
        # a line is parsed only for an id or label target that is not a string (no Pi writes those)
        value = js_parse(row.line) if row.entry_id is None or (row.type == "label" and row.target_id is None) else None
        entry_id = row.entry_id if row.entry_id is not None else id_key(prop(value, "id"))
        if entry_id is not None:
            by_id.setdefault(entry_id, []).append(row.seq)
        target_id = row.target_id if row.target_id is not None else id_key(prop(value, "targetId"))
        if row.type == "label" and target_id is not None:
            labels_of.setdefault(target_id, []).append(row.seq)
        elif row.type == "session_info":
            latest_info = row.seq
        stamp = parse_js_date(row.timestamp) if row.timestamp is not None else None
        if stamp is None or stamp >= cutoff:
            keep_path(row.seq)
    for seq in (NONE if session.leaf_seq is None else session.leaf_seq, latest_info):
        keep_path(seq)
    for seqs in by_id.values():
        if len(seqs) > 1:
            for seq in seqs:
                keep_path(seq)
    for target_id, seqs in labels_of.items():
        if truthy(prop(js_parse(rows[seqs[-1]].line), "label")):
            keep_path(seqs[-1])
            for target in by_id.get(target_id, ()):
                keep_path(target)
    # a latest label entry that clears, dropped while an older one of its target stays (on the path,
    # recent, ...), would bring that label back: kept then, until no such pair is left (its path can
    # keep older label entries of other targets)
    cleared = [seqs for seqs in labels_of.values() if len(seqs) > 1]
    while unsettled := [seqs for seqs in cleared if not keep[seqs[-1]] and any(keep[seq] for seq in seqs[:-1])]:
        for seqs in unsettled:
            keep_path(seqs[-1])
    drop = [row for row in rows if not keep[row.seq]]
    if not drop:
        return None
    return _Plan(session.pk, session.session_id, len(rows), [row.pk for row in drop], drop[0].seq,
                 session.source_sha256 is not None)


_RENUMBER = """UPDATE entries SET seq = ?, parent_seq = ?, depth = ?, run_start = ?, compaction_seq = ?,
thinking_seq = ?, model_seq = ? WHERE session_pk = ? AND pk = ?"""
_DELETE_ROW = "DELETE FROM entries WHERE session_pk = ? AND pk = ?"


def _apply(conn: Connection, plan: _Plan, session) -> None:
    """Drop the planned rows, renumber the rest and re-derive their tree and listing columns."""
    cursor = conn.connection.dbapi_connection.cursor()
    cursor.executemany(dbapi_sql(conn.dialect, _DELETE_ROW), [(plan.session_pk, pk) for pk in plan.drop_pks])
    c = entries.c
    kept = conn.execute(
        select(c.pk, c.seq, c.kind, c.type, c.role, c.parent_seq, c.depth, c.run_start, c.compaction_seq,
               c.thinking_seq, c.model_seq)
        .where(c.session_pk == plan.session_pk).order_by(c.seq)
    ).all()
    new_seq = {row.seq: position for position, row in enumerate(kept)}

    def mapped(seq: int | None) -> int:
        return NONE if seq is None else new_seq[seq]  # KeyError: a kept row pointing at a dropped one

    tree = StoredTree(
        (TREE | setting_flags(row.type, row.role) if row.kind in (ENTRY, VALUE) else 0,
         mapped(row.parent_seq), -1 if row.depth is None else row.depth, mapped(row.run_start),
         mapped(row.compaction_seq), mapped(row.thinking_seq), mapped(row.model_seq))
        for row in kept
    )
    tree.relink({})  # re-derives every column from the (mapped) parents; runs may now merge
    updates = []
    for position, row in enumerate(kept):
        if row.kind not in (ENTRY, VALUE):
            columns = (None,) * 6
        else:
            cols = tree.columns(position)
            columns = (cols.parent_seq, cols.depth, cols.run_start, cols.compaction_seq, cols.thinking_seq,
                       cols.model_seq)
        if position != row.seq or columns != tuple(row[5:11]):
            updates.append((position, *columns, plan.session_pk, row.pk))
    if updates:  # ascending: each row moves to a number that no kept row holds any more
        cursor.executemany(dbapi_sql(conn.dialect, _RENUMBER), updates)
    pairs.rebuild_session(conn, plan.session_pk)  # a call's result may be gone, or renumbered
    activity_days.rebuild_session(conn, plan.session_pk)  # rows may be gone, and their calls' results
    _refresh_session(conn, plan, session, kept, new_seq)
    current_path.refresh_on(conn, plan.session_pk)  # renumbered rows, runs that may have merged


def _refresh_session(conn: Connection, plan: _Plan, session, kept: list, new_seq: dict[int, int]) -> None:
    """The listing columns of the session row, recomputed from the kept rows (Pi's list rules)."""
    stored = session_times.read_listing(conn, plan.session_pk)
    listing = stored.listing
    entry_count = sum(row.kind in (ENTRY, VALUE) for row in kept)
    leaf_seq = None if session.leaf_seq is None else new_seq[session.leaf_seq]
    diverged = session.diverged_seq
    if plan.imported and (diverged is None or plan.first_removed_seq < diverged):
        diverged = plan.first_removed_seq
    conn.execute(sessions.update().where(sessions.c.pk == plan.session_pk).values(
        entry_count=entry_count, message_count=listing.message_count,
        first_message=db_text(listing.first_message) if listing.first_message else None,
        name=None if listing.name is None else db_text(listing.name),
        **stored.times(session.source_mtime_ms),
        header_seq=stored.header_seq, last_seq=len(kept) - 1, leaf_seq=leaf_seq,
        has_conversation=stored.conversation, pi_listable=listing.pi_listable and listing.header is not None,
        diverged_seq=diverged, row_version=sessions.c.row_version + 1,
    ))


# ------------------------------------------------------------------------------------- vacuum
def compact_sqlite(engine: Engine, *, reader_wait_ms: int = READER_WAIT_MS) -> Vacuum:
    """Give the pages freed by deletes back to the file system: checkpoint the WAL into the
    database and truncate it, ``VACUUM`` (rewrites the file without free pages), truncate again.

    While another connection reads (a viewer, a long query), the WAL cannot be truncated and a
    ``VACUUM`` would only copy the whole database into the WAL — a bigger file, and two waits of
    the full lock timeout for checkpoints that cannot finish. So the first checkpoint waits at
    most ``reader_wait_ms`` for readers to finish; if one still reads, nothing is compacted and
    ``skipped`` says why (the deleted rows are gone either way; their pages are reused)."""
    path = engine.url.database
    started = time.perf_counter()
    before = _file_bytes(path)
    pooled = engine.raw_connection()
    try:
        driver = pooled.dbapi_connection  # autocommit (isolation_level None): VACUUM needs no transaction
        (timeout_ms,) = driver.execute("PRAGMA busy_timeout").fetchone()
        driver.execute(f"PRAGMA busy_timeout = {int(reader_wait_ms)}")
        try:
            (busy, _, _) = driver.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            driver.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")
        if busy:
            return Vacuum(before, _file_bytes(path), time.perf_counter() - started,
                          skipped="another connection was reading the database; compact it later: "
                                  'sqlite3 "$(pi-store path)" VACUUM')
        try:
            driver.execute("VACUUM")
            driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:  # a full disk (VACUUM needs room for a copy): the prune stays done
            return Vacuum(before, _file_bytes(path), time.perf_counter() - started,
                          skipped=f"VACUUM failed: {fault_reason(exc) or exc}; the removed rows are gone all the same")
    finally:
        pooled.close()
    return Vacuum(before, _file_bytes(path), time.perf_counter() - started)


def _file_bytes(path: str | None) -> int:
    if not path or path == ":memory:":
        return 0
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def _chunks(items: Sequence) -> Iterable[list]:
    for start in range(0, len(items), _IN_LIST):
        yield list(items[start:start + _IN_LIST])
