"""A new PostgreSQL store's single appends read only what they need.

Until a table is first analyzed, PostgreSQL estimates one row for every lookup of it, so indexes
that share a leading ``session_pk`` tie, and the generic plan psycopg's prepared statement keeps
(made at its sixth run, when the session held a handful of rows) may read the whole session
through the wrong one and filter it: an append that grows slower with every row. The plans are
read from ``auto_explain`` as the server ran them, on a store whose ``entries`` table autovacuum
does not analyze during the test.

The session row is locked through its primary key only: each append leaves a dead version of the
row in every index of ``sessions``, and through ``ix_sessions_session_id`` (as good as the key to a
planner without statistics) the lock visited every one of them the last append had not cleaned.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import event, text

from store.session_store import SessionStore
from tests.conftest import scratch_pg_database

_EXPLAIN = ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on", "SET auto_explain.log_analyze = on",
            "SET auto_explain.log_level = notice", "SET client_min_messages = notice")


@pytest.fixture
def pg_url() -> Iterator[str]:
    with scratch_pg_database("pi_store_young") as url:
        yield url


def test_single_appends_filter_no_rows_on_a_young_table(pg_url: str) -> None:
    plans: list[str] = []
    with SessionStore.connect(pg_url) as store:
        with store.engine.begin() as conn:
            conn.execute(text("ALTER TABLE entries SET (autovacuum_enabled = false)"))
            assert conn.execute(text("SELECT reltuples FROM pg_class WHERE relname = 'entries'")).scalar() < 0
        sm = store.create("/young")
        for n in range(60):  # past psycopg's prepare threshold and the server's switch to a generic plan
            sm.append_message({"role": "user", "content": f"message {n}", "timestamp": n})

        @event.listens_for(store.engine, "connect")
        def _explain(dbapi_connection, _record) -> None:
            dbapi_connection.add_notice_handler(lambda notice: plans.append(notice.message_primary))
            with dbapi_connection.cursor() as cursor:
                for statement in _EXPLAIN:
                    cursor.execute(statement)
            dbapi_connection.commit()

        store.engine.dispose()
        try:
            sm = store.open(sm.session_id)
            for n in range(60, 70):
                sm.append_message({"role": "user", "content": f"message {n}", "timestamp": n})
        except Exception as exc:  # the extension ships with PostgreSQL, but a server may lack it
            if "auto_explain" in str(exc):
                pytest.skip(f"the server cannot load auto_explain: {exc}")
            raise
    appends = [plan for plan in plans if "INSERT INTO entries" in plan]
    assert len(appends) >= 10, plans
    assert all("ix_entries_session_pk_entry_id_seq" in plan for plan in appends[-5:]), appends[-1]
    scanned = [plan for plan in appends if "Rows Removed by Filter" in plan]
    assert not scanned, scanned[-1]
    assert all("ix_sessions_session_id" not in plan for plan in appends), appends[-1]
