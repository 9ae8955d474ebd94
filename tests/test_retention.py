"""Deleting sessions and pruning old branches (``store.retention``), on SQLite and PostgreSQL.

After a delete, everything derived from the rows agrees: listing, search (SQLite's index fed by
its watermark, before and after ``fts sync``), stats, every view, verify, and the other sessions
are byte for byte what they were. A prune keeps what Pi opens (leaf, path, context) and leaves
exactly the rows a fresh import of the pruned file would hold.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import text

from store.analysis import fts
from store.db.engine import is_sqlite, read_transaction
from store.errors import SessionClaimed, SessionNotFound
from store.interchange.verifying import verify_all, verify_session
from store.retention import BadPolicy, RetentionPolicy, parse_duration
from store.session_store import SessionStore
from tests.conftest import scratch_pg_database
from tests.oracle_support import ORACLE_SKIP_REASON, js_diff, oracle_available, run_describe
from tests.retention_sessions import DAY_MS, DROPPED, branched_lines, without, write_session

ROWS = len(branched_lines("x", 0, "w"))  # rows of one branched session
KEPT = ROWS - len(DROPPED)
VIEWS = ("messages", "usage_ledger", "tool_calls", "compactions", "branches", "labels", "activity")
POLICY = RetentionPolicy(parse_duration("30d"))
LISTING = ("entry_count", "message_count", "first_message", "name", "activity_ms", "modified_ms", "header_seq",
           "last_seq", "leaf_seq", "has_conversation", "pi_listable")
TREE = ("seq", "kind", "entry_id", "parent_seq", "depth", "run_start", "compaction_seq", "thinking_seq", "model_seq",
        "superseded")

pytestmark = pytest.mark.both_apis  # the tests on the `store` fixture: on the sync API, then the async one


@contextmanager
def _reference(store: SessionStore, tmp_path: Path) -> Iterator[SessionStore]:
    """An empty store on the same engine as ``store`` (to import what a result should equal)."""
    if is_sqlite(store.engine):
        with SessionStore.connect(f"sqlite:///{tmp_path / 'reference.db'}") as reference:
            yield reference
        return
    with scratch_pg_database("pi_store_retention") as url, SessionStore.connect(url) as reference:
        yield reference


def _export(store: SessionStore, session_id: str) -> bytes:
    return b"".join(store.iter_export(session_id))


def _import(store: SessionStore, tmp_path: Path, session_id: str, word: str, now_ms: float,
            cwd: str = "/work/project") -> Path:
    path = write_session(tmp_path / f"{session_id}.jsonl", branched_lines(session_id, now_ms, word, cwd))
    store.import_file(path)
    return path


def _views(store: SessionStore, session_id: str) -> dict[str, list]:
    """Every view's rows of one session (sorted, as tuples), and its current path."""
    out = {}
    with read_transaction(store.engine) as conn:
        for view in VIEWS:
            out[view] = sorted(map(repr, conn.execute(text(f"SELECT * FROM {view} WHERE session_id = :s"),
                                                      {"s": session_id})))
        out["sessions_overview"] = sorted(map(repr, conn.execute(
            text("SELECT * FROM sessions_overview WHERE id = :s"), {"s": session_id})))
        out["current_path"] = sorted(map(repr, conn.execute(text(
            "SELECT cp.* FROM current_path AS cp JOIN sessions AS s ON s.pk = cp.session_pk "
            "WHERE s.session_id = :s"), {"s": session_id})))
    return out


def _fts_rowids(store: SessionStore, word: str) -> set[int]:
    """Rows the SQLite index itself answers for ``word`` (read without syncing it first)."""
    with read_transaction(store.engine) as conn:
        return set(conn.execute(text("SELECT rowid FROM entries_fts WHERE entries_fts MATCH :w"), {"w": word})
                   .scalars())


def _pks_of(store: SessionStore, session_id: str) -> set[int]:
    with read_transaction(store.engine) as conn:
        return set(conn.execute(text("SELECT e.pk FROM entries AS e JOIN sessions AS s ON s.pk = e.session_pk "
                                     "WHERE s.session_id = :s"), {"s": session_id}).scalars())


