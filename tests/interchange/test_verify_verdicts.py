"""``verify`` tells identical, diverged, api and damaged sessions apart, never with a traceback,
and finds real damage to a SQLite database file (table pages, full-text index pages)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from sqlalchemy import delete, update

from store.db.engine import write_transaction
from store.db.schema import entries, sessions
from store.interchange.importing import import_file
from store.interchange.verifying import API, DAMAGED, DIVERGED, IDENTICAL, check_database, verify_session
from store.session_store import SessionStore
from tests.interchange.sqlite_damage import damage_page_of
from tests.interchange.test_round_trip import FILES

SMALL = next(p for p in FILES if p.name == "small-seed1-0.jsonl")
MEDIUM = next(p for p in FILES if p.name == "medium-seed1-0.jsonl")
NO_NEWLINE = next(p for p in FILES if p.name == "edge-no-trailing-newline.jsonl")


def pi_store(db: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "store.cli", "--db", db, *args], capture_output=True, text=True,
                          timeout=120)


def append_through_the_api(store: SessionStore, session_id: str, count: int) -> None:
    """Append ``count`` messages and mark where the store's history starts. The UPDATE stands in
    for the lead's change (API appends and compact set ``diverged_seq`` themselves); once that
    lands it sets the same value and this line is a no-op."""
    with write_transaction(store.engine) as conn:
        first = conn.execute(sessions.select().where(sessions.c.session_id == session_id)).first().last_seq + 1
    sm = store.open(session_id)
    for n in range(count):
        sm.append_message({"role": "user", "content": f"more {n}", "timestamp": n})
    with write_transaction(store.engine) as conn:
        conn.execute(update(sessions).where(sessions.c.session_id == session_id,
                                            sessions.c.diverged_seq.is_(None)).values(diverged_seq=first))


def test_verdicts(store: SessionStore) -> None:
    identical = import_file(store, SMALL).session_id
    diverged = import_file(store, MEDIUM).session_id
    lines = len(MEDIUM.read_bytes().splitlines())
    append_through_the_api(store, diverged, 3)
    api = store.create("/w")
    api.append_message({"role": "user", "content": "hi", "timestamp": 1})
    assert verify_session(store, identical).verdict == IDENTICAL
    health = verify_session(store, diverged)
    assert health.verdict == DIVERGED and health.ok and health.bytes_ok, health.to_json()
    assert (health.file_lines, health.added_rows, health.added_entries) == (lines, 3, 3)
    assert health.describe() == f"diverged (+3 rows, 3 entries after line {lines})"
    assert health.tree_ok is True and health.canonical_ok is True
    assert verify_session(store, api.get_session_id()).describe() == "api (tree ok)"
    assert verify_session(store, api.get_session_id()).verdict == API


def test_diverged_prefix_that_changed_is_damaged(store: SessionStore) -> None:
    session_id = import_file(store, MEDIUM).session_id
    append_through_the_api(store, session_id, 2)
    with write_transaction(store.engine) as conn:
        spk = conn.execute(sessions.select().where(sessions.c.session_id == session_id)).first().pk
        conn.execute(update(entries).where(entries.c.session_pk == spk, entries.c.seq == 5)
                     .values(line=entries.c.line + " "))
    health = verify_session(store, session_id)
    assert health.verdict == DAMAGED and health.bytes_ok is False
    assert health.damage == ["bytes differ from the imported file"]
    assert any(d.startswith(f"lines 1-{health.file_lines} (the file's part)") for d in health.details)


def test_appended_without_a_mark_is_damaged(store: SessionStore) -> None:
    """More rows than the file held but no ``diverged_seq``: nothing says the store wrote them."""
    session_id = import_file(store, SMALL).session_id
    sm = store.open(session_id)
    sm.append_message({"role": "user", "content": "unrecorded", "timestamp": 1})
    with write_transaction(store.engine) as conn:  # the lead's change will set it on append: undo that here
        conn.execute(update(sessions).where(sessions.c.session_id == session_id).values(diverged_seq=None))
    assert verify_session(store, session_id).damage == ["bytes differ from the imported file"]


def test_a_store_line_not_in_stringify_form_is_damaged(store: SessionStore) -> None:
    session_id = import_file(store, NO_NEWLINE).session_id
    append_through_the_api(store, session_id, 1)
    with write_transaction(store.engine) as conn:
        row = conn.execute(sessions.select().where(sessions.c.session_id == session_id)).first()
        conn.execute(update(entries).where(entries.c.session_pk == row.pk, entries.c.seq == row.last_seq)
                     .values(eol="\r\n"))
    health = verify_session(store, session_id)
    assert health.verdict == DAMAGED and health.canonical_ok is False
    assert health.damage == ["lines the store wrote are not what it writes"]


def test_rows_deleted_behind_its_back(store: SessionStore) -> None:
    session_id = import_file(store, MEDIUM).session_id
    last = import_file(store, SMALL).session_id
    with write_transaction(store.engine) as conn:
        spk = conn.execute(sessions.select().where(sessions.c.session_id == session_id)).first().pk
        conn.execute(delete(entries).where(entries.c.session_pk == spk, entries.c.seq.in_([5, 100, 200])))
        lpk = conn.execute(sessions.select().where(sessions.c.session_id == last)).first()
        conn.execute(delete(entries).where(entries.c.session_pk == lpk.pk, entries.c.seq == lpk.last_seq))
    health = verify_session(store, session_id)
    assert health.verdict == DAMAGED and health.missing_rows == 3
    assert "rows missing (3)" in health.damage and "missing line(s) 6, 101, 201" in health.details
    tail = verify_session(store, last)
    assert tail.missing_rows == 1 and "rows missing (1)" in tail.damage


def test_key_columns_that_disagree_with_their_lines_are_damage(store: SessionStore) -> None:
    """Lookups by id, parent, type and role read these columns, not the lines: an entry id or a
    parent id changed behind the store's back made get_entry() miss and get_children() answer
    wrongly, and verify called the session identical."""
    session_id = import_file(store, MEDIUM).session_id
    assert verify_session(store, session_id).verdict == IDENTICAL
    with write_transaction(store.engine) as conn:
        spk = conn.execute(sessions.select().where(sessions.c.session_id == session_id)).first().pk
        conn.execute(update(entries).where(entries.c.session_pk == spk, entries.c.seq == 2).values(entry_id="bogus"))
        conn.execute(update(entries).where(entries.c.session_pk == spk, entries.c.seq.in_([4, 9]))
                     .values(parent_id="zzz"))
    health = verify_session(store, session_id)
    assert health.verdict == DAMAGED and "columns entry_id, parent_id differ from the lines" in health.damage
    assert {"entry_id: line(s) 3", "parent_id: line(s) 5, 10"} <= set(health.details)


def test_kept_totals_that_drifted_are_damage(store: SessionStore) -> None:
    """Each table kept as rows are written is counted again from the rows; a change behind the
    store's back is damage that names it, and ``fts rebuild --recompute`` mends it."""
    from store.analysis.backfill import recompute_analysis

    session_id = import_file(store, MEDIUM).session_id
    session = store.open(session_id)
    session.append_message({"role": "user", "content": "and then", "timestamp": 1})
    assert verify_session(store, session_id).ok
    drifts = {
        "tool_call_pairs": "UPDATE tool_call_pairs SET is_error = 1 - coalesce(is_error, 0) "
                           "WHERE call_seq = (SELECT min(call_seq) FROM tool_call_pairs)",
        "activity_days": "UPDATE activity_days SET tool_calls = tool_calls + 1 "
                         "WHERE day = (SELECT min(day) FROM activity_days)",
        "path_runs": "DELETE FROM path_runs WHERE last_seq IS NULL",
        "path_turns": "UPDATE path_turns SET steps = steps + 1 WHERE turn = 1",
        "off-path": "UPDATE sessions SET off_path_messages = off_path_messages + 1",
    }
    for name, sql in drifts.items():
        with write_transaction(store.engine) as conn:
            assert conn.exec_driver_sql(sql).rowcount > 0, name
        health = verify_session(store, session_id)
        assert health.verdict == DAMAGED and "totals kept as rows were written differ" in health.damage[0], name
        assert name.split("-")[0] in health.damage[0], (name, health.damage)
        with write_transaction(store.engine) as conn:
            recompute_analysis(conn)
        assert verify_session(store, session_id).ok, name


