"""``verify``: a health report of stored sessions, and of the database holding them.

Each session gets one verdict:

* **identical** — imported from a file and never written to by the store: export hashes (sha256
  and size) to the imported file's bytes;
* **diverged** — imported from a file, then written to by the store (``sessions.diverged_seq``:
  its first row the store wrote): the rows before it still hash to the file's bytes, and the
  rows from it on (that many rows and entries after the file's last line) are the store's, each
  in the form ``JSON.stringify`` writes, ``\\n``-ended, as Pi writes them;
* **api** — created through the API (no file): every line is in that form;
* **damaged** — anything else: the file's part differs, rows are missing, a line is not what the
  store writes, the tree columns do not re-derive from the lines, the totals kept as rows are
  written (tool-call pairs, the current path's runs and turns, the off-path totals, the activity
  per day) differ from what the rows give, or the database reports an error reading the session.

For every session whose file Pi would open, the derived columns (parent row, depth, runs, latest
compaction / thinking level / model, superseded) are derived again from the stored lines and
compared with the stored ones. What Pi's reading of the tree runs into — parent ids naming no
entry, duplicate ids, parent cycles — is counted, not a damage: it was in the file.

:func:`check_database` looks at the database as a whole: on SQLite ``PRAGMA quick_check`` (or
``integrity_check``) and FTS5's ``integrity-check`` of the full-text index; on PostgreSQL the
cheap checks that say something (invalid indexes, checksum failures).
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, Row, select, text
from sqlalchemy.exc import DBAPIError

from store.analysis import activity_days, pairs
from store.bulk import rows_naming
from store.db import current_path, queries
from store.db.engine import is_sqlite, read_transaction
from store.db.faults import CANNOT_WRITE, error_line, sqlite_fault, waits_too_long
from store.db.schema import entries, sessions
from store.db.stored_text import may_be_escaped, unescaped
from store.db.writes import KEY_COLUMNS, key_values
from store.format import JsonLineError, js_parse, js_stringify
from store.interchange.exporting import in_migrated_form, session_sha256
from store.loading import ENTRY, SKIPPED, VALUE
from store.tree_columns import CYCLE, DUPLICATE_ID, MISSING_PARENT, NONE, StoredTree, TreeBuilder

if TYPE_CHECKING:
    from store.session_store import SessionStore

MAX_LISTED = 20  # rows, findings and database messages listed (all are counted)

IDENTICAL, DIVERGED, API, DAMAGED = "identical", "diverged", "api", "damaged"


@dataclass(slots=True)
class Health:
    """The verification of one session (``None``: that check does not apply)."""

    session_id: str
    rows: int = 0
    entries: int = 0
    skipped: int = 0
    size: int = 0  # bytes export writes
    sha256: str = ""  # of them
    file_lines: int | None = None  # diverged: the lines the file held (rows before ``diverged_seq``)
    added_rows: int = 0  # diverged: rows the store wrote after them (pruned: the rows after them)
    added_entries: int = 0
    pruned: bool = False  # diverged by a prune: rows after the file's part may be the file's own lines
    bytes_ok: bool | None = None  # the file's part of the export == the imported file
    canonical_ok: bool | None = None  # the store's lines are Pi's JSON.stringify form
    tree_ok: bool | None = None
    tree_mismatches: int = 0
    missing_rows: int = 0
    missing_parents: int = 0
    duplicate_ids: int = 0
    cycles: int = 0
    damage: list[str] = field(default_factory=list)  # why the verdict is ``damaged``
    details: list[str] = field(default_factory=list)
    from_file: bool = True

    @property
    def verdict(self) -> str:
        if self.damage:
            return DAMAGED
        if not self.from_file:
            return API
        return IDENTICAL if self.file_lines is None else DIVERGED

    @property
    def ok(self) -> bool:
        return not self.damage

    def describe(self) -> str:
        """The verdict as ``verify`` prints it."""
        verdict = self.verdict
        if verdict == DAMAGED:
            return "damaged: " + "; ".join(self.damage)
        if verdict == DIVERGED:
            rows, entries = self.added_rows, self.added_entries
            counted = f"{rows} row{'s' * (rows != 1)}, {entries} entr{'y' if entries == 1 else 'ies'}"
            if self.pruned:
                return f"diverged (pruned after line {self.file_lines}: {counted} after it)"
            return f"diverged (+{counted} after line {self.file_lines})"
        if verdict == API:
            return "api (tree ok)"
        return verdict

    def to_json(self) -> dict:
        return {
            "sessionId": self.session_id, "verdict": self.verdict, "ok": self.ok, "damage": self.damage,
            "fileLines": self.file_lines, "addedRows": self.added_rows, "addedEntries": self.added_entries,
            "pruned": self.pruned,
            "rows": self.rows, "entries": self.entries, "skippedLines": self.skipped, "bytes": self.size,
            "sha256": self.sha256, "bytesMatch": self.bytes_ok, "canonical": self.canonical_ok,
            "treeMatch": self.tree_ok, "treeMismatches": self.tree_mismatches, "missingRows": self.missing_rows,
            "missingParents": self.missing_parents, "duplicateIds": self.duplicate_ids, "cycles": self.cycles,
            "details": self.details,
        }


def verify_session(store: SessionStore, session_id: str) -> Health:
    """Verify one session; an error the database reports while reading it is a ``damaged``
    verdict (``SessionNotFound`` is raised, and so is a wait that ran out: a lock held past the
    lock timeout, the statement timeout)."""
    try:
        with read_transaction(store.engine) as conn:
            return _verify(conn, queries.stored_session(conn, session_id))
    except DBAPIError as exc:
        if waits_too_long(exc):
            raise
        health = Health(session_id)
        health.damage.append(f"the database reports an error reading it: {error_line(exc)}")
        return health


def session_ids(store: SessionStore) -> list[str]:
    """Every stored session id, in store order."""
    with read_transaction(store.engine) as conn:
        return list(conn.execute(select(sessions.c.session_id).order_by(sessions.c.pk)).scalars())


def verify_all(store: SessionStore) -> Iterator[Health]:
    for session_id in session_ids(store):
        yield verify_session(store, session_id)


def _verify(conn: Connection, session: Row) -> Health:
    health = Health(session.session_id, from_file=session.source_sha256 is not None)
    hasher, health.size = session_sha256(  # the bytes export writes, re-read on purpose
        conn, session.pk, as_migrated=in_migrated_form(session.migrated_from, session.diverged_seq, False))
    health.sha256 = hasher.hexdigest()
    store_rows_from = 0  # the first row the store wrote: its lines must be JSON.stringify's
    if health.from_file:
        split = session.diverged_seq
        if split is None:
            file_hash, file_size, store_rows_from = health.sha256, health.size, session.last_seq + 1
        else:
            health.file_lines = store_rows_from = split
            prefix, file_size = session_sha256(conn, session.pk, below_seq=split)
            if file_size == session.source_bytes + 1:  # the store's first write ended the file's last line
                prefix, file_size = session_sha256(conn, session.pk, limit=session.source_bytes)
            file_hash = prefix.hexdigest()
        if split is not None and file_size < session.source_bytes:  # prune dropped lines of the file
            # the rows after them: the file's lines that prune kept (as the file wrote them) and
            # any the store wrote; which are which is not recorded, so their form is not checked
            health.pruned = True
            health.bytes_ok = _starts_the_file(session, file_size, file_hash)
            if health.bytes_ok is None:
                health.details.append(f"lines 1-{split} not compared: prune removed later lines of the file, and "
                                      f"{session.source_path} is no longer the file that was imported")
            health.details.append(f"rows after line {split}: the file's lines that prune kept and any the store "
                                  "wrote (their form is not checked)")
        else:
            health.bytes_ok = file_hash == session.source_sha256 and file_size == session.source_bytes
        if health.bytes_ok is False:
            part = "export" if split is None else f"lines 1-{split} (the file's part)"
            health.damage.append("bytes differ from the imported file")
            health.details.append(f"{part}: {file_size} bytes, sha256 {file_hash}; imported: "
                                  f"{session.source_bytes} bytes, sha256 {session.source_sha256}")
    _check_rows(conn, session, store_rows_from, health)
    _check_kept(conn, session, health)
    return health


def _starts_the_file(session: Row, size: int, sha256: str) -> bool | None:
    """Whether the first ``size`` bytes of the imported file hash to ``sha256``, read from the
    file itself while it is still the one imported (its size and hash); None when it is not."""
    whole, start = hashlib.sha256(), hashlib.sha256()
    read = 0
    path = session.source_path
    if path is not None and may_be_escaped(path) and os.path.lexists(unescaped(path)):
        path = unescaped(path)  # a name that is not UTF-8 (os.fsdecode's surrogates), stored escaped
    try:  # without blocking: the import may have come from a FIFO, which would wait for a writer
        with os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as source:
            if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
                return None
            while chunk := source.read(1 << 20):
                whole.update(chunk)
                if read < size:
                    start.update(chunk[:size - read])
                read += len(chunk)
    except (OSError, TypeError):  # gone, unreadable, no path
        return None
    if read != session.source_bytes or whole.hexdigest() != session.source_sha256:
        return None
    return start.hexdigest() == sha256


def _check_kept(conn: Connection, session: Row, health: Health) -> None:
    """What is kept as rows are written equals what the session's rows give when counted again:
    ``tool_call_pairs`` (paired in memory), ``activity_days`` (from the rows and those pairs),
    ``path_runs``, ``path_turns`` and the off-path totals (from a walk of the path)."""
    differ = [name for name, kept, recounted in (
        ("tool_call_pairs", pairs.stored(conn, session.pk), pairs.recounted(conn, session.pk)),
        ("activity_days", activity_days.stored(conn, session.pk), activity_days.recounted(conn, session.pk)),
        ("path_runs, path_turns and the off-path totals", current_path.stored(conn, session.pk),
         current_path.recounted(conn, session.pk, session.leaf_seq)),
    ) if not _same(kept, recounted)]
    if differ:
        health.damage.append("totals kept as rows were written differ from its rows: " + ", ".join(differ)
                             + " (pi-store fts rebuild --recompute counts them again)")


def _same(kept: Any, recounted: Any) -> bool:
    """Equal, numbers by value (``numeric`` sums as integers; costs, added up in another order,
    to 1e-9)."""
    if isinstance(kept, dict) and isinstance(recounted, dict):
        return kept.keys() == recounted.keys() and all(_same(kept[k], recounted[k]) for k in kept)
    if isinstance(kept, (list, tuple)) and isinstance(recounted, (list, tuple)):
        return len(kept) == len(recounted) and all(_same(a, b) for a, b in zip(kept, recounted, strict=True))
    if isinstance(kept, (int, float, Decimal)) and isinstance(recounted, (int, float, Decimal)) \
            and not isinstance(kept, bool) and not isinstance(recounted, bool):
        if isinstance(kept, float) or isinstance(recounted, float):
            return math.isclose(float(kept), float(recounted), rel_tol=1e-9, abs_tol=1e-9)
        return kept == recounted
    return kept == recounted


def _check_rows(conn: Connection, session: Row, store_rows_from: int, health: Health) -> None:
    """Read the rows once: count them, find gaps, check the store's lines and re-derive the tree."""
    tree = TreeBuilder() if session.pi_valid else None
    stored = [array("i") for _ in range(6)]
    superseded = bytearray()
    missing: list[int] = []
    not_canonical: list[int] = []
    c = entries.c
    keys_differ: dict[str, list[int]] = {}  # a key column: the lines whose value in it is not the line's
    stmt = (select(c.seq, c.kind, c.line, c.raw, c.eol, c.parent_seq, c.depth, c.run_start, c.compaction_seq,
                   c.thinking_seq, c.model_seq, c.superseded, *(c[name] for name in KEY_COLUMNS))
            .where(c.session_pk == session.pk).order_by(c.seq))
    diverged = health.file_lines is not None
    expected = 0
    for row in conn.execute(stmt):
        seq, kind, line, raw, eol = row[:5]
        columns, is_superseded, keys = row[5:11], row[11], tuple(row[12:])
        if seq > session.last_seq:  # a row past the session's last line: no arrays that long
            health.damage.append(f"row {seq} lies past the session's last line ({session.last_seq + 1})")
            tree = None
            break
        while expected < seq:  # rows deleted behind the store's back: stand-ins keep rows at their seq
            missing.append(expected)
            for column in stored:
                column.append(NONE)
            superseded.append(0)
            if tree is not None:
                tree.skip()
            expected += 1
        expected += 1
        health.rows += 1
        for column, cell in zip(stored, columns, strict=True):
            column.append(NONE if cell is None else cell)
        superseded.append(bool(is_superseded))
        if kind == SKIPPED:
            health.skipped += 1
            value = None
        else:
            try:
                value = js_parse(line)
            except JsonLineError:
                health.damage.append(f"line {seq + 1} is stored as {kind} but is not JSON")
                tree = None
                continue
        if keys != (derived := key_values(value)):
            for name, stored_key, line_key in zip(KEY_COLUMNS, keys, derived, strict=True):
                if stored_key != line_key:
                    keys_differ.setdefault(name, []).append(seq)
        added = seq >= store_rows_from
        if added and not health.pruned and kind != SKIPPED and (
                js_stringify(value) != line or raw is not None or eol != "\n"):
            not_canonical.append(seq)
        if diverged and added:
            health.added_rows += 1
            health.added_entries += kind in (ENTRY, VALUE)
        if kind in (ENTRY, VALUE):
            health.entries += 1
            if tree is not None:
                tree.add(seq, value)
        elif tree is not None:
            tree.skip()
    if keys_differ:  # lookups by id, parent, type or role would answer from them, not from the lines
        health.damage.append(f"column{'s' * (len(keys_differ) > 1)} {', '.join(keys_differ)} "
                             f"differ{'s' * (len(keys_differ) == 1)} from the lines")
        health.details.extend(f"{name}: line(s) {_listed(seqs)}" for name, seqs in keys_differ.items())
    missing.extend(range(expected, session.last_seq + 1))
    health.missing_rows = len(missing)
    if missing:
        health.damage.append(f"rows missing ({len(missing)})")
        health.details.append("missing line(s) " + _listed(missing))
    if store_rows_from <= session.last_seq and not health.pruned:
        health.canonical_ok = not not_canonical
        if not_canonical:
            health.damage.append("lines the store wrote are not what it writes")
            health.details.append("not JSON.stringify's form of their value, \\n-ended: line(s) "
                                  + _listed(not_canonical))
    if tree is not None:
        _check_tree(conn, session.pk, tree, stored, superseded, health)