# ------------------------------------------------------------------------------------ delete
def test_a_pruned_file_whose_lines_are_not_in_the_stores_form_is_not_damaged(store: SessionStore, tmp_path: Path,
                                                                              clock):
    """The rows after a prune's first removed line are the file's kept lines (CRLF-ended here)
    and any the store wrote: verify required them all in the store's own form (damaged, exit 1)."""
    lines = branched_lines("crlf", clock.now, "okapi")
    source = tmp_path / "crlf.jsonl"
    source.write_bytes("".join(line + "\r\n" for line in lines).encode())
    store.import_file(source)
    assert store.prune(POLICY, apply=True).trimmed
    health = verify_session(store, "crlf")
    assert (health.verdict, health.pruned, health.bytes_ok, health.canonical_ok) == ("diverged", True, True, None)
    assert health.describe().startswith("diverged (pruned after line 3: ")
    store.open("crlf").append_message({"role": "user", "content": "after the prune", "timestamp": 1})
    assert verify_session(store, "crlf").verdict == "diverged"


def test_verify_reads_a_pruned_file_whose_name_is_not_utf8(store: SessionStore, tmp_path: Path, clock):
    """The path is stored with db_text's escape of os.fsdecode's surrogate; verify opened the
    escaped text, found no file and left the file's lines uncompared."""
    source = write_session(Path(os.fsdecode(bytes(tmp_path) + b"/bad\xffname.jsonl")),
                           branched_lines("s1", clock.now, "okapi"))
    store.import_file(source)
    assert store.prune(POLICY, apply=True).trimmed
    health = verify_session(store, "s1")
    assert (health.verdict, health.bytes_ok) == ("diverged", True), health.details


def test_postgresql_prune_locks_only_the_sessions_it_trims(tmp_path: Path, clock, monkeypatch) -> None:
    """It locked every session row for its whole transaction: an append to a recent session
    waited for it, and failed once that took longer than the lock timeout."""
    monkeypatch.setenv("PI_STORE_LOCK_TIMEOUT", "1")
    with scratch_pg_database("pi_store_prune_lock") as url, SessionStore.connect(url, clock=clock) as store:
        _import(store, tmp_path, "old", "okapi", clock.now)
        recent = store.create("/work/project")
        recent.append_message({"role": "user", "content": "recent", "timestamp": clock.now})
        with store.engine.connect() as writer:  # a writer in the middle of a write to the recent session
            writer.execute(text("SELECT 1 FROM sessions WHERE session_id = :s FOR UPDATE"),
                           {"s": recent.get_session_id()})
            report = store.prune(POLICY, apply=True)
            writer.rollback()
        assert [trim.session_id for trim in report.trimmed] == ["old"]
        assert report.kept_whole == 1


def test_postgresql_prune_does_not_lock_a_claimed_session(tmp_path: Path, clock, monkeypatch) -> None:
    """Claimed sessions are kept whole, so their holder's writes must not wait for the prune: it
    locked every candidate before leaving the claimed ones out, and a holder's append in the
    middle of a write made it fail on the lock timeout."""
    monkeypatch.setenv("PI_STORE_LOCK_TIMEOUT", "1")
    with scratch_pg_database("pi_store_prune_claim") as url, SessionStore.connect(url, clock=clock) as store:
        for session_id in ("held", "free"):
            _import(store, tmp_path, session_id, "okapi", clock.now - 90 * DAY_MS)
        store.claim("held", "host-a", ttl_ms=None)
        with store.engine.connect() as holder:  # the claim's holder in the middle of a write
            holder.execute(text("SELECT 1 FROM sessions WHERE session_id = 'held' FOR UPDATE"))
            report = store.prune(POLICY, apply=True)
            holder.rollback()
        assert [trim.session_id for trim in report.trimmed] == ["free"] and report.claimed == ["held"]
        assert (report.sessions_seen, report.kept_whole) == (2, 1)


