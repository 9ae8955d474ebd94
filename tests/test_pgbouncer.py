"""The PostgreSQL store through a real PgBouncer in transaction mode (``pooler=transaction``), its
server pool smaller than the number of clients, so consecutive transactions of one client run on
different server connections and other clients' transactions on the same one: nothing may be
carried from one transaction to the next (settings, prepared statements, cursors, locks).

The schema is created through the pooler; then one client walks the API (create, append,
branch, batch, an optimistic conflict, claims, import and export, search, read-only SQL, list,
stats), eight threads of one store write and read at once while a read-only viewer engine reads,
and two real ``pi-store sync`` processes import one folder at once beside a ``pi-store sql``. Skipped,
loudly, when PgBouncer cannot start (the reason names what failed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from store.analysis.readonly import QueryFailed, run_sql
from store.errors import SessionChanged, SessionClaimed
from store.session_store import SessionStore
from store.web.data import readonly_engine
from tests.conftest import scratch_pg_database, skip_loudly
from tests.oracle_support import FIXTURES
from tests.pgbouncer_support import PgBouncerUnavailable, admin_rows, running_pgbouncer
from tests.writers_support import Workload, check_writers, run_writers

SERVER_POOL = 2  # server connections PgBouncer keeps per database and user
SESSIONS = sorted((FIXTURES / "sessions").glob("small-seed*-0.jsonl"))[:6]
WALK_FILE = FIXTURES / "sessions" / "medium-seed1-0.jsonl"


@dataclass(frozen=True)
class Bouncer:
    url: str  # through PgBouncer, with pooler=transaction
    bare_url: str  # through PgBouncer, without the option
    direct: str  # the server itself
    database: str
    log: Path


@pytest.fixture(scope="module")
def bouncer() -> Iterator[Bouncer]:
    with scratch_pg_database("pi_store_pgbouncer") as direct, ExitStack() as stack:
        try:
            bare, log = stack.enter_context(running_pgbouncer(direct, pool_size=SERVER_POOL))
        except PgBouncerUnavailable as exc:
            skip_loudly("PgBouncer tests", f"PgBouncer could not start: {exc}")
        url = make_url(bare).update_query_dict({"pooler": "transaction"}).render_as_string(hide_password=False)
        SessionStore.connect(url).close()  # the migrations, through the pooler too
        yield Bouncer(url, bare, direct, make_url(direct).database, log)


def pool_row(bouncer: Bouncer) -> dict:
    return next(r for r in admin_rows(bouncer.url, "SHOW POOLS") if r["database"] == bouncer.database)


def test_without_the_option_the_error_says_what_to_add(bouncer: Bouncer) -> None:
    with pytest.raises(OperationalError) as caught:
        SessionStore.connect(bouncer.bare_url)
    assert "unsupported startup parameter: options" in str(caught.value)
    assert "add pooler=transaction to the URL" in str(caught.value)


def test_one_client_walks_the_api(bouncer: Bouncer, tmp_path: Path) -> None:
    with SessionStore.connect(bouncer.url) as store:
        sm = store.create("/pgbouncer/walk")
        root = sm.append_message({"role": "user", "content": "which zebra?"})
        sm.append_message({"role": "assistant", "content": [{"type": "text", "text": "plan A"}]})
        sm.branch(root)
        b = sm.append_message({"role": "assistant", "content": [{"type": "text", "text": "plan B"}]})
        with sm.batch():
            batched = [sm.append_message({"role": "user", "content": f"batched {i}"}) for i in range(20)]
        assert sm.get_branch_ids() == [root, b, *batched]
        for i in range(12):  # more than psycopg's prepare threshold (5) on each pooled connection
            sm.append_message({"role": "user", "content": f"single {i}"})

        stale = store.open(sm.get_session_id())
        sm.append_message({"role": "user", "content": "moves the version"})
        with pytest.raises(SessionChanged):
            stale.append_message({"role": "user", "content": "from a stale view"})
        stale.refresh()
        stale.append_message({"role": "user", "content": "after refresh"})
        sm.refresh()

        claim = sm.claim("host-a", ttl_ms=60_000)
        with pytest.raises(SessionClaimed):
            store.open(sm.get_session_id()).append_message({"role": "user", "content": "not the holder"})
        sm.append_message({"role": "user", "content": "the holder"})
        assert [c.token for c in store.claims()] == [claim.token]
        sm.release_claim()
        assert store.claims() == []

        imported = store.import_jsonl(WALK_FILE)
        store.export_jsonl(imported, tmp_path / "out.jsonl")
        assert (tmp_path / "out.jsonl").read_bytes() == WALK_FILE.read_bytes()

        assert [h.entry_id for h in store.search("zebra")] == [root]
        for _ in range(3):  # each call a transaction of its own, several batches each
            many = run_sql(store.engine, "SELECT n FROM generate_series(1, 7000) AS n")
            assert len(many.rows) == 7000
        assert run_sql(store.engine, "SELECT count(*) FROM sessions").rows == [(2,)]
        with pytest.raises(QueryFailed, match="read-only"):
            run_sql(store.engine, "SELECT * FROM sessions FOR UPDATE")
        assert {s.id for s in store.list_all()} == {sm.get_session_id(), imported}
        assert store.stats(sm.get_session_id()).total_messages == 38


def test_settings_hold_in_every_transaction(bouncer: Bouncer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The timeouts are set in each transaction (no startup options through a pooler), on the
    SQLAlchemy path and on the single-append driver path, whichever server connection it gets."""
    monkeypatch.setenv("PI_STORE_LOCK_TIMEOUT", "1")
    url = make_url(bouncer.url).update_query_dict({"statement_timeout": "2"})
    with SessionStore.connect(url.render_as_string(hide_password=False)) as store:
        with store.engine.connect() as conn:
            for _ in range(3):
                settings = conn.execute(
                    text(
                        "SELECT current_setting('lock_timeout'), "
                        "current_setting('statement_timeout'), current_setting('application_name')"
                    )
                )
                assert settings.one() == ("1s", "2s", "pi-store")
                conn.commit()
            with pytest.raises(OperationalError, match="timed out: canceling statement due to statement timeout"):
                conn.execute(text("SELECT pg_sleep(5)"))
        sm = store.create("/pgbouncer/locked")
        sm.append_message({"role": "user", "content": "before the lock"})
        holder = create_engine(bouncer.direct)
        with holder.begin() as locking:  # released by the server after 10 s if the append never gives up
            locking.execute(text("SET LOCAL idle_in_transaction_session_timeout = '10s'"))
            locking.execute(text("SELECT 1 FROM sessions WHERE session_id = :s FOR UPDATE"), {"s": sm.get_session_id()})
            started = time.monotonic()
            with pytest.raises(OperationalError, match="lock timeout"):
                sm.append_message({"role": "user", "content": "waits 1 s for the row lock, then gives up"})
            assert time.monotonic() - started < 10
        holder.dispose()
        sm.refresh()
        sm.append_message({"role": "user", "content": "after the lock"})
        assert len(sm.get_entries()) == 2