def _listed(seqs: list[int]) -> str:
    more = f" and {len(seqs) - MAX_LISTED} more" if len(seqs) > MAX_LISTED else ""
    return ", ".join(str(seq + 1) for seq in seqs[:MAX_LISTED]) + more


def _check_tree(conn: Connection, session_pk: int, tree: TreeBuilder, stored: list[array], superseded: bytearray,
                health: Health) -> None:
    ids = tree.ids
    outcome = tree.outcome()
    derived = StoredTree(zip(tree.flags, tree.parent, tree.depth, tree.run, tree.compaction, tree.thinking,
                             tree.model, strict=True))
    if outcome.late_ids:
        derived.relink({seq: ids.get(parent_id) for seq, parent_id, _ in rows_naming(conn, session_pk,
                                                                                      outcome.late_ids)})
    expected_superseded = set(outcome.superseded)
    mismatched = []
    for seq in range(len(derived.flags)):
        mine = (derived.parent[seq], derived.depth[seq], derived.run[seq], derived.compaction[seq],
                derived.thinking[seq], derived.model[seq])
        theirs = tuple(column[seq] for column in stored)
        if (derived.flags[seq] and mine != theirs) or superseded[seq] != (seq in expected_superseded):
            mismatched.append(seq)
    health.tree_ok = not mismatched
    health.tree_mismatches = len(mismatched)
    if mismatched:
        health.damage.append("tree columns do not re-derive from the lines")
        health.details.append("stored tree columns differ from the lines at line(s) " + _listed(mismatched))
    problems = sorted(outcome.problems + derived.problems, key=lambda p: p.seq)
    health.missing_parents = sum(p.kind == MISSING_PARENT for p in problems)
    health.duplicate_ids = sum(p.kind == DUPLICATE_ID for p in problems)
    health.cycles = sum(p.kind == CYCLE for p in problems)
    health.details += [f"line {p.seq + 1}: {p.reason}" for p in problems[:MAX_LISTED]]


