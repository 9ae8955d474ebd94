"""Alembic owns the schema: upgrade from empty and downgrade to nothing on both engines, the
migrated schema equals the models, and the path query walks by index (no table scan per step)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from store.analysis import include_name
from store.db import queries, session_times
from store.db.engine import alembic_config, head_revision, make_engine, read_transaction, stored_revision
from store.db.schema import metadata
from store.errors import StoreError
from store.session_store import SessionStore
from tests.oracle_support import FIXTURES


def test_upgrade_from_empty_then_downgrade_to_base(db_url: str) -> None:
    engine = make_engine(db_url)
    config = alembic_config(engine)
    command.upgrade(config, "head")
    assert {"sessions", "entries"} <= set(inspect(engine).get_table_names())
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_name": include_name})  # FTS etc. are by hand
        assert compare_metadata(context, metadata) == []
    command.downgrade(config, "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    command.upgrade(config, "head")  # and back: the migration is repeatable
    engine.dispose()


def test_schema_appears_on_first_use_when_the_url_holds_percent_escapes(db_url: str, tmp_path: Path) -> None:
    """A URL's "%" (an escaped space in libpq ``options``, a folder named "100%") reaches Alembic's
    config, which read it as the start of an interpolation: the first write failed."""
    if db_url.startswith("sqlite"):
        (tmp_path / "100%").mkdir()
        url = f"sqlite:///{tmp_path / '100%' / 'store.db'}"
    else:
        url = f"{db_url}?options=-c%20work_mem%3D8MB"
    with SessionStore.connect(url) as store:
        store.create("/p").append_message({"role": "user", "content": "hi"})
        assert len(store.list_all()) == 1
        if not db_url.startswith("sqlite"):
            with store.engine.connect() as conn:
                assert conn.exec_driver_sql("SHOW work_mem").scalar() == "8MB"
    assert stored_revision(make_engine(url)) == head_revision()


def test_schema_appears_on_first_use(db_url: str) -> None:
    with SessionStore.connect(db_url) as store:
        assert store.list_all() == []
    with SessionStore.connect(db_url) as store:  # second open: already at head, nothing to do
        assert store.list_all() == []


def test_processes_that_start_on_an_empty_database_at_once_wait_for_one_another(db_url: str) -> None:
    """Each brings the schema to head on first use: they once failed at once (SQLite: "database
    is locked", a read transaction that then wanted to write; PostgreSQL: a unique violation in
    the catalog, two creating the same types) in 2 or 3 of every 4. One migrates, the others
    wait for its lock and find the schema at head."""
    session = FIXTURES / "sessions" / "small-seed1-0.jsonl"
    command = [sys.executable, "-m", "store.cli", "--db", db_url, "import", str(session)]
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
    results = [(process.wait(timeout=300), process.stderr.read()) for process in processes]
    for process in processes:
        process.stdout.close()
        process.stderr.close()
    assert [code for code, _ in results] == [0] * 4, results
    assert stored_revision(make_engine(db_url)) == head_revision()


def test_path_query_plan_uses_indexes_only(tmp_path) -> None:
    """SQLite must look rows up by (session_pk, seq), never scan ``entries`` inside the recursion."""
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        sm = store.create("/w")
        sm.append_message({"role": "user", "content": "x"})
        with read_transaction(store.engine) as conn:
            plan = conn.execute(text("EXPLAIN QUERY PLAN " + str(queries.PATH_RUNS)), {"spk": 1, "leaf": 1}).all()
        details = [row[-1] for row in plan]
        scans = [d for d in details if d.startswith("SCAN") and d.split()[1] not in ("w", "walk")]
        assert not scans, details  # only the recursive table itself is scanned
        assert any("USING INDEX" in d or "PRIMARY KEY" in d for d in details), details


def test_path_rows_reads_each_run_through_the_index(db_url: str) -> None:
    """``queries.path_rows`` reads each run of the path by a range of the (session_pk, seq) index
    whatever the table's statistics say: PostgreSQL planned the plain join, on a table not yet
    analysed after an import, as every run against all of the session's rows (a Join Filter)."""
    from sqlalchemy import event

    with SessionStore.connect(db_url) as store:
        sm = store.create("/w")
        for n in range(40):  # a comb: each branch point starts a run of its own
            point = sm.append_message({"role": "user", "content": f"on the path {n}"})
            sm.append_message({"role": "user", "content": f"a side branch {n}"})
            sm.branch(point)
        sm.append_message({"role": "user", "content": "the leaf"})
        seen: list[tuple] = []
        with read_transaction(store.engine) as conn:
            spk, leaf_seq = conn.execute(text("SELECT pk, leaf_seq FROM sessions")).one()
            event.listen(conn, "before_cursor_execute", lambda *args: seen.append((args[2], args[3])))
            rows = queries.path_rows(conn, spk, leaf_seq, "seq", "line")
            statement, parameters = seen[0]
            assert len(rows) == len(queries.path_runs(conn, spk, leaf_seq)) == 41  # a run per row
            if conn.dialect.name == "sqlite":
                details = [row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)]
                assert not [d for d in details if d.startswith("SCAN") and d.split()[1] not in ("w", "walk")], details
                return
            (plan,) = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, parameters).scalar_one()

    def nodes(node: dict) -> list[dict]:
        return [node, *(n for child in node.get("Plans", []) for n in nodes(child))]

    found = nodes(plan["Plan"])
    ranges = [n for n in found if "run_end" in n.get("Join Filter", "") + n.get("Index Cond", "")]
    assert ranges and all(n.get("Relation Name") == "entries" and "Index" in n["Node Type"] for n in ranges), ranges