@pytest.mark.parametrize("indexed", [True, False], ids=["after-fts-sync", "before-fts-sync"])
def test_delete_leaves_everything_derived_consistent(store: SessionStore, tmp_path: Path, clock, indexed: bool):
    now = clock.now
    _import(store, tmp_path, "gone", "zebra", now)
    kept_file = _import(store, tmp_path, "kept", "zebra", now)
    kept_export, kept_views, kept_stats = _export(store, "kept"), _views(store, "kept"), store.stats("kept")
    gone_pks = _pks_of(store, "gone")
    if indexed:
        fts.sync(store.engine)
        if is_sqlite(store.engine):
            assert gone_pks & _fts_rowids(store, "zebra")  # the index does hold the rows to delete
    with read_transaction(store.engine) as conn:
        expected = conn.execute(text(
            "SELECT count(*), sum(length(line)) FROM entries AS e JOIN sessions AS s ON s.pk = e.session_pk "
            "WHERE s.session_id = 'gone'")).one()

    report = store.delete("gone")

    assert (report.sessions, report.session_ids, report.missing) == (1, ["gone"], [])
    assert (report.removed.rows, report.removed.line_bytes, report.removed.raw_bytes) == (expected[0], expected[1], 0)
    assert store.find_by_id("gone") is None
    assert [info.id for info in store.list_all()] == ["kept"]
    if is_sqlite(store.engine):
        assert not gone_pks & _fts_rowids(store, "zebra")  # gone from the index itself, before any sync
    hits = store.search("zebra")
    assert hits and {hit.session_id for hit in hits} == {"kept"}
    fts.sync(store.engine)
    if is_sqlite(store.engine):
        assert not gone_pks & _fts_rowids(store, "zebra")
        assert _fts_rowids(store, "zebra") and _fts_rowids(store, "zebra") <= _pks_of(store, "kept")
    assert {hit.session_id for hit in store.search("zebra", limit=100)} == {"kept"}
    with _reference(store, tmp_path) as reference:
        reference.import_file(kept_file)
        assert store.stats().to_json() == reference.stats().to_json()  # the totals of the survivor alone
    assert store.stats("kept").to_json() == kept_stats.to_json()
    assert _views(store, "gone") == {name: [] for name in kept_views}
    assert _views(store, "kept") == kept_views
    with read_transaction(store.engine) as conn:
        assert conn.execute(text("SELECT count(*) FROM imports")).scalar_one() == 1
        assert conn.execute(text("SELECT count(*) FROM entries WHERE session_pk NOT IN (SELECT pk FROM sessions)"
                                 )).scalar_one() == 0
    assert all(health.ok for health in verify_all(store))
    assert _export(store, "kept") == kept_export == kept_file.read_bytes()
    store.import_file(tmp_path / "gone.jsonl")  # a deleted session can be imported again, whole
    assert _export(store, "gone") == (tmp_path / "gone.jsonl").read_bytes()
    assert {hit.session_id for hit in store.search("zebra", limit=100)} == {"kept", "gone"}


def test_delete_unknown_ids_abort_unless_ignored(store: SessionStore, tmp_path: Path, clock):
    for session_id in ("s1", "s2"):
        _import(store, tmp_path, session_id, "word", clock.now)
    with pytest.raises(SessionNotFound) as failure:
        store.delete(["s1", "nope", "nada"])
    assert "'nope'" in str(failure.value) and "'nada'" in str(failure.value) and "nothing deleted" in str(failure.value)
    assert {info.id for info in store.list_all()} == {"s1", "s2"}

    dry = store.delete(["s1", "s2", "s1"], dry_run=True)
    assert dry.dry_run and dry.session_ids == ["s1", "s2"] and dry.removed.rows == 2 * ROWS
    assert {info.id for info in store.list_all()} == {"s1", "s2"}

    done = store.delete(["nope", "s1"], ignore_missing=True)
    assert (done.session_ids, done.missing, done.removed.rows) == (["s1"], ["nope"], ROWS)
    assert [info.id for info in store.list_all()] == ["s2"]


