"""Who owns a session's history: the file it came from until the store writes to it, then the
store. A file that changed after that is a conflict — its lines are never interleaved with the
store's — settled only by an explicit ``prefer``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select, update

from store.db.engine import read_transaction, write_transaction
from store.db.schema import entries, sessions
from store.interchange.importing import ImportConflict, import_file
from store.interchange.verifying import verify_session
from store.session_store import SessionStore
from tests.interchange.test_oddities import HEADER, SID, entry
from tests.interchange.test_round_trip import table_rows

FILE = HEADER + b"\n" + entry("aaaaaaaa", None) + b"\n" + entry("bbbbbbbb", "aaaaaaaa") + b"\n"
PI_APPENDS = entry("cccccccc", "bbbbbbbb") + b"\n"  # the line Pi writes next


def _session(store: SessionStore) -> dict:
    with read_transaction(store.engine) as conn:
        return dict(conn.execute(select(sessions).where(sessions.c.session_id == SID)).one()._mapping)


def _write_through_the_store(store: SessionStore) -> None:
    """An API append to the imported session. Until the lead's change sets ``diverged_seq`` on such
    writes, the test sets it as that change will: the first row the store wrote."""
    first_store_row = _session(store)["last_seq"] + 1
    store.open(SID).append_message({"role": "user", "content": "written by the store", "timestamp": 5})
    with write_transaction(store.engine) as conn:
        conn.execute(update(sessions).where(sessions.c.session_id == SID).values(diverged_seq=first_store_row))


@pytest.fixture
def diverged(store: SessionStore, tmp_path: Path) -> tuple[SessionStore, Path]:
    folder = tmp_path / "sessions" / "--w--"
    folder.mkdir(parents=True)
    path = folder / "s.jsonl"
    path.write_bytes(FILE)
    assert import_file(store, path).status == "imported"
    _write_through_the_store(store)
    return store, path


def test_pi_appends_after_the_store_wrote_is_a_conflict_nothing_interleaved(diverged) -> None:
    store, path = diverged
    before, exported = table_rows(store), b"".join(store.iter_export(SID))
    assert exported.startswith(FILE) and b"written by the store" in exported[len(FILE):]
    with path.open("ab") as out:  # Pi appends its next entry to the file
        out.write(PI_APPENDS)
    [report] = store.import_path(path.parent.parent)  # sync
    assert report.status == "conflict"
    assert "the store changed this session after the file's line 3" in report.error and "1 row after" in report.error
    assert f"the file has {len(PI_APPENDS)} more bytes since it was imported" in report.error
    assert table_rows(store) == before  # the store's rows untouched
    assert b"".join(store.iter_export(SID)) == exported
    with pytest.raises(ImportConflict, match="--prefer file"):
        import_file(store, path)


def test_an_unchanged_file_of_a_diverged_session_is_unchanged_and_says_so(diverged) -> None:
    store, path = diverged
    report = import_file(store, path)
    assert report.status == "unchanged" and not report.imported
    assert "1 row after that line" in report.note and "the file has not changed since" in report.note


def test_prefer_store_keeps_the_history_and_leaves_the_file(diverged) -> None:
    store, path = diverged
    path.write_bytes(FILE + PI_APPENDS)
    before, version = table_rows(store), _session(store)["row_version"]
    report = import_file(store, path, prefer="store")
    assert report.status == "kept-store" and "kept the stored history" in report.note
    assert (table_rows(store), _session(store)["row_version"]) == (before, version)
    assert path.read_bytes() == FILE + PI_APPENDS


def test_prefer_file_replaces_the_history_with_the_file(diverged) -> None:
    store, path = diverged
    path.write_bytes(FILE + PI_APPENDS)
    version = _session(store)["row_version"]
    manager = store.open(SID)
    report = import_file(store, path, prefer="file")
    assert report.status == "replaced"
    assert b"".join(store.iter_export(SID)) == FILE + PI_APPENDS
    row = _session(store)
    assert (row["diverged_seq"], row["row_version"]) == (None, version + 1)  # the file owns it again
    assert import_file(store, path).status == "unchanged"
    assert manager.get_leaf_id() != "cccccccc" and store.open(SID).get_leaf_id() == "cccccccc"


def test_every_import_that_changes_a_session_counts_a_row_version(store: SessionStore, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(FILE[:-1])  # an unfinished last line: the next import rebuilds
    import_file(store, path)
    versions = [_session(store)["row_version"]]
    for data, status in ((FILE, "rebuilt"), (FILE + PI_APPENDS, "appended"), (FILE, "unchanged")):
        path.write_bytes(data)
        assert import_file(store, path).status == status
        versions.append(_session(store)["row_version"])
    path.write_bytes(HEADER + b"\n" + entry("dddddddd", None) + b"\n")
    assert import_file(store, path, replace=True).status == "replaced"
    versions.append(_session(store)["row_version"])
    assert [v - versions[0] for v in versions] == [0, 1, 2, 2, 3]  # one per import that changed it
    with read_transaction(store.engine) as conn:
        assert conn.execute(select(entries.c.entry_id).order_by(entries.c.seq)).scalars().all() == [SID, "dddddddd"]


def test_an_import_leaves_a_session_a_writer_holds_alone(store: SessionStore, tmp_path: Path, clock) -> None:
    """While a writer holds a live claim on the session, a grown, rebuilt or replacing file is a
    conflict that no ``prefer`` settles (``"store"`` keeps the session, as always); once the claim
    has expired the file's new lines come in."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(FILE)
    import_file(store, path)
    store.claim(SID, "host-a", ttl_ms=60_000)
    before, version = table_rows(store), _session(store)["row_version"]
    path.write_bytes(FILE + PI_APPENDS)
    with pytest.raises(ImportConflict, match="is claimed by 'host-a'") as refused:
        import_file(store, path)
    assert "--prefer" not in str(refused.value) and "nothing was changed" in str(refused.value)
    with pytest.raises(ImportConflict, match="is claimed by 'host-a'"):
        import_file(store, path, prefer="file")
    kept = import_file(store, path, prefer="store")
    assert kept.status == "kept-store" and "claimed by 'host-a'" in kept.note
    [report] = store.import_path(path)  # what a sync reports
    assert report.status == "conflict" and "claimed by 'host-a'" in report.error
    assert (table_rows(store), _session(store)["row_version"]) == (before, version)
    clock.now += 120_000  # the claim has expired: a takeover, or a file's lines, may come in
    assert import_file(store, path).status == "appended"
    assert b"".join(store.iter_export(SID)) == FILE + PI_APPENDS


