"""``kill -9`` of an import while its worker process reads a big file leaves nothing behind: the
worker dies too, and on PostgreSQL no connection stays "idle in transaction" holding the session's
import lock, so the next import of that file goes through."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from store.db.engine import write_transaction
from store.interchange import importing
from store.interchange.reading import WORKER_MIN_BYTES
from store.interchange.syncing import import_one
from store.session_store import SessionStore
from tests.interchange.test_oddities import HEADER, SID
from tests.interchange.test_sync import _big_session, cli


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as listing:
        return [int(child) for child in listing.read().split()]


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as info:
            return info.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has exited
    except FileNotFoundError:
        return True


def _wait(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_kill_9_mid_read_leaves_no_worker_and_no_lock(db_url: str, tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    _big_session(path, WORKER_MIN_BYTES // 1000 + 2000)
    assert path.stat().st_size >= WORKER_MIN_BYTES  # read in a forked worker
    importing = subprocess.Popen(cli(db_url, "import", str(path), "--json", "--progress", "json"),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert importing.stderr is not None
    for line in importing.stderr:  # the worker has sent rows: the import's transaction is open
        if line.startswith("{") and json.loads(line)["progress"]["bytes"] > 0:
            break
    workers = _children(importing.pid)
    assert workers, "no worker process"
    os.kill(importing.pid, signal.SIGKILL)
    importing.wait(timeout=30)
    assert _wait(lambda: all(_gone(pid) for pid in workers), 5.0), f"worker(s) {workers} outlived the import"
    if db_url.startswith("postgresql"):
        engine = create_engine(db_url)
        try:
            def idle_in_transaction() -> int:
                with engine.connect() as conn:
                    return conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                             " AND state LIKE 'idle in transaction%'")).scalar_one()

            assert _wait(lambda: idle_in_transaction() == 0, 5.0)
        finally:
            engine.dispose()
    again = subprocess.run(cli(db_url, "import", str(path), "--json"), capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.splitlines()[0])["status"] == "imported"


def test_a_held_import_lock_is_waited_for_a_bounded_time(store: SessionStore, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL: a connection that holds a session's import lock (a stuck process) makes the next
    import of that session fail with a clear message after ``LOCK_WAIT_SECONDS``, not wait forever."""
    if store.engine.dialect.name != "postgresql":
        pytest.skip("SQLite imports wait for the database's write lock (busy timeout), not an advisory lock")
    path = tmp_path / "s.jsonl"
    path.write_bytes(HEADER + b"\n")
    monkeypatch.setattr(importing, "LOCK_WAIT_SECONDS", 0.5)
    with write_transaction(store.engine) as holder:
        importing._lock(holder, path, SID)  # the stuck import
        started = time.monotonic()
        report = import_one(store, path)
        assert time.monotonic() - started < 10
    assert report.status == "failed"
    assert f"{path}: session {SID}: another import of this session has held its lock for more than 0.5 s" \
        in report.error
    assert import_one(store, path).status == "imported"  # the lock is free again
