"""The schema can be distributed on the session key (docs/design.md "Distributing on Citus").

* The live schema (inspector, after migrating to head) keeps the key rule on both engines: every
  table holds session data keyed by the session key, every primary key, unique constraint and
  unique index includes it, every foreign key carries it to the table it references. A table
  added later that breaks the rule (or is not classified here) fails the test.
* The hot paths on PostgreSQL (open, create, appends, branch, path, context) touch the session
  tables only through an index condition on their key: every statement they send is recorded at
  the driver and its plan checked (a statement that would fan out over the shards, or join
  another session's rows, has a scan without it).
* Migration 0008 down and up again with sessions stored keeps every row and answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from alembic import command
from sqlalchemy import Engine, event, inspect, text
from sqlalchemy.exc import IntegrityError

from store.db.engine import alembic_config, read_transaction, write_transaction
from store.db.writes import insert_session
from store.errors import SessionExists, StoreError
from store.session_store import SessionStore
from tests.oracle_support import FIXTURES

SESSION_KEY = "session_pk"
# tables keyed by something else than ``session_pk``: the session row itself, and the directory
# of session ids (distributed on the id, the one table a lookup by id goes to)
OWN_KEY = {"sessions": "pk", "session_ids": "session_id"}
# foreign keys between tables of different keys: the directory's reference to its session (on
# Citus it is dropped: the tables are not colocated, docs/design.md)
ACROSS_KEYS = {("session_ids", "sessions")}
NOT_SESSION_DATA = {
    "alembic_version": "Alembic's bookkeeping",
    "fts_watermark": "SQLite's full-text index bookkeeping (one row; SQLite is never distributed)",
}
FTS_TABLES = re.compile(r"^entries_fts(_\w+)?$")  # SQLite's FTS5 table and its shadow tables


def key_rule_violations(engine: Engine) -> list[str]:
    """What in the live schema breaks the key rule (module docstring); empty when nothing does."""
    schema = inspect(engine)
    sqlite = engine.dialect.name == "sqlite"
    problems: list[str] = []
    for table in schema.get_table_names():
        if table in NOT_SESSION_DATA or (sqlite and FTS_TABLES.match(table)):
            continue
        key = OWN_KEY.get(table, SESSION_KEY)
        columns = {c["name"]: c for c in schema.get_columns(table)}
        if key not in columns:
            problems.append(f"{table}: no {key} column (session data needs the session key)")
            continue
        uniques = [(u["name"], u["column_names"]) for u in schema.get_unique_constraints(table)]
        uniques += [(i["name"], i["column_names"]) for i in schema.get_indexes(table)
                    if i["unique"] and "duplicates_constraint" not in i]  # PostgreSQL: a constraint's own index
        primary = schema.get_pk_constraint(table)["constrained_columns"]
        if key not in primary and not (sqlite and _is_rowid(columns, primary, key, uniques)):
            problems.append(f"{table}: primary key {primary} lacks {key}")
        problems += [f"{table}: unique {name} {cols} lacks {key}" for name, cols in uniques if key not in cols]
        for fk in schema.get_foreign_keys(table):
            referred_key = OWN_KEY.get(fk["referred_table"], SESSION_KEY)
            pairs = set(zip(fk["constrained_columns"], fk["referred_columns"], strict=True))
            if (key, referred_key) not in pairs and (table, fk["referred_table"]) not in ACROSS_KEYS:
                problems.append(f"{table}: foreign key {fk['name']} {sorted(pairs)} does not carry {key} "
                                f"to {fk['referred_table']}.{referred_key}")
    return problems


def _is_rowid(columns: dict[str, Any], primary: list[str], key: str, uniques: list) -> bool:
    """SQLite's rowid: a single INTEGER primary key column, in a table whose logical key (a unique
    constraint with the session key) is stated beside it."""
    return (len(primary) == 1 and str(columns[primary[0]]["type"]) == "INTEGER"
            and any(key in cols for _name, cols in uniques))


def test_live_schema_keeps_the_key_rule(db_url: str) -> None:
    with SessionStore.connect(db_url) as store:
        assert key_rule_violations(store.engine) == []
        tables = set(inspect(store.engine).get_table_names())
        assert {"sessions", "entries", "imports", "tool_call_pairs", "session_ids"} <= tables


def test_the_key_rule_fails_for_a_table_that_breaks_it(db_url: str) -> None:
    with SessionStore.connect(db_url) as store:
        with store.engine.begin() as conn:
            conn.execute(text("CREATE TABLE notes (pk INTEGER PRIMARY KEY, session_pk INTEGER REFERENCES "
                              "sessions (pk), entry_seq INTEGER, body TEXT, CONSTRAINT uq_notes_body UNIQUE (body))"))
            conn.execute(text("CREATE TABLE tags (name TEXT PRIMARY KEY)"))
            conn.execute(text("CREATE TABLE marks (session_pk INTEGER NOT NULL, seq INTEGER NOT NULL, "
                              "PRIMARY KEY (session_pk, seq), FOREIGN KEY (seq) REFERENCES sessions (pk))"))
        try:
            problems = key_rule_violations(store.engine)
        finally:
            with store.engine.begin() as conn:  # the PostgreSQL database is shared by the run's tests
                for table in ("notes", "tags", "marks"):
                    conn.execute(text(f"DROP TABLE {table}"))
    assert any(p.startswith("notes: primary key") for p in problems), problems  # the rowid has no logical key
    assert any(p.startswith("notes: unique") for p in problems), problems
    assert any(p.startswith("tags: no session_pk") for p in problems), problems
    assert any(p.startswith("marks: foreign key") for p in problems), problems
    assert len(problems) == 4, problems


# ------------------------------------------------------------------------- hot paths, PostgreSQL
SESSION_TABLES = {"sessions", "entries", "imports", "tool_call_pairs", "session_ids", "path_runs", "path_turns",
                  "activity_days"}


class _Recording(psycopg.Cursor):
    """A psycopg cursor that keeps every statement it sends (SQL and parameters)."""

    sent: list[tuple[str, Any]] | None = None

    def execute(self, query, params=None, **kwargs):
        if _Recording.sent is not None:
            _Recording.sent.append((query, params))
        return super().execute(query, params, **kwargs)

    def executemany(self, query, params_seq, **kwargs):
        params_seq = list(params_seq)
        if _Recording.sent is not None:
            _Recording.sent.extend((query, p) for p in params_seq[:1])
        return super().executemany(query, params_seq, **kwargs)


@contextmanager
def _recording(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection, _record, _proxy) -> None:
        dbapi_connection.cursor_factory = _Recording

    engine.dispose()  # connections made before the listener did not get it: checked out anew
    _Recording.sent = []
    try:
        yield _Recording.sent
    finally:
        _Recording.sent = None
        event.remove(engine, "checkout", _on_checkout)


def _plan_nodes(node: dict) -> Iterator[dict]:
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


def scans_without_key(conn, sql: str, params: Any) -> list[str]:
    """The scans of session tables in the plan of ``sql`` that are not led by the table's key (an
    index condition on it); PostgreSQL's sequential scans are off, so an index serves whatever can."""
    conn.execute("SET LOCAL enable_seqscan = off")
    (plan,) = conn.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchone()
    plan = plan if isinstance(plan, list) else json.loads(plan)
    problems = []
    nodes = list(_plan_nodes(plan[0]["Plan"]))
    for node in nodes:
        table = node.get("Relation Name")
        if table not in SESSION_TABLES:
            continue
        key = re.compile(rf"\((?:\w+\.)?{OWN_KEY.get(table, SESSION_KEY)} = ")
        if node["Node Type"] == "Bitmap Heap Scan":
            conditions = [n.get("Index Cond", "") for n in _plan_nodes(node) if n["Node Type"] == "Bitmap Index Scan"]
        else:
            conditions = [node.get("Index Cond", "")]
        if node["Node Type"] in ("ModifyTable", "Insert") or any(key.search(c) for c in conditions):
            continue
        found = "; ".join(filter(None, conditions)) or "no index condition"
        problems.append(f"{node['Node Type']} on {table} ({found})")
    return problems