def test_delete_refuses_a_session_a_writer_holds(store: SessionStore, tmp_path: Path, clock):
    """A live claim keeps ``delete`` off the session (nothing deleted, the holder still writes);
    an expired or released claim does not; ``force`` deletes it anyway."""
    for session_id in ("held", "free", "lapsed"):
        _import(store, tmp_path, session_id, "word", clock.now)
    store.claim("held", "host-a", ttl_ms=None)
    store.claim("lapsed", "host-b", ttl_ms=10)
    clock.now += 1_000  # host-b's claim has expired
    with pytest.raises(SessionClaimed) as refused:
        store.delete(["free", "held"])
    assert "session held is claimed by 'host-a' (token 1)" in str(refused.value)
    assert "nothing deleted" in str(refused.value) and "host-b" not in str(refused.value)
    with pytest.raises(SessionClaimed):
        store.delete("held", dry_run=True)  # what the real run would do
    assert {info.id for info in store.list_all()} == {"held", "free", "lapsed"}
    holder = store.open("held")
    holder.claim("host-a", ttl_ms=None, force=True)  # the holder's manager writes under the claim
    holder.append_message({"role": "user", "content": "still mine", "timestamp": 1})

    assert store.delete(["free", "lapsed"]).session_ids == ["free", "lapsed"]
    assert store.delete("held", force=True).session_ids == ["held"]
    assert store.list_all() == []


def test_prune_keeps_claimed_sessions_whole(store: SessionStore, tmp_path: Path, clock):
    now = clock.now
    for session_id in ("held", "free"):
        _import(store, tmp_path, session_id, "w", now - 90 * DAY_MS)
    store.claim("held", "host-a", ttl_ms=60_000)
    before = _export(store, "held")

    report = store.prune(POLICY, apply=True)
    assert [item.session_id for item in report.trimmed] == ["free"] and report.claimed == ["held"]
    assert (report.sessions_seen, report.kept_whole) == (2, 1) and report.to_json()["claimed"] == ["held"]
    assert _export(store, "held") == before
    deleting = RetentionPolicy(POLICY.older_than_ms, delete_sessions=True)
    assert store.prune(deleting, apply=True).deleted == ["free"]
    assert store.prune(POLICY, apply=True, force=True).trimmed[0].session_id == "held"
    assert all(health.ok for health in verify_all(store))


# ------------------------------------------------------------------------------------- prune
def _tree_rows(store: SessionStore, session_id: str) -> list[tuple]:
    with read_transaction(store.engine) as conn:
        return [tuple(row) for row in conn.execute(text(
            f"SELECT {', '.join('e.' + c for c in TREE)} FROM entries AS e JOIN sessions AS s ON s.pk = e.session_pk "
            "WHERE s.session_id = :s ORDER BY e.seq"), {"s": session_id})]


def _session_row(store: SessionStore, session_id: str):
    with read_transaction(store.engine) as conn:
        return conn.execute(text("SELECT * FROM sessions WHERE session_id = :s"), {"s": session_id}).one()


def _assert_tree_columns_point_at_kept_rows(rows: list[tuple]) -> None:
    """The reasoning of docs/design.md, checked on the stored columns: every link names a row
    that is there, depth falls along parents, a run is a chain of parent-child neighbours."""
    by_seq = {row[0]: row for row in rows}
    assert sorted(by_seq) == list(range(len(rows)))
    for seq, kind, _id, parent, depth, run, *settings, _superseded in rows:
        if kind != "entry":
            continue
        if parent is not None:
            assert by_seq[parent][1] == "entry" and by_seq[parent][4] < depth
        assert run <= seq and all(by_seq[r][3] == r - 1 for r in range(run + 1, seq + 1))
        assert run == 0 or by_seq[run][3] != run - 1  # runs are as long as they can be
        for target in settings:
            assert target is None or by_seq[target][1] == "entry"