# ---------------------------------------------------------------------------------------------
# the database as a whole


@dataclass(slots=True)
class DatabaseHealth:
    """What :func:`check_database` ran and what it found (``problems`` empty: healthy)."""

    checks: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        ran = ", ".join(self.checks)
        return f"database: ok ({ran})" if self.ok else f"database: damaged: {'; '.join(self.problems)} ({ran})"

    def to_json(self) -> dict:
        return {"ok": self.ok, "checks": self.checks, "problems": self.problems, "details": self.details}


def check_database(store: SessionStore, full: bool = False) -> DatabaseHealth:
    """Engine-level checks. SQLite: ``PRAGMA quick_check`` (``integrity_check`` when ``full``:
    also every index against its table), naming the damaged tables, and the full-text index's own
    consistency. PostgreSQL: invalid indexes and data-checksum failures (``amcheck`` is not used)."""
    health = DatabaseHealth()
    try:
        if is_sqlite(store.engine):
            _check_sqlite(store.engine, full, health)
        else:
            _check_postgresql(store.engine, health)
    except DBAPIError as exc:
        if waits_too_long(exc):  # locked or timed out: the command's error, not the database's damage
            raise
        health.problems.append(f"the check itself failed: {error_line(exc)}")
    return health


def _check_sqlite(engine: Engine, full: bool, health: DatabaseHealth) -> None:
    pragma = "integrity_check" if full else "quick_check"
    health.checks.append(pragma)
    with read_transaction(engine) as conn:
        names = conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table' "
                                  "AND sql NOT LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name")).scalars().all()
        has_fts = conn.execute(text("SELECT 1 FROM sqlite_master WHERE name = 'entries_fts'")).first()
    messages = _pragma_messages(engine, f"PRAGMA {pragma}")
    if messages:  # again table by table, to name what is damaged
        damaged = [name for name in names if _pragma_messages(engine, f'PRAGMA {pragma}("{name}")')]
        where = f"table(s) {', '.join(damaged)}" if damaged else "pages outside any table"
        health.problems.append(f"{pragma} finds damage in {where}")
        health.details += messages[:MAX_LISTED]
    if has_fts:
        health.checks.append("fts5 integrity-check")
        # a write statement that writes nothing: in a transaction of its own, always rolled back.
        # rank 0: the index's own structure, not its agreement with `entries` (rows written since
        # the last `fts sync` are not in it yet, on purpose)
        with engine.connect() as conn:
            transaction = conn.begin()
            try:
                conn.exec_driver_sql("INSERT INTO entries_fts (entries_fts, rank) VALUES ('integrity-check', 0)")
            except DBAPIError as exc:
                if sqlite_fault(exc) in CANNOT_WRITE:  # FTS5 checks through a write: not here (read-only)
                    health.checks[-1] = f"fts5 integrity-check not run: {sqlite_fault(exc)} database"
                elif waits_too_long(exc):
                    raise
                else:
                    health.problems.append(f"full-text index entries_fts is damaged ({error_line(exc)}); "
                                           "`pi-store fts rebuild` recreates it from the entries")
            finally:
                transaction.rollback()