def test_tool_call_pairs_migration_with_data(db_url: str) -> None:
    """Down to 0005 with sessions stored (the query-time view returns), then up again: 0006 pairs
    the stored tool calls and the view returns the same rows."""
    columns = ("session_id, entry_id, seq, call_index, tool_call_id, name, result_entry_id, result_seq, is_error, "
               "result_chars, on_path")
    query = text(f"SELECT {columns} FROM tool_calls ORDER BY session_id, seq, call_index")
    with SessionStore.connect(db_url) as store:
        for path in sorted((FIXTURES / "sessions").glob("*.jsonl"))[:30]:
            try:
                store.import_file(path)
            except StoreError:  # files sharing a session id: the first one stays
                continue
        with read_transaction(store.engine) as conn:
            kept = conn.execute(query).all()
        assert sum(1 for row in kept if row.result_seq is not None) > 10
        config = alembic_config(store.engine)
        command.downgrade(config, "0005")
        assert "tool_call_pairs" not in inspect(store.engine).get_table_names()
        with read_transaction(store.engine) as conn:
            assert conn.execute(query).all() == kept
        command.upgrade(config, "head")
        with read_transaction(store.engine) as conn:
            assert conn.execute(query).all() == kept
            assert conn.execute(text("SELECT count(*) FROM tool_call_pairs")).scalar_one() == len(kept)


def test_activity_migration_with_data(db_url: str) -> None:
    """0007 adds the ``activity`` view over stored sessions and takes only it away again: down to
    0006 the view is gone and the rest answers; up again it returns the same rows, which add up to
    the ``stats`` totals."""
    query = text("SELECT session_id, seq, day, cwd, source, provider, model, messages, tool_calls, tool_errors, "
                 "tokens, cost FROM activity ORDER BY session_id, seq")
    with SessionStore.connect(db_url) as store:
        for path in sorted((FIXTURES / "sessions").glob("*.jsonl"))[:30]:
            try:
                store.import_file(path)
            except StoreError:  # files sharing a session id: the first one stays
                continue
        with read_transaction(store.engine) as conn:
            kept = conn.execute(query).all()
        total = store.stats()
        assert len(kept) > 300
        assert sum(row.messages for row in kept) == total.total_messages
        assert sum(row.tool_calls for row in kept) == total.tool_calls > 10
        assert sum(row.tokens for row in kept) == total.tokens.total
        config = alembic_config(store.engine)
        command.downgrade(config, "0006")
        assert "activity" not in inspect(store.engine).get_view_names()
        assert "tool_calls" in inspect(store.engine).get_view_names()
        with read_transaction(store.engine) as conn:
            assert conn.execute(text("SELECT count(*) FROM tool_calls")).scalar_one() == total.tool_calls
        command.upgrade(config, "head")
        with read_transaction(store.engine) as conn:
            assert conn.execute(query).all() == kept