def _hot_paths(store: SessionStore) -> str:
    """Create, open, append (every kind an agent writes), branch, read the path and the context."""
    sm = store.create("/w")
    user = sm.append_message({"role": "user", "content": "read the file", "timestamp": 1})
    sm.append_model_change("anthropic", "claude-test")
    sm.append_thinking_level_change("high")
    call = sm.append_message({"role": "assistant", "content": [{"type": "toolCall", "id": "c1", "name": "read",
                                                                "arguments": {"path": "a.py"}}],
                              "provider": "anthropic", "model": "claude-test", "api": "anthropic-messages",
                              "stopReason": "toolUse", "timestamp": 2,
                              "usage": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0,
                                        "totalTokens": 15, "cost": {"total": 0.01}}})
    sm.append_message({"role": "toolResult", "toolCallId": "c1", "toolName": "read", "isError": False,
                       "content": [{"type": "text", "text": "print(1)"}], "timestamp": 3})
    sm.append_label_change(call, "here")
    sm.append_session_info("named")
    with sm.batch():
        for i in range(3):
            sm.append_message({"role": "user", "content": f"more {i}", "timestamp": 4 + i})
    sm.branch(user)
    sm.append_message({"role": "user", "content": "another way", "timestamp": 9})
    session_id = sm.get_session_id()
    opened = store.open(session_id)
    opened.append_message({"role": "user", "content": "after open", "timestamp": 10})
    opened.get_branch()
    opened.build_session_context()
    opened.get_children(user)
    opened.get_label(call)
    return session_id