def test_prune_keeps_what_pi_opens_and_what_an_import_would_hold(store: SessionStore, tmp_path: Path, clock):
    lines = branched_lines("s1", clock.now, "okapi")
    source = write_session(tmp_path / "s1.jsonl", lines)
    store.import_file(source)
    manager = store.open("s1")
    context, branch, leaf = manager.build_session_context(), manager.get_branch(), manager.get_leaf_id()
    before = _session_row(store, "s1")

    dry = store.prune(POLICY)
    assert not dry.applied and _export(store, "s1") == source.read_bytes()
    assert [(item.session_id, item.removed.rows, item.first_removed_seq) for item in dry.trimmed] == [("s1", 4, 3)]

    report = store.prune(POLICY, apply=True)
    assert report.to_json()["total"] == dry.to_json()["total"]
    assert report.removed.line_bytes == sum(len(line.encode()) for line in lines) - sum(
        len(line.encode()) for line in without(lines, DROPPED))
    (tmp_path / "expected").mkdir()
    expected_file = write_session(tmp_path / "expected" / "s1.jsonl", without(lines, DROPPED))
    assert _export(store, "s1") == expected_file.read_bytes()

    reopened = store.open("s1")
    assert reopened.get_leaf_id() == leaf
    assert reopened.get_branch() == branch
    assert reopened.build_session_context() == context
    assert reopened.get_label("b8") == "keep-me" and reopened.get_session_name() == "Current name"
    assert {e["id"] for e in reopened.get_entries() if isinstance(e, dict)} >= {"b7", "b8", "c9", "c10"}

    rows = _tree_rows(store, "s1")
    _assert_tree_columns_point_at_kept_rows(rows)
    with _reference(store, tmp_path) as reference:
        reference.import_file(expected_file)
        assert rows == _tree_rows(reference, "s1")  # the columns a fresh import derives
        after, fresh = _session_row(store, "s1"), _session_row(reference, "s1")
        assert [getattr(after, c) for c in LISTING] == [getattr(fresh, c) for c in LISTING]
        fresh_views = {view: [row.replace(str(expected_file), str(source)) for row in rows]  # its source_path
                       for view, rows in _views(reference, "s1").items()}
        assert _views(store, "s1") == fresh_views
        assert store.stats("s1").to_json() == reference.stats("s1").to_json()
    assert (after.diverged_seq, after.row_version) == (3, before.row_version + 1)

    health = verify_session(store, "s1")
    assert health.tree_ok and health.tree_mismatches == 0
    # the file's history is no longer held: diverged after its first 3 lines (read from the file
    # itself, which is still the one imported), not damaged (the verdict once was: it compared
    # those lines with the whole file's hash)
    assert (health.verdict, health.bytes_ok, health.file_lines) == ("diverged", True, 3), health.describe()
    source.write_bytes(source.read_bytes() + b"\n")  # no longer the imported file: not compared
    health = verify_session(store, "s1")
    assert (health.verdict, health.bytes_ok) == ("diverged", None) and "not compared" in health.details[0]
    source.unlink()
    assert verify_session(store, "s1").verdict == "diverged"
    os.mkfifo(source)  # a file replaced by a FIFO: opened as it was, verify waited for a writer
    verdicts: list[str] = []
    reading = threading.Thread(target=lambda: verdicts.append(verify_session(store, "s1").verdict), daemon=True)
    reading.start()
    reading.join(60)
    assert verdicts == ["diverged"], "verify waited on the FIFO"
    assert not store.search("quokka") and [hit.entry_id for hit in store.search("marmot")] == ["b7"]

    again = store.prune(POLICY, apply=True)
    assert again.trimmed == [] and _export(store, "s1") == expected_file.read_bytes()