def test_cli_output_summary_and_exit_status(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    with SessionStore.connect(db) as store:
        identical = import_file(store, SMALL).session_id
        diverged = import_file(store, MEDIUM).session_id
        append_through_the_api(store, diverged, 2)
        api = store.create("/w")
        api.append_message({"role": "user", "content": "hi", "timestamp": 1})
    run = pi_store(db, "verify", "--all")
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout.splitlines()
    assert out[0] == "database: ok (quick_check, fts5 integrity-check)"
    assert f"{identical}: identical" in out and f"{api.get_session_id()}: api (tree ok)" in out
    assert any(line.startswith(f"{diverged}: diverged (+2 rows, 2 entries after line ") for line in out)
    assert out[-1] == "3 sessions: 1 identical, 1 diverged, 1 api, 0 damaged; database ok"
    as_json = [json.loads(line) for line in pi_store(db, "verify", "--all", "--json", "--full").stdout.splitlines()]
    assert as_json[0]["database"] == {"ok": True, "checks": ["integrity_check", "fts5 integrity-check"],
                                      "problems": [], "details": []}
    assert [h["verdict"] for h in as_json[1:-1]] == [IDENTICAL, DIVERGED, API]
    assert as_json[-1] == {"summary": {IDENTICAL: 1, DIVERGED: 1, API: 1, DAMAGED: 0, "sessions": 3,
                                       "databaseOk": True}}
    with SessionStore.connect(db) as store, write_transaction(store.engine) as conn:
        conn.execute(delete(entries).where(entries.c.seq == 1))  # every session has a line 2
    damaged = pi_store(db, "verify", "--all")
    assert damaged.returncode == 1 and "Traceback" not in damaged.stderr
    assert damaged.stdout.count("damaged: ") == 3 and "rows missing (1)" in damaged.stdout
    assert damaged.stdout.splitlines()[-1] == "3 sessions: 0 identical, 0 diverged, 0 api, 3 damaged; database ok"
    single = pi_store(db, "verify", identical, "--json")
    assert single.returncode == 1 and json.loads(single.stdout.splitlines()[0])["verdict"] == DAMAGED


def _damaged_copy(tmp_path: Path, table: str, **where) -> tuple[str, Path]:
    db_file = tmp_path / f"{table}.db"
    with SessionStore.connect(f"sqlite:///{db_file}") as store:
        for path in (MEDIUM, SMALL):
            import_file(store, path)
        from store.analysis import fts
        fts.sync(store.engine)
    damage_page_of(db_file, table, **where)
    return f"sqlite:///{db_file}", db_file


def test_a_damaged_entries_page(tmp_path: Path) -> None:
    db, _ = _damaged_copy(tmp_path, "entries", offset=0, nth=5)
    run = pi_store(db, "verify", "--all")
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    first = run.stdout.splitlines()[0]
    assert first.startswith("database: damaged: quick_check finds damage in table(s) entries"), first
    assert "damaged: the database reports an error reading it: database disk image is malformed" in run.stdout
    assert run.stdout.splitlines()[-1].endswith("database damaged")


def test_a_damaged_full_text_index(tmp_path: Path) -> None:
    db, db_file = _damaged_copy(tmp_path, "entries_fts_data", nth=2)
    assert sqlite3.connect(db_file).execute("PRAGMA quick_check").fetchall() == [("ok",)]  # pages look fine
    run = pi_store(db, "verify", "--all", "--json")
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    reports = [json.loads(line) for line in run.stdout.splitlines()]
    database = reports[0]["database"]
    assert not database["ok"] and database["problems"][0].startswith("full-text index entries_fts is damaged")
    assert [r["verdict"] for r in reports[1:-1]] == [IDENTICAL, IDENTICAL]  # the sessions' own rows are fine
    assert reports[-1]["summary"]["databaseOk"] is False
    with SessionStore.connect(db) as store:  # the check rolled back: the database is as it was
        assert check_database(store).problems == database["problems"]


def test_a_damaged_sessions_table(tmp_path: Path) -> None:
    db, _ = _damaged_copy(tmp_path, "sessions", offset=8, size=4000)
    run = pi_store(db, "verify", "--all")
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert "damage in table(s) sessions" in run.stdout.splitlines()[0]


def test_database_checks_on_every_engine(store: SessionStore) -> None:
    import_file(store, SMALL)
    health = check_database(store, full=True)
    assert health.ok, health.problems
    assert health.checks == (["integrity_check", "fts5 integrity-check"] if store.engine.dialect.name == "sqlite"
                             else ["valid indexes", "checksum failures"])
