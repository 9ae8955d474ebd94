"""Shared fixtures: every store test runs on a real SQLite file and on the real PostgreSQL server.

PostgreSQL: ``$PI_STORE_TEST_PG`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``)
names a server and a maintenance database; the tests create their own database beside it and
drop it at the end. When the server cannot be reached the PostgreSQL half is skipped with the
reason, and the run's summary says so in capitals — never a silent pass.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from store.session_store import SessionStore
from tests.async_as_sync import async_store

PG_URL = os.environ.get("PI_STORE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
_pg_state: dict[str, str | None] = {}
_loud_skips: dict[str, str] = {}  # what was skipped (in capitals at the end of the run) -> why


class Clock:
    """A deterministic clock (ms since the epoch) that advances 1 ms per reading."""

    def __init__(self, start_ms: float = 1_767_225_600_000.0) -> None:
        self.now = start_ms

    def __call__(self) -> float:
        self.now += 1
        return self.now


def _create_database(conn, name: str, options: str = "") -> None:
    """A scratch database whose commits do not wait for the WAL flush: a server crash could lose
    its last commits, which nobody keeps; visibility, locks and isolation are unchanged, and the
    suite's thousands of small write transactions stop waiting on the disk."""
    conn.execute(text(f'CREATE DATABASE "{name}" {options}'))
    conn.execute(text(f'ALTER DATABASE "{name}" SET synchronous_commit = off'))


def _unreachable(exc: Exception) -> str:
    """Why the PostgreSQL half is skipped (also shown in capitals at the end of the run)."""
    _pg_state["skip"] = f"PostgreSQL unreachable at {PG_URL}: {type(exc).__name__}: {str(exc)[:200]}"
    return _pg_state["skip"]


@contextmanager
def scratch_pg_database(prefix: str, options: str = "") -> Iterator[str]:
    """The URL of a new database of its own on the test server (``CREATE DATABASE`` with
    ``options``), dropped afterwards; skips the calling test (loudly, see
    ``pytest_terminal_summary``) when the server cannot be reached."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    try:
        admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
        with admin.connect() as conn:
            _create_database(conn, name, options)
    except Exception as exc:
        pytest.skip(_unreachable(exc))
    try:
        yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _pg_database() -> str | None:
    """URL of this run's PostgreSQL database, or None (reason in ``_pg_state['skip']``)."""
    if "url" in _pg_state:
        return _pg_state["url"]
    name = f"pi_store_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
        with admin.connect() as conn:
            _create_database(conn, name)
        admin.dispose()
    except Exception as exc:
        _pg_state["url"] = None
        _unreachable(exc)
        return None
    _pg_state["url"] = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    _pg_state["name"] = name
    return _pg_state["url"]


def pytest_configure(config) -> None:
    """Tests stop commands with Ctrl-C (SIGINT). A shell starts a background job (``pytest &``)
    with SIGINT ignored, the processes it starts inherit that, and Python then never turns
    SIGINT into KeyboardInterrupt: those tests would wait for their timeouts. Undo it here (in
    the workers too), so the commands under test start with SIGINT as a terminal gives it."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionfinish(session, exitstatus) -> None:
    if hasattr(session.config, "workeroutput"):  # an xdist worker: its loud skips go to the controller
        session.config.workeroutput["loud_skips"] = {**_loud_skips, **(
            {"postgresql tests": _pg_state["skip"]} if _pg_state.get("skip") else {})}
    name = _pg_state.get("name")
    if name:
        admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def skip_loudly(what: str, reason: str) -> NoReturn:
    """Skip the calling test, and say at the end of the run, in capitals, that ``what`` was
    skipped and why (as for an unreachable PostgreSQL server)."""
    _loud_skips[what] = reason
    pytest.skip(reason)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist's controller: gather the loud skips of a worker that finished."""
    _loud_skips.update(getattr(node, "workeroutput", {}).get("loud_skips", {}))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failure whose text holds a lone surrogate (the odd ids these tests use) cannot travel
    from an xdist worker (UTF-8 only): the run ended in an INTERNALERROR and "no tests ran",
    the failure itself unseen. Such text is sent with the surrogates escaped."""
    outcome = yield
    report = outcome.get_result()
    if report.longrepr is not None and not _utf8_safe(text := str(report.longrepr)):
        report.longrepr = text.encode("utf-8", "backslashreplace").decode("utf-8")
    report.sections = [(title, content if _utf8_safe(content) else
                        content.encode("utf-8", "backslashreplace").decode("utf-8"))
                       for title, content in report.sections]


def _utf8_safe(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def pytest_terminal_summary(terminalreporter) -> None:
    if _pg_state.get("skip"):
        terminalreporter.write_sep("!", "POSTGRESQL TESTS WERE SKIPPED", red=True, bold=True)
        terminalreporter.write_line(_pg_state["skip"], red=True)
    for what, reason in _loud_skips.items():
        terminalreporter.write_sep("!", f"{what.upper()} WERE SKIPPED", red=True, bold=True)
        terminalreporter.write_line(reason, red=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL on each engine."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    url = _pg_database()
    if url is None:
        pytest.skip(_pg_state["skip"])
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS activity_days, path_turns, path_runs, tool_call_pairs, imports, "
                          "session_ids, entries, sessions, alembic_version CASCADE"))
        if conn.execute(text("SELECT to_regclass('usage_days')")).scalar() is not None:  # revision 0011's table
            conn.execute(text("DROP TABLE usage_days"))
    engine.dispose()
    yield url


@pytest.fixture
def clock() -> Clock:
    return Clock()


def pytest_generate_tests(metafunc) -> None:
    """``both_apis`` tests get ``api`` = sync, then async: the same test body on both APIs."""
    marked = metafunc.definition.get_closest_marker
    if "api" in metafunc.fixturenames and marked("both_apis") and not marked("sync_api_only"):
        metafunc.parametrize("api", ["sync", "async"], indirect=True)


@pytest.fixture
def api(request) -> str:
    """Which API the test's store is: "sync" unless the test is ``both_apis`` (then both, in turn)."""
    return getattr(request, "param", "sync")


@pytest.fixture
def store(db_url: str, clock: Clock, api: str) -> Iterator[SessionStore]:
    """A SessionStore on a fresh database (SQLite file, then PostgreSQL); in a ``both_apis``
    test, then also an ``AsyncSessionStore`` with the sync call shapes (its calls made on an
    event loop, see tests/async_as_sync.py)."""
    if api == "async":
        with async_store(db_url, clock=clock) as s:
            yield s  # type: ignore[misc]  # SessionStore's call shapes, duck-typed
        return
    with SessionStore.connect(db_url, clock=clock) as s:
        yield s