def test_prune_keeps_recent_and_latest_sessions_whole(store: SessionStore, tmp_path: Path, clock):
    now = clock.now
    _import(store, tmp_path, "old-a", "w", now - 10 * DAY_MS)  # older of two in /a
    _import(store, tmp_path, "new-a", "w", now - 5 * DAY_MS)
    _import(store, tmp_path, "old-b", "w", now - 2 * DAY_MS, cwd="/work/b")
    recent_lines = branched_lines("recent", now, "w", "/work/c", leaf_ms=now - DAY_MS)  # a message after D
    store.import_file(write_session(tmp_path / "recent.jsonl", recent_lines))
    exports = {sid: _export(store, sid) for sid in ("old-a", "new-a", "old-b", "recent")}

    latest = store.prune(RetentionPolicy(POLICY.older_than_ms, keep_latest=1))
    assert (latest.sessions_seen, latest.kept_whole) == (4, 3)
    assert [item.session_id for item in latest.trimmed] == ["old-a"]
    assert sorted(item.session_id for item in store.prune(POLICY).trimmed) == ["new-a", "old-a", "old-b"]

    deleting = RetentionPolicy(POLICY.older_than_ms, keep_latest=1, delete_sessions=True)
    dry = store.prune(deleting)
    assert (dry.deleted, dry.trimmed) == (["old-a"], []) and dry.deleted_removed.rows == ROWS
    assert {sid: _export(store, sid) for sid in exports} == exports  # a dry run writes nothing
    done = store.prune(deleting, apply=True)
    assert done.deleted == ["old-a"] and done.to_json()["total"] == dry.to_json()["total"]
    assert {info.id for info in store.list_all()} == {"new-a", "old-b", "recent"}
    assert {sid: _export(store, sid) for sid in ("new-a", "old-b", "recent")} == {
        sid: exports[sid] for sid in ("new-a", "old-b", "recent")}
    if is_sqlite(store.engine):
        assert done.vacuum is not None and done.vacuum.bytes_after <= done.vacuum.bytes_before
    assert all(health.ok for health in verify_all(store))


def test_compaction_after_a_prune_does_not_wait_for_a_reader(tmp_path: Path, clock) -> None:
    """A connection in the middle of a read keeps the WAL from being truncated: the prune's
    VACUUM is skipped after a short wait (it used to wait twice the lock timeout, 60 s, and leave
    a bigger file: the whole database copied into the WAL), and the report says why."""
    import sqlite3

    from store.retention import compact_sqlite

    with SessionStore.connect(f"sqlite:///{tmp_path / 'store.db'}", clock=clock) as store:
        _import(store, tmp_path, "old", "w", clock.now - 90 * DAY_MS)
        reader = sqlite3.connect(tmp_path / "store.db")
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM entries").fetchone()
        report = store.prune(POLICY, apply=True)
        assert report.trimmed and report.vacuum is not None and "another connection" in report.vacuum.skipped
        assert report.to_json()["vacuum"]["skipped"] == report.vacuum.skipped
        reader.close()
        done = compact_sqlite(store.engine)
        assert done.skipped is None and done.bytes_after < done.bytes_before


def test_a_vacuum_that_fails_is_reported_not_raised(tmp_path: Path, clock) -> None:
    """VACUUM writes a copy of the database (a full disk refuses it) after the prune committed:
    the failure raised out of ``prune`` and the CLI printed an error for a prune that was done.
    Here SQLite refuses for real: the compacting connection is ``query_only``."""
    from sqlalchemy import event

    from store.db.engine import make_engine
    from store.retention import compact_sqlite

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with SessionStore.connect(url, clock=clock) as store:
        _import(store, tmp_path, "s", "w", clock.now)
    engine = make_engine(url)
    event.listen(engine, "connect", lambda connection, _record: connection.execute("PRAGMA query_only = 1"))
    try:
        done = compact_sqlite(engine)
    finally:
        engine.dispose()
    assert done.skipped is not None and done.skipped.startswith("VACUUM failed: attempt to write a readonly")


def _answer(text: str, ms: float) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": text}], "provider": "p", "model": "m",
            "api": "x", "stopReason": "stop", "timestamp": int(ms)}