def test_cli_sync_conflict_then_prefer(diverged, db_url: str) -> None:
    _, path = diverged
    path.write_bytes(FILE + PI_APPENDS)
    folder = str(path.parent.parent)

    def sync(*more: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "store.cli", "--db", db_url, "sync", folder, "--json", *more],
                              capture_output=True, text=True, timeout=120)

    conflict = sync()
    assert conflict.returncode == 1 and json.loads(conflict.stdout.splitlines()[0])["status"] == "conflict"
    kept = sync("--prefer", "store")
    assert kept.returncode == 0 and json.loads(kept.stdout.splitlines()[0])["status"] == "kept-store"
    replaced = sync("--prefer", "file")
    assert replaced.returncode == 0 and json.loads(replaced.stdout.splitlines()[0])["status"] == "replaced"


def test_a_path_whose_file_another_replaced_is_compared_with_what_the_session_holds(
        store: SessionStore, tmp_path: Path) -> None:
    """A imported, B (the same session, a line edited, the same size) put in its place with
    prefer="file", then A again: its path's record still said what A gave, and the import said
    "unchanged" (with prefer="file" too) while the store held B."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(FILE)
    b.write_bytes(FILE.replace(b"aaaaaaaa", b"aaaaaaab"))
    assert import_file(store, a).status == "imported"
    assert import_file(store, b, prefer="file").status == "replaced"
    with pytest.raises(ImportConflict):
        import_file(store, a)
    assert b"".join(store.iter_export(SID)) == b.read_bytes()
    assert import_file(store, a, prefer="file").status == "replaced"
    assert b"".join(store.iter_export(SID)) == a.read_bytes()
    assert import_file(store, a).status == "unchanged"


def test_an_import_that_replaces_a_session_waits_for_a_writers_batch(store: SessionStore, tmp_path: Path) -> None:
    """PostgreSQL: the import locked only an advisory lock of its own, not the session row the
    writers lock. Replacing a session while a batch held it deleted the committed rows but not
    the batch's, then set the session's last row below them: verify found rows past the end, and
    every later append failed on (session_pk, seq) (also deadlocks on activity_days). The import
    now locks the row first: it waits for the batch, then replaces what the batch left."""
    original, edited = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    original.write_bytes(FILE)
    edited.write_bytes(FILE.replace(b"bbbbbbbb", b"bbbbbbbc"))
    assert import_file(store, original).status == "imported"
    writer = store.open(SID)
    holding, done = threading.Event(), threading.Event()

    def batch() -> None:
        with writer.batch():
            for n in range(3):
                writer.append_message({"role": "user", "content": f"in the batch {n}", "timestamp": n})
            writer.get_entries()  # the rows are sent: the transaction holds them
            holding.set()
            time.sleep(1.0)
        done.set()

    thread = threading.Thread(target=batch)
    thread.start()
    assert holding.wait(60)
    report = import_file(store, edited, prefer="file")
    thread.join(60)
    assert done.is_set() and report.status == "replaced"
    assert b"".join(store.iter_export(SID)) == edited.read_bytes()  # the batch committed first, then the file
    assert verify_session(store, SID).ok
    store.open(SID).append_message({"role": "user", "content": "after", "timestamp": 9})
