"""Folder imports on PostgreSQL store several files at once (``store.interchange.syncing``,
``jobs``): the reports, their order and what is stored are those of one file at a time, with
files that share a session id kept in file order and a failing file failing alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import text

from store.db.engine import BadSetting, read_transaction
from store.interchange.syncing import default_jobs, import_jobs, import_paths, start_after
from store.session_store import SessionStore
from tests.conftest import scratch_pg_database
from tests.oracle_support import FIXTURES


def _folder(tmp_path: Path) -> Path:
    """The fixture sessions (some share a session id: the first in file order is stored, the
    others are conflicts), pairs of files of one session side by side, a damaged file in the
    middle and a file that is not a session."""
    folder = tmp_path / "sessions" / "--w--"
    folder.mkdir(parents=True)
    for path in sorted((FIXTURES / "sessions").glob("*.jsonl")):
        shutil.copyfile(path, folder / path.name)
    for index, path in enumerate(sorted((FIXTURES / "sessions").glob("*seed*.jsonl"))[:40]):
        lines = path.read_bytes().splitlines(keepends=True)  # two files of one session, next to each other:
        (folder / f"pair-{index:02}-a.jsonl").write_bytes(b"".join(lines))  # which one is stored first
        (folder / f"pair-{index:02}-b.jsonl").write_bytes(b"".join(lines[:-1]))  # decides both statuses
    long_header = lines[0].replace(b'"cwd":"', b'"cwd":"/' + b"x" * 70_000, 1)  # a header past 64 KiB:
    (folder / "pair-99-a.jsonl").write_bytes(long_header + b"".join(lines[1:]))  # its session is not read
    (folder / "pair-99-b.jsonl").write_bytes(b"".join(lines[:-1]))  # ahead of time; the same session
    (folder / "m-damaged.jsonl").write_bytes(b'{"type":"session","version":3,"id":"dmg","timestamp":"x","cwd":"/"}\n'
                                             b'{"type":"message","id":"a","parentId":null,"message":{\n')
    (folder / "n-notes.jsonl").write_bytes(b'{"just": "notes"}\n')
    return folder.parent


def _stored(store: SessionStore) -> list[tuple]:
    """Every session and row, by session id and seq (keys differ with the order of the writes)."""
    with read_transaction(store.engine) as conn:
        sessions = conn.execute(text(
            "SELECT session_id, cwd, entry_count, message_count, leaf_seq, source_sha256, off_path_messages "
            "FROM sessions ORDER BY session_id")).all()
        rows = conn.execute(text(
            "SELECT s.session_id, e.seq, e.line, e.raw, e.parent_seq, e.superseded FROM entries AS e "
            "JOIN sessions AS s ON s.pk = e.session_pk ORDER BY s.session_id, e.seq")).all()
        pairs = conn.execute(text(
            "SELECT s.session_id, p.call_seq, p.call_index, p.result_seq, p.path FROM tool_call_pairs AS p "
            "JOIN sessions AS s ON s.pk = p.session_pk ORDER BY 1, 2, 3")).all()
    return [tuple(r) for r in (*sessions, *rows, *pairs)]


def test_several_files_at_once_store_what_one_at_a_time_does(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    results = []
    for jobs in (1, 4):
        with scratch_pg_database("pi_store_jobs") as url, SessionStore.connect(url) as store:
            started: list[int] = []
            reports = list(import_paths(store, [folder], jobs=jobs, strict=True,
                                        on_file=lambda index, _path, started=started: started.append(index)))
            results.append(([(r.path, r.status, r.session_id, r.lines) for r in reports], sorted(started),
                            _stored(store)))
    (serial, serial_started, serial_rows), (parallel, parallel_started, parallel_rows) = results
    assert parallel == serial and parallel_started == serial_started == list(range(len(serial)))
    assert parallel_rows == serial_rows
    statuses = {status for _path, status, _sid, _lines in serial}
    assert {"imported", "conflict", "refused", "not-session"} <= statuses, statuses


def test_jobs_default_by_engine(tmp_path: Path, monkeypatch) -> None:
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        monkeypatch.setenv("PI_STORE_IMPORT_JOBS", "4")
        assert default_jobs(store) == 1  # one writer at a time
    with scratch_pg_database("pi_store_jobs") as url, SessionStore.connect(url) as store:
        assert default_jobs(store) == 4
        for bad in ("zero", "0", "-1"):  # refused with its name, as every other setting (it fell back before)
            monkeypatch.setenv("PI_STORE_IMPORT_JOBS", bad)
            with pytest.raises(BadSetting, match=f"PI_STORE_IMPORT_JOBS must be a whole number of at least 1, "
                                                 f"not '{bad}'"):
                default_jobs(store)
        monkeypatch.delenv("PI_STORE_IMPORT_JOBS")
        assert default_jobs(store) == 2


def test_no_more_files_at_once_than_the_pool_has_connections(tmp_path: Path) -> None:
    """Eight jobs on a pool of one connection import one file at a time (a thread waiting for a
    connection past the pool's timeout would fail its file); SQLite always one."""
    with scratch_pg_database("pi_store_jobs") as url:
        with SessionStore.connect(url + "?pool_size=1&max_overflow=0") as store:
            assert import_jobs(store, 8) == 1
            assert list(import_paths(store, [_folder(tmp_path)], jobs=8))
        with SessionStore.connect(url + "?pool_size=2&max_overflow=1") as store:
            assert (import_jobs(store, 8), import_jobs(store, None), import_jobs(store, 0)) == (3, 2, 1)
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        assert import_jobs(store, 8) == 1


def test_files_of_one_session_and_unknown_sessions_wait_for_each_other() -> None:
    """What each file waits for: its session's previous file and the last file whose session was
    not known ahead (a header past 64 KiB, no header), which waits for every file before it."""
    assert start_after(["a", "b", "a", None, "b", "c", None, "a"]) == [
        [], [], [0], [0, 1, 2], [1, 3], [3], [3, 4, 5], [2, 6]]
    assert start_after([]) == [] and start_after([None, None]) == [[], [0]]



def test_ctrl_c_stops_the_files_being_stored_instead_of_waiting_for_them(tmp_path: Path) -> None:
    """The pool's threads went on with the files they had started, and the command ended only when
    the biggest was stored (12 s after Ctrl-C for a 67 MB file), storing files it never reported."""
    import json
    import signal
    import subprocess

    from tests.interchange.test_sync import _big_session, cli

    folder = tmp_path / "sessions" / "--w--"
    folder.mkdir(parents=True)
    shutil.copyfile(FIXTURES / "sessions" / "small-seed7-0.jsonl", folder / "a.jsonl")
    _big_session(folder / "b.jsonl", 40_000)  # 40 MB: seconds of work on any machine
    with scratch_pg_database("pi_store_stop") as url:
        process = subprocess.Popen(cli(url, "import", str(folder.parent), "--json"), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        try:
            assert process.stdout is not None
            first = json.loads(process.stdout.readline())  # a.jsonl stored: b.jsonl is being stored
            assert first["status"] == "imported" and first["path"].endswith("a.jsonl"), first
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=120)
        finally:
            process.kill()
        assert process.returncode == 130, err
        with SessionStore.connect(url) as store:
            assert [info.id for info in store.list_all()] == [first["sessionId"]]  # b.jsonl rolled back