def test_current_path_migration_with_data(db_url: str) -> None:
    """0009 fills ``path_runs`` for the stored sessions and takes it away again: down to 0008 the
    recursive view returns the same path and ``on_path`` flags; up again, the table holds them."""
    query = text("SELECT session_pk, first_seq, last_seq FROM current_path ORDER BY session_pk, first_seq")
    flags = text("SELECT session_id, seq, on_path FROM messages ORDER BY session_id, seq")
    with SessionStore.connect(db_url) as store:
        for path in sorted((FIXTURES / "sessions").glob("*.jsonl"))[:30]:
            try:
                store.import_file(path)
            except StoreError:  # files sharing a session id: the first one stays
                continue
        with read_transaction(store.engine) as conn:
            kept, on_path = conn.execute(query).all(), conn.execute(flags).all()
            runs = conn.execute(text("SELECT count(*) FROM path_runs")).scalar_one()
        assert runs == len(kept) > 15 and 0 < sum(row.on_path for row in on_path) < len(on_path)
        config = alembic_config(store.engine)
        command.downgrade(config, "0008")
        assert "path_runs" not in inspect(store.engine).get_table_names()
        with read_transaction(store.engine) as conn:
            assert conn.execute(query).all() == kept
            assert conn.execute(flags).all() == on_path
        command.upgrade(config, "head")
        with read_transaction(store.engine) as conn:
            assert conn.execute(query).all() == kept
            assert conn.execute(flags).all() == on_path
            assert conn.execute(text("SELECT count(*) FROM path_runs")).scalar_one() == runs


def test_kept_totals_migration_with_data(db_url: str) -> None:
    """0011 fills ``usage_days``, ``tool_call_pairs.path`` and the off-path totals from the stored
    rows, and 0012 ``activity_days`` (``usage_days`` becoming its view) — the same figures the
    writes keep — and each takes them away again (0012's down: ``usage_days`` a table of the
    same rows)."""
    activity = text("SELECT session_pk, day, provider, model, messages, user_messages, assistant_messages, "
                    "tool_results, tool_calls, tool_errors, calls, input, round(cost * 1e9) FROM activity_days "
                    "ORDER BY session_pk, day, provider, model")
    totals = text("SELECT session_pk, day, provider, model, calls, input, output, cache_read, cache_write, "
                  "round(cost * 1e9) FROM usage_days ORDER BY session_pk, day, provider, model")
    paths = text("SELECT session_pk, call_seq, call_index, path FROM tool_call_pairs "
                 "ORDER BY session_pk, call_seq, call_index")
    off_path = text("SELECT pk, off_path_messages, round(off_path_cost * 1e9) FROM sessions ORDER BY pk")
    with SessionStore.connect(db_url) as store:
        for path in sorted((FIXTURES / "sessions").glob("*.jsonl")):
            try:
                store.import_file(path)
            except StoreError:  # files sharing a session id: the first one stays
                continue
        with read_transaction(store.engine) as conn:
            kept = [conn.execute(query).all() for query in (totals, paths, off_path, activity)]
        assert len(kept[0]) > 50 and any(row.path for row in kept[1]) and any(row[1] for row in kept[2])
        assert len(kept[3]) > len(kept[0]) and any(row.tool_errors for row in kept[3])
        config = alembic_config(store.engine)
        command.downgrade(config, "0011")
        assert "usage_days" in inspect(store.engine).get_table_names()
        assert "activity_days" not in inspect(store.engine).get_table_names()
        with read_transaction(store.engine) as conn:
            assert conn.execute(totals).all() == kept[0]
        command.downgrade(config, "0010")
        assert "usage_days" not in inspect(store.engine).get_table_names()
        assert "path" not in {c["name"] for c in inspect(store.engine).get_columns("tool_call_pairs")}
        command.upgrade(config, "head")
        with read_transaction(store.engine) as conn:
            assert [conn.execute(query).all() for query in (totals, paths, off_path, activity)] == kept


