"""A PostgreSQL server's connection settings (README "Servers"): the pool, the statement timeout,
``application_name`` and ``pooler``, as URL query options or environment variables, read by
``make_engine`` and never passed to the driver; on the real server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from store.aio import AsyncSessionStore
from store.db.engine import BadSetting, make_engine
from store.session_store import SessionStore
from tests.conftest import scratch_pg_database

SHOW = (
    "SELECT current_setting('application_name'), current_setting('statement_timeout'), current_setting('lock_timeout')"
)


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with scratch_pg_database("pi_store_settings") as url:
        yield url


def with_query(url: str, **options: str) -> str:
    return make_url(url).update_query_dict(options).render_as_string(hide_password=False)


def settings_of(url: str) -> tuple:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text(SHOW)).one()
    finally:
        engine.dispose()


def test_defaults(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGAPPNAME", raising=False)
    engine = make_engine(pg_url)
    assert (engine.pool.size(), engine.pool._max_overflow) == (5, 10)  # SQLAlchemy's
    engine.dispose()
    assert settings_of(pg_url) == ("pi-store", "0", "30s")


def test_url_options(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PI_STORE_POOL_SIZE", "9")  # the URL's option wins over the variable
    url = with_query(pg_url, pool_size="3", max_overflow="0", statement_timeout="4", application_name="agent-host")
    engine = make_engine(url)
    assert (engine.pool.size(), engine.pool._max_overflow) == (3, 0)
    assert engine.url == make_url(url)  # kept whole: a viewer or worker made from it gets the same settings
    engine.dispose()
    assert settings_of(url) == ("agent-host", "4s", "30s")


def test_environment(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PI_STORE_POOL_SIZE", "2")
    monkeypatch.setenv("PI_STORE_MAX_OVERFLOW", "1")
    monkeypatch.setenv("PI_STORE_STATEMENT_TIMEOUT", "7")
    monkeypatch.setenv("PGAPPNAME", "from-libpq")
    engine = make_engine(pg_url)
    assert (engine.pool.size(), engine.pool._max_overflow) == (2, 1)
    engine.dispose()
    assert settings_of(pg_url) == ("from-libpq", "7s", "30s")


def test_pooler_option_sets_timeouts_per_transaction(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Straight to the server as well: ``pooler=transaction`` only changes how settings are made."""
    monkeypatch.setenv("PI_STORE_POOLER", "transaction")
    monkeypatch.setenv("PI_STORE_LOCK_TIMEOUT", "3")
    engine = make_engine(with_query(pg_url, statement_timeout="5"))
    with engine.connect() as conn:
        assert conn.connection.driver_connection.prepare_threshold is None
        for _ in range(2):
            assert conn.execute(text(SHOW)).one() == ("pi-store", "5s", "3s")
            conn.commit()
        # session defaults untouched: a transaction set them, the next server client gets its own
        assert conn.execute(text("SELECT reset_val FROM pg_settings WHERE name = 'lock_timeout'")).scalar() == "0"
    engine.dispose()
    with SessionStore.connect(with_query(pg_url, pooler="none")) as store, store.engine.connect() as conn:
        assert conn.connection.driver_connection.prepare_threshold == 5  # psycopg's default


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("pool_size", "0", "the URL option pool_size must be a whole number of at least 1, not '0'"),
        ("max_overflow", "-1", "the URL option max_overflow must be a whole number of at least 0, not '-1'"),
        ("pooler", "session", "the URL option pooler must be one of none, transaction, not 'session'"),
        (
            "statement_timeout",
            "soon",
            "the URL option statement_timeout must be a number of seconds (0: no limit), not 'soon'",
        ),
    ],
)
def test_bad_values_are_refused(pg_url: str, option: str, value: str, message: str) -> None:
    with pytest.raises(BadSetting) as caught:
        make_engine(with_query(pg_url, **{option: value}))
    assert str(caught.value) == message


def test_bad_variable_through_the_cli(pg_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "store.cli", "--db", pg_url, "list"],
        capture_output=True,
        text=True,
        env={**os.environ, "PI_STORE_POOL_SIZE": "many"},
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr == "Error: PI_STORE_POOL_SIZE must be a whole number of at least 1, not 'many'\n"


def end_store_connections(url: str) -> int:
    """End the server side of every pooled connection of the store (as a server restart does),
    and wait until they are gone; returns how many there were."""
    import psycopg

    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    mine = "datname = current_database() AND pid <> pg_backend_pid() AND application_name = 'pi-store'"
    with psycopg.connect(libpq, autocommit=True) as admin:
        pids = [pid for (pid,) in admin.execute(f"SELECT pid FROM pg_stat_activity WHERE {mine}")]
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        for _ in range(500):
            if not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchone():
                break
            time.sleep(0.01)
    return len(pids)


MESSAGE = {"role": "user", "content": "hello", "timestamp": 1}


def test_pooled_connections_that_died_are_replaced(pg_url: str) -> None:
    """A single append checks its pooled connection out without a ping: when the connection
    turns out dead at its first statement (before anything is written) the append starts again
    on a new one; other checkouts ping. Nothing surfaces, every append is stored once."""
    with SessionStore.connect(pg_url) as store:
        sm = store.create("/w")
        ids = [sm.append_message(MESSAGE), sm.append_message(MESSAGE)]
        assert end_store_connections(pg_url) >= 1
        ids.append(sm.append_message(MESSAGE))
        assert end_store_connections(pg_url) >= 1
        assert [entry["id"] for entry in sm.get_entries()] == ids


def test_pooled_connections_that_died_are_replaced_async(pg_url: str) -> None:
    async def run() -> None:
        async with await AsyncSessionStore.connect(pg_url) as store:
            sm = await store.create("/w")
            ids = [await sm.append_message(MESSAGE), await sm.append_message(MESSAGE)]
            assert end_store_connections(pg_url) >= 1
            ids.append(await sm.append_message(MESSAGE))
            assert end_store_connections(pg_url) >= 1
            assert [entry["id"] for entry in await sm.get_entries()] == ids

    asyncio.run(run())


def test_a_single_append_behind_a_pooler_sets_its_timeouts(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind a transaction pooler the single append's timeouts ride with its first statement:
    waiting for a session row that another client holds ends after the lock timeout (1 s), well
    before that client lets go (the server's own default would wait)."""
    import threading

    import psycopg

    monkeypatch.setenv("PI_STORE_LOCK_TIMEOUT", "1")
    with SessionStore.connect(with_query(pg_url, pooler="transaction")) as store:
        sm = store.create("/w")
        sm.append_message(MESSAGE)
        holder = psycopg.connect(make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False))
        holder.execute("SELECT 1 FROM sessions WHERE session_id = %s FOR UPDATE", (sm.get_session_id(),))
        release = threading.Timer(6, holder.rollback)
        release.start()
        try:
            with pytest.raises(OperationalError, match="lock timeout") as raised:  # as SQLAlchemy's own
                sm.append_message(MESSAGE)
            assert isinstance(raised.value.orig, psycopg.errors.LockNotAvailable)
        finally:
            release.join()
            holder.close()
        sm.append_message(MESSAGE)
        assert len(sm.get_entries()) == 2
