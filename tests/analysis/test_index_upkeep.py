"""Migration 0003 on a database that already holds sessions, and the index commands: what was
stored before the analysis columns existed is computed on upgrade, and rebuilding changes nothing
a search sees."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from alembic import command
from sqlalchemy import make_url, text

from store.analysis import fts
from store.analysis.backfill import recompute_analysis
from store.db.engine import alembic_config, is_sqlite, make_engine, read_transaction, write_transaction
from store.interchange.verifying import check_database
from store.session_store import SessionStore
from tests.conftest import scratch_pg_database
from tests.oracle_support import FIXTURES

FILES = [FIXTURES / "sessions" / name for name in ("small-seed1-0.jsonl", "medium-seed2-0.jsonl", "legacy-v1.jsonl")]
SNAPSHOT = ("SELECT session_id, entry_id, seq, role, text, cost, on_path FROM messages "
            "ORDER BY session_id, seq")


def snapshot(store: SessionStore) -> tuple:
    with read_transaction(store.engine) as conn:
        messages = [tuple(r) for r in conn.execute(text(SNAPSHOT))]
        calls = conn.execute(text("SELECT count(*), sum(result_chars) FROM tool_calls")).one()
    stats = store.stats()
    return messages, tuple(calls), stats.tokens, round(stats.cost, 9), [h.entry_id for h in store.search("the")]


def test_upgrade_computes_the_analysis_of_stored_rows(db_url: str) -> None:
    with SessionStore.connect(db_url) as store:
        for path in FILES:
            store.import_file(path)
        before = snapshot(store)
    engine = make_engine(db_url)
    config = alembic_config(engine)
    command.downgrade(config, "0002")  # the rows stay, their analysis columns go
    command.upgrade(config, "head")
    engine.dispose()
    with SessionStore.connect(db_url) as store:
        assert snapshot(store) == before
        assert before[0] and before[4]


def test_rebuild_and_recompute_restore_answers(store: SessionStore) -> None:
    for path in FILES:
        store.import_file(path)
    before = snapshot(store)
    if is_sqlite(store.engine):  # an index that lost its contents (PostgreSQL's GIN cannot be emptied so)
        fts.sync(store.engine)
        with write_transaction(store.engine) as conn:
            conn.execute(text("INSERT INTO entries_fts (entries_fts) VALUES ('delete-all')"))
        assert store.search("the") == []
    assert fts.rebuild(store.engine) > 100
    assert snapshot(store) == before
    with write_transaction(store.engine) as conn:  # analysis columns computed by an older rule
        conn.execute(text("UPDATE entries SET search_text = '', facts = '{}', has_usage = 0, usage_cost = 0"))
    assert snapshot(store) != before
    with write_transaction(store.engine) as conn:
        assert recompute_analysis(conn) > 100
    assert snapshot(store) == before


def test_sqlite_index_catches_up_and_forgets_deleted_rows(tmp_path) -> None:
    with SessionStore.connect(f"sqlite:///{tmp_path / 'fts.db'}") as store:
        store.import_file(FILES[0])
        with read_transaction(store.engine) as conn:
            assert fts.pending(conn) > 0  # imported, not indexed yet
        assert fts.sync(store.engine) > 10
        assert fts.sync(store.engine) == 0
        sm = store.create("/w")
        sm.append_message({"role": "user", "content": "unique marmot words", "timestamp": 1})
        with read_transaction(store.engine) as conn:
            assert fts.pending(conn) > 0
        assert [h.entry_id for h in store.search("marmot")]
        doomed = sm.get_session_id()
        with write_transaction(store.engine) as conn:  # delete the newest session by hand
            conn.execute(text("DELETE FROM sessions WHERE session_id = :s"), {"s": doomed})
            assert conn.execute(text("SELECT indexed_pk FROM fts_watermark")).scalar() == conn.execute(
                text("SELECT max(pk) FROM entries")).scalar()  # lowered to the rows that remain
        assert store.search("marmot") == []
        again = store.create("/w")  # takes the keys the deleted rows had
        fresh = again.append_message({"role": "user", "content": "marmot again", "timestamp": 2})
        assert [h.entry_id for h in store.search("marmot")] == [fresh]
        with write_transaction(store.engine) as conn:  # raises when the index disagrees with search_text
            conn.execute(text("INSERT INTO entries_fts (entries_fts, rank) VALUES ('integrity-check', 1)"))


def test_cli_fts_commands(store: SessionStore, db_url: str) -> None:
    store.import_file(FILES[0])

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "store.cli", "--db", db_url, "fts", *args],
                              capture_output=True, text=True, timeout=120)

    synced = cli("sync")
    assert synced.returncode == 0 and synced.stdout.startswith("indexed ")
    rebuilt = cli("rebuild", "--recompute")
    assert rebuilt.returncode == 0 and "recomputed" in rebuilt.stdout and "indexed" in rebuilt.stdout
    if is_sqlite(store.engine):
        assert int(synced.stdout.split()[1]) > 0


def test_cli_import_leaves_the_sqlite_index_current(tmp_path) -> None:
    """Readers outside pi-store (sqlite3, Datasette) see an index that includes what was imported."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    done = subprocess.run([sys.executable, "-m", "store.cli", "--db", url, "import", *map(str, FILES)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with SessionStore.connect(url) as store, read_transaction(store.engine) as conn:
        assert fts.pending(conn) == 0
        assert conn.execute(text("SELECT count(*) FROM entries_fts WHERE entries_fts MATCH 'the'")).scalar() > 10