def test_prune_keeps_rows_sharing_an_id_and_api_sessions_stay_canonical(store: SessionStore, clock):
    old = clock.now - 90 * DAY_MS
    manager = store.create("/work/api")
    clock.now = old
    root = manager.append_message({"role": "user", "content": "root", "timestamp": int(old)})
    manager.append_message(_answer("dropped branch", old))
    manager.branch(root)
    manager.append_message({"role": "user", "content": "kept leaf", "timestamp": int(old) + 5})
    clock.now = old + 90 * DAY_MS
    sid = manager.get_session_id()
    context = manager.build_session_context()
    report = store.prune(POLICY, apply=True)
    assert [(item.session_id, item.removed.rows, item.diverged) for item in report.trimmed] == [(sid, 1, False)]
    assert store.open(sid).build_session_context() == context
    health = verify_session(store, sid)
    assert health.ok and health.canonical_ok and health.tree_ok
    assert _session_row(store, sid).diverged_seq is None  # no file to diverge from
    _assert_tree_columns_point_at_kept_rows(_tree_rows(store, sid))


def test_delete_ids_that_hold_characters_a_database_cannot(store: SessionStore, tmp_path: Path):
    """Ids are stored with lone surrogates and NUL escaped (``db_text``); the session was found by
    the caller's id but its ``session_ids`` row deleted by it as given: a UnicodeEncodeError
    (PostgreSQL: NUL refused) after the dry run had said it would delete it."""
    for n, escaped in enumerate(("s-\\udcff", "s-nul\\u0000x")):
        path = tmp_path / f"odd{n}.jsonl"
        header = ('{"type":"session","version":3,"id":"' + escaped
                  + '","timestamp":"2020-01-01T00:00:00.000Z","cwd":"/w"}')
        path.write_text(header + '\n{"type":"message","id":"a1","parentId":null,"timestamp":"2020-01-01T00:00:01.000Z",'
                        '"message":{"role":"user","content":"q"}}\n', "ascii")
        store.import_file(path)
    ids = ["s-\udcff", "s-nul\x00x"]
    assert store.delete(ids, dry_run=True).session_ids == ids
    assert store.delete(ids).session_ids == ids
    assert store.list_all() == []


def test_parse_duration() -> None:
    assert parse_duration("30d") == 30 * DAY_MS and parse_duration("12h") == 12 * 3_600_000
    assert parse_duration("1d12h") == 36 * 3_600_000 and parse_duration("90m") == 5_400_000
    for bad in ("", "30", "d", "3x", "1d 2", "9" * 400 + "d"):  # the last: an infinite float
        with pytest.raises(BadPolicy):
            parse_duration(bad)