def test_threads_share_few_server_connections(bouncer: Bouncer) -> None:
    workload = Workload()
    with SessionStore.connect(bouncer.url) as store:
        held, pids = threading.Barrier(workload.threads + 1), []

        def hold_a_client_connection() -> None:
            with store.engine.connect() as conn:
                held.wait(timeout=30)  # every thread's client connection open at once ...
                held.wait(timeout=30)  # ... while the pools were read
                for _ in range(3):
                    pids.append(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
                    conn.commit()

        threads = [threading.Thread(target=hold_a_client_connection) for _ in range(workload.threads)]
        for thread in threads:
            thread.start()
        held.wait(timeout=30)
        pool = pool_row(bouncer)
        held.wait(timeout=30)
        for thread in threads:
            thread.join(timeout=60)
        assert pool["cl_active"] + pool["cl_waiting"] >= workload.threads
        assert len(pids) == 3 * workload.threads and len(set(pids)) <= SERVER_POOL

        viewer = readonly_engine(bouncer.url)  # reads beside the writers, never turns them read-only
        stop = threading.Event()

        def view() -> None:
            while not stop.is_set():
                with viewer.connect() as conn:
                    conn.execute(text("SELECT count(*) FROM entries")).scalar_one()

        reader = threading.Thread(target=view)
        reader.start()
        try:
            shared_id, root, writers = run_writers(store, workload)
        finally:
            stop.set()
            reader.join(timeout=60)
        check_writers(store, workload, shared_id, root, writers)
        with viewer.connect() as conn, pytest.raises(Exception, match="read-only transaction"):
            conn.execute(text("DELETE FROM entries"))
        viewer.dispose()
    servers = [r for r in admin_rows(bouncer.url, "SHOW SERVERS") if r["database"] == bouncer.database]
    assert 1 <= len(servers) <= SERVER_POOL


def pi_store(url: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "store.cli", "--db", url, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, (process.args, err)
    return out


def test_processes_sync_and_read_at_once(bouncer: Bouncer, tmp_path: Path) -> None:
    folder = tmp_path / "sessions" / "--work--"
    folder.mkdir(parents=True)
    for path in SESSIONS:
        shutil.copy(path, folder)
    syncs = [pi_store(bouncer.url, "sync", str(tmp_path / "sessions"), "--json") for _ in range(2)]
    reader = pi_store(bouncer.url, "sql", "SELECT count(*) AS n FROM sessions", "--json")
    totals = [json.loads(finished(p).splitlines()[-1])["summary"] for p in syncs]
    assert json.loads(finished(reader))[0]["n"] >= 0
    assert sum(t["statuses"].get("imported", 0) for t in totals) == len(SESSIONS)  # each file by one sync
    assert [t["failed"] for t in totals] == [0, 0]
    with SessionStore.connect(bouncer.url) as store:
        for path in SESSIONS:  # stored once, byte for byte, whichever sync took it
            session_id = json.loads(path.read_text().splitlines()[0])["id"]
            assert b"".join(store.iter_export(session_id)) == path.read_bytes()
        assert {r.status for r in store.import_path(tmp_path / "sessions")} == {"unchanged"}
    verify = finished(pi_store(bouncer.url, "verify", "--all"))
    assert verify.count("identical") >= len(SESSIONS)


def test_fts_rebuild_waits_no_longer_than_the_lock_timeout(bouncer: Bouncer) -> None:
    """Behind the pooler the rebuild's connection carries no lock_timeout (and REINDEX
    CONCURRENTLY cannot run in a transaction, where SET LOCAL would hold it): with a write
    transaction left open it waited without end. A watcher cancels it after the lock timeout —
    the REINDEX and the DROP of the copy a stopped rebuild leaves — and it says so in one line."""
    import os

    import psycopg

    with SessionStore.connect(bouncer.url) as store:
        store.import_file(WALK_FILE)
    plain = make_url(bouncer.direct).set(drivername="postgresql").render_as_string(hide_password=False)
    rebuild = [sys.executable, "-m", "store.cli", "--db", bouncer.url, "fts", "rebuild"]
    with psycopg.connect(plain) as writer:
        writer.execute("LOCK TABLE entries IN ROW EXCLUSIVE MODE")  # an open write transaction
        for _ in range(2):  # the second drops the first's invalid copy first: that waits too
            started = time.monotonic()
            done = subprocess.run(rebuild, capture_output=True, text=True, timeout=60,
                                  env={**os.environ, "PI_STORE_LOCK_TIMEOUT": "1"})
            assert done.returncode == 1 and done.stderr.startswith("Error: database is locked"), done.stderr
            assert len(done.stderr.strip().splitlines()) == 1 and time.monotonic() - started < 30
        writer.rollback()
    verify = pi_store(bouncer.url, "verify", "--all")
    out, _ = verify.communicate(timeout=120)
    assert verify.returncode == 1 and "left by a stopped `pi-store fts rebuild`" in out, out
    finished(pi_store(bouncer.url, "fts", "rebuild"))
    assert "database: ok" in finished(pi_store(bouncer.url, "verify", "--all"))


def test_read_only_sql_leaves_no_session_lock_on_the_server_connection(bouncer: Bouncer) -> None:
    """``pg_advisory_lock`` may run in a read-only transaction and outlives its ROLLBACK: behind
    the pooler the server connection went back to the pool still holding the lock (an import of
    a session whose lock key it was would then have waited for it). ``pi-store sql`` ends by
    releasing every session-level advisory lock of its connection."""
    for statement in ("SELECT pg_advisory_lock(4242)::text", "SELECT pg_try_advisory_lock_shared(4243)",
                      "SELECT pg_advisory_lock(4244)::text, 1/0"):
        with pytest.raises(QueryFailed) if "1/0" in statement else ExitStack():
            run_sql(readonly_engine(bouncer.url), statement)
    with create_engine(bouncer.direct).connect() as conn:
        held = conn.execute(text("SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND objid IN "
                                 "(4242, 4243, 4244)")).scalars().all()
    assert held == []