def test_a_postgresql_rebuild_lets_writers_and_searches_go_on(tmp_path) -> None:
    """``REINDEX CONCURRENTLY``: while the rebuild waits for a transaction that was writing to
    ``entries`` when it began, an append and a search go through (a plain ``REINDEX`` queued a
    lock that held both until the writer ended); an invalid copy a stopped rebuild left is dropped,
    and the rebuilt index finds what was appended meanwhile."""
    import psycopg

    with scratch_pg_database("pi_store_rebuild") as url, SessionStore.connect(url) as store:
        store.import_file(FILES[0])
        sm = store.create("/w")
        sm.append_message({"role": "user", "content": "before the rebuild", "timestamp": 1})
        plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(plain, autocommit=True) as admin:  # what a stopped rebuild leaves behind
            admin.execute("CREATE INDEX ix_entries_search_words_ccnew ON entries (seq)")
            admin.execute("UPDATE pg_index SET indisvalid = false "
                          "WHERE indexrelid = 'ix_entries_search_words_ccnew'::regclass")
        writer = psycopg.connect(plain)
        writer.execute("LOCK TABLE entries IN ROW EXCLUSIVE MODE")  # a write transaction, left open
        rebuilt: list[int] = []
        rebuilding = threading.Thread(target=lambda: rebuilt.append(fts.rebuild(store.engine)))
        rebuilding.start()
        try:
            with psycopg.connect(plain, autocommit=True) as watcher:
                deadline = time.monotonic() + 60
                while not watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                          "AND (query LIKE 'REINDEX%' OR query LIKE 'DROP INDEX%')").fetchone()[0]:
                    assert time.monotonic() < deadline and rebuilding.is_alive(), "the rebuild never waited"
                    time.sleep(0.05)
            appended: list[str] = []
            appending = threading.Thread(target=lambda: appended.append(
                sm.append_message({"role": "user", "content": "during the rebuild", "timestamp": 2})))
            appending.start()
            appending.join(30)
            assert appended, "the append waited for the rebuild"
            assert [h.entry_id for h in store.search("before")] == [sm.get_branch()[0]["id"]]
        finally:
            writer.rollback()
            writer.close()
            rebuilding.join(120)
        assert rebuilt and rebuilt[0] > 10
        assert [h.entry_id for h in store.search("during")] == [appended[0]]
        with store.engine.connect() as conn:
            indexes = conn.execute(text("SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c "
                                        "ON c.oid = i.indexrelid WHERE c.relname LIKE 'ix_entries_search%'")).all()
        assert indexes == [("ix_entries_search_words", True)]


def test_a_postgresql_rebuild_held_past_the_lock_timeout_fails_in_one_line_and_the_next_cleans_up() -> None:
    """It waits for open write transactions up to PI_STORE_LOCK_TIMEOUT, as writers do (no wait
    without end), and says so; the invalid copy it leaves is dropped by the next rebuild."""
    import os

    import psycopg

    with scratch_pg_database("pi_store_rebuild_timeout") as url, SessionStore.connect(url) as store:
        store.import_file(FILES[0])
        plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        cli = [sys.executable, "-m", "store.cli", "--db", url, "fts", "rebuild"]
        with psycopg.connect(plain) as writer:
            writer.execute("LOCK TABLE entries IN ROW EXCLUSIVE MODE")  # an open write transaction
            done = subprocess.run(cli, capture_output=True, text=True, timeout=120,
                                  env={**os.environ, "PI_STORE_LOCK_TIMEOUT": "1"})
            writer.rollback()
        assert done.returncode == 1 and "lock timeout" in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        with store.engine.connect() as conn:  # the copy it began, left invalid
            assert conn.execute(text("SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                                     "WHERE c.relname = 'ix_entries_search_words_ccnew' "
                                     "AND NOT i.indisvalid")).scalar() == 1
        again = subprocess.run(cli, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        with store.engine.connect() as conn:
            indexes = conn.execute(text("SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c "
                                        "ON c.oid = i.indexrelid WHERE c.relname LIKE 'ix_entries_search%'")).all()
        assert indexes == [("ix_entries_search_words", True)]


def test_verify_tells_a_rebuild_in_progress_from_one_that_stopped() -> None:
    """``verify --all`` called the copy ``REINDEX CONCURRENTLY`` builds (invalid until it is done)
    damage, and said to REINDEX it, while the rebuild was only waiting for a writer; the copy a
    stopped rebuild leaves is reported with the command that drops it."""
    import os

    import psycopg

    with scratch_pg_database("pi_store_rebuild_verify") as url, SessionStore.connect(url) as store:
        store.import_file(FILES[0])
        plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        rebuild = [sys.executable, "-m", "store.cli", "--db", url, "fts", "rebuild"]
        with psycopg.connect(plain) as writer, psycopg.connect(plain, autocommit=True) as watcher:
            writer.execute("LOCK TABLE entries IN ROW EXCLUSIVE MODE")  # an open write transaction
            rebuilding = subprocess.Popen(rebuild, stderr=subprocess.PIPE, text=True,
                                          env={**os.environ, "PI_STORE_LOCK_TIMEOUT": "20"})
            deadline = time.monotonic() + 15
            while not watcher.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                      "AND query LIKE 'REINDEX%'").fetchone()[0]:
                assert time.monotonic() < deadline, "the rebuild never waited"
                time.sleep(0.05)
            building = check_database(store)
            assert building.ok and "being rebuilt" in building.checks[0], building.describe()
            watcher.execute("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE 'REINDEX%'")
            assert rebuilding.wait(60) == 1  # stopped: its copy stays, invalid
            writer.rollback()
        stopped = check_database(store)
        assert stopped.problems == ["invalid index(es) ix_entries_search_words_ccnew left by a stopped "
                                    "`pi-store fts rebuild`: run it again (it drops them)"]
        assert subprocess.run(rebuild, capture_output=True, timeout=120).returncode == 0
        assert check_database(store).ok