def _pragma_messages(engine: Engine, sql: str) -> list[str]:
    """What an integrity pragma reports (nothing: ok), an error it stops with included."""
    try:
        with read_transaction(engine) as conn:
            lines = [line for (message,) in conn.exec_driver_sql(sql) for line in str(message).splitlines()]
    except DBAPIError as exc:
        return [f"stopped: {error_line(exc)}"]
    return [] if lines == ["ok"] else lines


def _check_postgresql(engine: Engine, health: DatabaseHealth) -> None:
    health.checks += ["valid indexes", "checksum failures"]
    with read_transaction(engine) as conn:
        invalid = conn.execute(text(
            "SELECT i.indexrelid::regclass::text FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid "
            "WHERE t.relname IN ('sessions', 'entries', 'imports', 'session_ids') "
            "AND t.relnamespace = current_schema()::regnamespace "
            "AND NOT (i.indisvalid AND i.indisready) ORDER BY 1")).scalars().all()
        building = conn.execute(text("SELECT 1 FROM pg_stat_progress_create_index "
                                     "WHERE relid = to_regclass('entries')")).first() is not None
        failures = conn.execute(text("SELECT checksum_failures FROM pg_stat_database "
                                     "WHERE datname = current_database()")).scalar()
    copies = [name for name in invalid if name.startswith(("ix_entries_search_words_ccnew",  # fts rebuild's
                                                           "ix_entries_search_words_ccold"))]
    if copies and building:
        health.checks[-2] = "valid indexes (an index is being rebuilt: its new copy is not checked)"
    elif copies:
        health.problems.append(f"invalid index(es) {', '.join(copies)} left by a stopped `pi-store fts rebuild`: "
                               "run it again (it drops them)")
    invalid = [name for name in invalid if name not in copies]
    if invalid:
        health.problems.append(f"invalid index(es) {', '.join(invalid)}: REINDEX them")
    if failures:
        health.problems.append(f"{failures} data checksum failure(s) reported for this database")