# --------------------------------------------------------------------------------------- CLI
def _cli(db: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "store.cli", "--db", db, *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_mirrors_the_api(tmp_path: Path) -> None:
    import json
    import time

    db = f"sqlite:///{tmp_path / 'cli.db'}"
    now = time.time() * 1000
    for session_id in ("c1", "c2"):
        write_session(tmp_path / f"{session_id}.jsonl", branched_lines(session_id, now, "kudu"))
    assert _cli(db, "import", str(tmp_path / "c1.jsonl"), str(tmp_path / "c2.jsonl")).returncode == 0

    dry = _cli(db, "prune", "--older-than", "30d", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert not plan["applied"] and [t["rowsKept"] for t in plan["trimmed"]] == [KEPT, KEPT]
    applied = json.loads(_cli(db, "prune", "--older-than", "30d", "--apply", "--json").stdout)
    assert applied["applied"] and applied["total"] == plan["total"] and applied["vacuum"]["bytesAfter"] > 0
    assert json.loads(_cli(db, "prune", "--older-than", "30d", "--json").stdout)["trimmed"] == []

    missing = _cli(db, "delete", "c1", "zz")
    assert missing.returncode == 1 and "'zz'" in missing.stderr and "nothing deleted" in missing.stderr
    would = json.loads(_cli(db, "delete", "c1", "--dry-run", "--json").stdout)
    assert would["dryRun"] and would["sessionIds"] == ["c1"] and would["rows"] == KEPT
    deleted = json.loads(_cli(db, "delete", "c1", "zz", "--ignore-missing", "--json").stdout)
    assert (deleted["sessionIds"], deleted["missing"], deleted["rows"]) == (["c1"], ["zz"], KEPT)
    assert [s["id"] for s in json.loads(_cli(db, "list", "--json").stdout)] == ["c2"]
    assert _cli(db, "prune", "--older-than", "soon").returncode == 2

    with SessionStore.connect(db) as writer:  # a live writer (claims are taken through the API)
        writer.claim("c2", "host-a", ttl_ms=None)
    held = _cli(db, "delete", "c2")
    assert held.returncode == 1 and "claimed by 'host-a'" in held.stderr and "Traceback" not in held.stderr
    kept = _cli(db, "prune", "--older-than", "0s", "--delete-sessions", "--apply")
    assert kept.returncode == 0 and "c2  kept whole: a writer holds a claim" in kept.stdout
    assert json.loads(_cli(db, "delete", "c2", "--force", "--json").stdout)["sessionIds"] == ["c2"]


# ------------------------------------------------------------------------------------ oracle
PI_OPENS = ("openError", "header", "leafId", "branchIds", "contextEntryIds", "projection", "sessionContext",
            "latestCompactionId", "sessionName", "estimateProjectedContextTokens", "prepareCompaction")


@pytest.mark.oracle
@pytest.mark.skipif(not oracle_available(), reason=ORACLE_SKIP_REASON)
def test_pi_opens_the_pruned_export_as_it_opened_the_file(tmp_path: Path, clock) -> None:
    source = write_session(tmp_path / "s1.jsonl", branched_lines("s1", clock.now, "okapi"))
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}", clock=clock) as store:
        store.import_file(source)
        store.prune(POLICY, apply=True)
        pruned = tmp_path / "pruned.jsonl"
        store.export_jsonl("s1", pruned)
    before, after = run_describe(source, all_leaves=False), run_describe(pruned, all_leaves=False)
    assert after["openError"] is None and len(after["entries"]) == len(before["entries"]) - len(DROPPED)
    for key in PI_OPENS:
        assert js_diff(before[key], after[key]) is None, key


def test_prune_does_not_bring_back_a_label_that_was_cleared(store: SessionStore, clock):
    """The entry that set the label lies on the current path (kept); the one that cleared it on
    an abandoned branch (dropped, as a latest label entry that clears was): the label came back."""
    old = clock.now - 90 * DAY_MS
    manager = store.create("/work/labels")
    clock.now = old
    question = manager.append_message({"role": "user", "content": "question", "timestamp": int(old)})
    manager.append_message(_answer("answer", old))
    manager.append_label_change(question, "important")  # on the path that stays current
    side = manager.append_message({"role": "user", "content": "a side question", "timestamp": int(old)})
    manager.append_label_change(question, None)  # cleared on the branch that will be abandoned
    manager.branch(side)
    manager.append_message(_answer("new leaf", old))
    clock.now = old + 90 * DAY_MS
    sid = manager.get_session_id()
    assert manager.get_label(question) is None
    context = manager.build_session_context()
    store.prune(POLICY, apply=True)
    pruned = store.open(sid)
    assert pruned.get_label(question) is None and pruned.build_session_context() == context
    assert verify_session(store, sid).ok


def test_verify_finds_damage_in_the_file_lines_a_prune_kept(store: SessionStore, tmp_path: Path, clock):
    source = write_session(tmp_path / "s1.jsonl", branched_lines("s1", clock.now, "okapi"))
    store.import_file(source)
    store.prune(POLICY, apply=True)
    with store.engine.begin() as conn:  # a kept line of the file's part, changed behind the store's back
        conn.execute(text("UPDATE entries SET line = replace(line, 'okapi', 'okapo') WHERE seq = 1 "
                          "AND session_pk = (SELECT pk FROM sessions WHERE session_id = 's1')"))
    health = verify_session(store, "s1")
    assert health.verdict == "damaged" and health.bytes_ok is False, health.describe()