def test_hot_path_statements_are_led_by_the_session_key(db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("the plans of a distributed engine: PostgreSQL's")
    with SessionStore.connect(db_url) as store:
        with _recording(store.engine) as sent:
            _hot_paths(store)
            statements = list(sent)
        assert len(statements) > 30
        raw = store.engine.raw_connection()
        try:
            conn = raw.driver_connection
            problems = []
            checked = 0
            # a simple query of several statements (the path refresh) is checked statement by statement
            parts = [(part, params) for sql, params in statements
                     for part in (sql.split("; ") if params is None else [sql])]
            for sql, params in parts:
                if re.match(r"\s*(SELECT|UPDATE|DELETE|INSERT|WITH)\b", sql, re.I) and "pg_" not in sql:
                    checked += 1
                    problems += [f"{p}: {sql.strip()[:160]}" for p in scans_without_key(conn, sql, params)]
            conn.rollback()
        finally:
            raw.close()
    assert checked > 20
    assert problems == []


def test_the_plan_check_finds_a_statement_without_the_key(db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("the plans of a distributed engine: PostgreSQL's")
    with SessionStore.connect(db_url) as store:
        _hot_paths(store)
        raw = store.engine.raw_connection()
        try:
            conn = raw.driver_connection
            assert scans_without_key(conn, "SELECT line FROM entries WHERE session_pk = %s AND seq = %s", (1, 2)) == []
            assert scans_without_key(conn, "SELECT line FROM entries WHERE seq = %s", (2,))  # every shard
            assert scans_without_key(conn, "SELECT * FROM sessions WHERE session_id = %s", ("x",))  # by id
            assert scans_without_key(  # a join on the row number alone pairs rows of different sessions
                conn, "SELECT e.line FROM entries AS e JOIN entries AS p ON p.seq = e.parent_seq "
                      "WHERE e.session_pk = %s", (1,))
            conn.rollback()
        finally:
            raw.close()


# ---------------------------------------------------------------------------- migration 0008
SNAPSHOT = {
    "sessions": "SELECT pk, session_id, cwd, name, entry_count, last_seq, leaf_seq, row_version, source_sha256 "
                "FROM sessions ORDER BY pk",
    "entries": "SELECT pk, session_pk, seq, entry_id, parent_seq, run_start, line FROM entries "
               "ORDER BY session_pk, seq",
    "pairs": "SELECT session_pk, call_seq, call_index, result_seq FROM tool_call_pairs "
             "ORDER BY session_pk, call_seq, call_index",
    # the cost as docs/sql.md says to compare one (a sum of doubles: its last digits follow the
    # order PostgreSQL adds in, which the views of 0008 and 0009 do not share)
    "overview": "SELECT id, entry_count, tokens, round(CAST(cost AS NUMERIC), 10), leaf_id FROM sessions_overview "
                "ORDER BY id",
    "path": "SELECT session_pk, first_seq, last_seq FROM current_path ORDER BY session_pk, first_seq",
}


def _snapshot(store: SessionStore) -> dict[str, list]:
    with read_transaction(store.engine) as conn:
        found = {name: [tuple(row) for row in conn.execute(text(sql))] for name, sql in SNAPSHOT.items()}
    found["search"] = sorted((h.session_id, h.entry_id) for h in store.search("the", limit=50))
    return found


def _imports(store: SessionStore) -> list[tuple]:
    with read_transaction(store.engine) as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT source_path, session_pk, source_bytes, revision FROM imports ORDER BY source_path, session_pk"))]


def test_migration_0008_down_and_up_with_data(db_url: str, tmp_path) -> None:
    with SessionStore.connect(db_url) as store:
        for path in sorted((FIXTURES / "sessions").glob("*.jsonl"))[::3]:  # edge, legacy, medium, small
            try:
                store.import_file(path)
            except StoreError:  # files sharing a session id: the first one stays
                continue
        sm = store.create("/api")
        sm.append_message({"role": "user", "content": "the api session", "timestamp": 1})
        moving = tmp_path / "moving.jsonl"  # one path that held two sessions, one after the other
        files = sorted((FIXTURES / "sessions").glob("small-seed*.jsonl"))[:2]
        for source in files:
            moving.write_bytes(source.read_bytes())
            store.import_file(moving, prefer="file")
        before = _snapshot(store)
        imports = _imports(store)
        assert [r[0] for r in imports].count(str(moving)) == 2
        assert len(before["entries"]) > 500 and before["pairs"] and before["search"]

        config = alembic_config(store.engine)
        command.downgrade(config, "0007")
        schema = inspect(store.engine)
        assert "session_ids" not in schema.get_table_names()
        assert schema.get_pk_constraint("entries")["constrained_columns"] == ["pk"]
        assert [u["column_names"] for u in schema.get_unique_constraints("sessions")] == [["session_id"]]
        assert schema.get_pk_constraint("imports")["constrained_columns"] == ["pk"]
        with read_transaction(store.engine) as conn:
            assert {name: [tuple(r) for r in conn.execute(text(sql))] for name, sql in SNAPSHOT.items()} == {
                name: rows for name, rows in before.items() if name in SNAPSHOT}
        latest = [r for r in imports if r[0] != str(moving)]
        assert _imports(store) == sorted([*latest, max((r for r in imports if r[0] == str(moving)),
                                                       key=lambda r: r[1])])  # the path's latest import stays

        command.upgrade(config, "head")
        assert key_rule_violations(store.engine) == []
        assert _snapshot(store) == before
        with read_transaction(store.engine) as conn:
            directory = conn.execute(text("SELECT session_id, session_pk FROM session_ids ORDER BY session_pk")).all()
        assert [tuple(r) for r in directory] == [(row[1], row[0]) for row in before["sessions"]]
        reopened = store.open(sm.get_session_id())  # the directory leads to the session after the migration
        reopened.append_message({"role": "user", "content": "after the migration", "timestamp": 2})
        assert len(reopened.get_branch()) == 2
        with pytest.raises(SessionExists) as caught, \
                write_transaction(store.engine) as conn:  # an id stays unique in the database itself
            insert_session(conn, session_id=sm.get_session_id(), cwd="", entry_count=0, message_count=0, last_seq=-1,
                           pi_valid=True, pi_listable=True, has_conversation=False)
        assert isinstance(caught.value.__cause__, IntegrityError)
        assert re.search(r"pk_session_ids|session_ids\.session_id", str(caught.value.__cause__))