def test_date_fallback_migration_with_data(db_url: str, tmp_path: Path) -> None:
    """0017 recomputes the times of sessions whose timestamps are not in Pi's shape (read as no
    date before V8's fallback formats were): stale values come back right, and a store of
    Pi-written files is left alone."""
    times = text("SELECT pk, created_ms, activity_ms, modified_ms FROM sessions ORDER BY pk")
    calls = text("SELECT session_pk, call_seq, call_ms, duration_ms FROM tool_call_pairs ORDER BY session_pk, call_seq")
    crafted = FIXTURES / "crafted" / "legacy-date-timestamps.jsonl"
    in_array = tmp_path / "array-timestamp.jsonl"  # new Date(["Feb 1 2025"]) is a date too
    in_array.write_text('{"type":"session","version":3,"id":"array-timestamp","timestamp":["Feb 1 2025"],"cwd":"/w"}\n'
                        '{"type":"message","id":"u1","parentId":null,"timestamp":[["Feb 2 2025 10:00 GMT"]],'
                        '"message":{"role":"user","content":"hi"}}\n')
    with SessionStore.connect(db_url) as store:
        for path in [*sorted((FIXTURES / "sessions").glob("*.jsonl"))[:20], crafted, in_array]:
            try:
                store.import_file(path)
            except StoreError:  # files sharing a session id: the first one stays
                continue
        with read_transaction(store.engine) as conn:
            kept = conn.execute(times).all(), conn.execute(calls).all()
            odd = session_times.odd_sessions(conn)
            legacy_pk = conn.execute(text("SELECT pk FROM sessions WHERE session_id = 'crafted-legacy-date-timestamps'")
                                     ).scalar_one()
            array_pk = conn.execute(text("SELECT pk FROM sessions WHERE session_id = 'array-timestamp'")).scalar_one()
        assert {legacy_pk, array_pk} <= set(odd) and len(odd) < 6  # the generated files: a few bad timestamps
        assert next(row for row in kept[0] if row.pk == array_pk)[1:] == (1738368000000, 1738490400000, 1738490400000)
        assert next(row for row in kept[1] if row.session_pk == legacy_pk).duration_ms == 2000
        with store.engine.begin() as conn:  # what revision 0016's reading had stored for them
            for pk in odd:
                conn.execute(text("UPDATE sessions SET created_ms = NULL, activity_ms = NULL, modified_ms = 1 "
                                  "WHERE pk = :pk"), {"pk": pk})
                conn.execute(text("UPDATE tool_call_pairs SET call_ms = NULL, duration_ms = NULL "
                                  "WHERE session_pk = :pk"), {"pk": pk})
        config = alembic_config(store.engine)
        command.downgrade(config, "0016")
        command.upgrade(config, "head")
        with read_transaction(store.engine) as conn:
            assert (conn.execute(times).all(), conn.execute(calls).all()) == kept


def test_an_interrupt_during_a_migration_stays_an_interrupt(tmp_path) -> None:
    """Ctrl-C while the schema was being created closed the connection; restoring foreign keys
    on it then raised "Cannot operate on a closed database", which replaced the interrupt (the
    command exited 1 with that message instead of 130)."""
    from store.db.engine import make_engine, migration_transaction

    engine = make_engine(f"sqlite:///{tmp_path / 's.db'}")
    with pytest.raises(KeyboardInterrupt), migration_transaction(engine) as conn:
        conn.invalidate()  # as SQLAlchemy leaves a connection whose statement was interrupted
        raise KeyboardInterrupt
    engine.dispose()
