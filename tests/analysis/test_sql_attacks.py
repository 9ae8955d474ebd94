"""``pi-store sql`` cannot change anything, reach files or programs, outlive its timeout or leave
a setting behind: statements a tester used against the old read-only surface, on both engines,
as the ``postgres`` superuser and as ordinary roles. Each refusal is one line of
:class:`QueryFailed`; the rows, the database file and the file system are as before."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest
from alembic import command
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from store.analysis.readonly import QueryFailed, run_sql, stream_sql
from store.cli import main
from store.db.engine import alembic_config
from store.session_store import SessionStore
from tests.conftest import PG_URL, scratch_pg_database

COUNT_LOOP = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n}) SELECT {select} FROM c"
ATTEMPTS_BOTH = [
    "COMMIT; DELETE FROM entries",
    "ROLLBACK; DELETE FROM entries",
    "SELECT 1; DELETE FROM entries",
    "SELECT 1; SELECT 2",
    "DELETE FROM entries",
    "INSERT INTO sessions (session_id) VALUES ('x')",
    "UPDATE entries SET line = '{}'",
    "CREATE TABLE t (a INTEGER)",
    "DROP TABLE entries",
    "DROP VIEW messages",
    "WITH d AS (DELETE FROM entries RETURNING 1) SELECT count(*) FROM d",
]


def _tmp_target() -> Path:
    return Path("/tmp") / f"pi_sql_attack_{uuid.uuid4().hex}"


def _fingerprint(store: SessionStore) -> tuple:
    """What must not change: the rows (and on SQLite the database files' bytes)."""
    engine = store.engine
    with engine.connect() as conn:
        rows = tuple(conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in ("entries", "sessions"))
        lines = tuple(conn.execute(text("SELECT line FROM entries ORDER BY pk")).scalars())
        if engine.dialect.name == "postgresql":
            rows += (conn.execute(text("SELECT count(*) FROM pg_largeobject_metadata")).scalar_one(),)
    files: tuple = ()
    if engine.dialect.name == "sqlite":
        base = Path(engine.url.database)
        files = tuple(hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None
                      for p in (base, Path(f"{base}-wal")))
    return rows, lines, files


@pytest.fixture
def seeded(store: SessionStore) -> SessionStore:
    sm = store.create("/w")
    sm.append_message({"role": "user", "content": "hello", "timestamp": 1})
    run_sql(store.engine, "SELECT 1")  # the SQLite search index is synced by the first call
    return store


def assert_refused(store: SessionStore, sql: str, *, timeout: float = 30, contains: str = "") -> str:
    """``sql`` raises a one-line QueryFailed and changes nothing; returns the message."""
    before = _fingerprint(store)
    with pytest.raises(QueryFailed) as caught:
        run_sql(store.engine, sql, timeout=timeout)
    message = str(caught.value)
    assert message and "\n" not in message, message
    assert contains.lower() in message.lower(), message
    assert _fingerprint(store) == before
    return message


@pytest.mark.parametrize("sql", ATTEMPTS_BOTH)
def test_writes_and_second_statements_are_refused(seeded: SessionStore, sql: str) -> None:
    assert_refused(seeded, sql)
    assert run_sql(seeded.engine, "SELECT count(*) FROM entries WHERE kind = 'entry'").rows == [(1,)]


def test_a_long_query_stops_at_the_timeout(seeded: SessionStore) -> None:
    started = time.monotonic()
    assert_refused(seeded, COUNT_LOOP.format(n=10**12, select="max(x)"), timeout=1, contains="statement timeout")
    assert time.monotonic() - started < 5
    # the timeout runs from the start of the call until the last row is read, also when streaming
    # (3 s: on a loaded machine the first rows took longer than 1 s to come)
    streamed = 0
    with pytest.raises(QueryFailed, match="statement timeout"), \
            stream_sql(seeded.engine, COUNT_LOOP.format(n=10**9, select="x"), timeout=3) as rows:
        for _ in rows:
            streamed += 1
    assert streamed > 0


def test_documented_forms_still_run(seeded: SessionStore) -> None:
    assert run_sql(seeded.engine, "SELECT role, count(*) AS n FROM messages GROUP BY role").rows == [("user", 1)]
    big = run_sql(seeded.engine, COUNT_LOOP.format(n=5000, select="x"))
    assert [r[0] for r in big.rows] == list(range(1, 5001))  # several fetch batches, all rows, in order
    assert run_sql(seeded.engine, "SELECT 1 AS a, 2 AS a").columns == ["a", "a"]


# SQLite ---------------------------------------------------------------------------------------

sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
postgres_only = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


@sqlite_only
def test_sqlite_attach_and_vacuum_into_create_no_file(seeded: SessionStore, tmp_path: Path) -> None:
    for sql in (f"ATTACH '{tmp_path / 'x.db'}' AS x", f"VACUUM INTO '{tmp_path / 'copy.db'}'",
                f"SELECT * FROM pragma_database_list, (SELECT 1) WHERE 0; ATTACH '{tmp_path / 'y.db'}' AS y"):
        assert_refused(seeded, sql)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.db", "store.db-shm", "store.db-wal"]


@sqlite_only
@pytest.mark.parametrize("sql", [
    "PRAGMA writable_schema = 1", "PRAGMA busy_timeout = 0", "PRAGMA query_only = 0", "PRAGMA journal_mode = DELETE",
    "PRAGMA user_version = 7", "PRAGMA foreign_keys = OFF", "SELECT * FROM pragma_busy_timeout(0)",
    "SELECT fts3_tokenizer('simple', x'0000000000000000')", "SELECT fts3_tokenizer('simple')",
    "SELECT load_extension('/tmp/pi_sql_attack')", "SELECT readfile('/etc/passwd')",
    "SELECT writefile('/tmp/pi_sql_attack', 'x')", "BEGIN", "SAVEPOINT s", "ANALYZE", "REINDEX",
    "DETACH main", "INSERT INTO entries_fts(entries_fts) VALUES ('rebuild')",
])
def test_sqlite_settings_functions_and_maintenance_are_refused(seeded: SessionStore, sql: str) -> None:
    assert_refused(seeded, sql)


@sqlite_only
def test_sqlite_nothing_survives_into_the_store_connections(seeded: SessionStore) -> None:
    for sql in ("PRAGMA busy_timeout = 0", "PRAGMA writable_schema = 1", "ATTACH ':memory:' AS x"):
        assert_refused(seeded, sql)
    with seeded.engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw.execute("PRAGMA busy_timeout").fetchone() == (30_000,)
        assert raw.execute("PRAGMA writable_schema").fetchone() == (0,)
        assert raw.execute("PRAGMA query_only").fetchone() == (0,)
        assert "x" not in [r[1] for r in raw.execute("PRAGMA database_list")]
    sm = seeded.open(seeded.list_all()[0].id)
    sm.append_message({"role": "user", "content": "again", "timestamp": 2})  # the store still writes
    assert run_sql(seeded.engine, "SELECT count(*) FROM messages").rows == [(2,)]


@sqlite_only
def test_sqlite_reads_what_documented_queries_read(seeded: SessionStore) -> None:
    match = ("SELECT e.role FROM entries_fts JOIN entries AS e ON e.pk = entries_fts.rowid "
             "WHERE entries_fts MATCH 'hello'")
    assert run_sql(seeded.engine, match).rows == [("user",)]
    assert "session_id" in [r[1] for r in run_sql(seeded.engine, "PRAGMA table_info(sessions)").rows]
    assert run_sql(seeded.engine, "SELECT count(*) FROM pragma_table_info('entries')").rows[0][0] > 5


# PostgreSQL -----------------------------------------------------------------------------------

PG_ESCAPES = [
    ("SET transaction_read_only = off; DELETE FROM entries; COMMIT", ""),
    ("SELECT set_config('transaction_read_only', 'off', false)", "before any query"),
    ("WITH d AS (DELETE FROM entries RETURNING 1) SELECT set_config('transaction_read_only', 'off', false)", ""),
    ("SELECT pg_read_file('/etc/passwd')", "permission denied"),
    ("SELECT pg_read_binary_file('/etc/passwd')", "permission denied"),
    ("SELECT pg_ls_dir('/')", "permission denied"),
    ("SELECT lo_import('/etc/passwd')", "permission denied"),
    ("SELECT lo_export(1, '/tmp/pi_sql_attack')", "permission denied"),
    ("SET ROLE postgres", ""),
    ("RESET ROLE", ""),
    ("SET SESSION AUTHORIZATION postgres", ""),
    ("SELECT set_config('role', 'none', true), pg_read_file('/etc/passwd')", ""),
    ("SELECT set_config('role', 'postgres', true)", "security-definer"),
    ("SELECT set_config('session_authorization', 'postgres', true)", "security-definer"),
    # a nested query starts its own executor: the role switch must fail before it, not only at the top
    ("SELECT set_config('role', 'none', true), query_to_xml('SELECT pg_read_file(''/etc/passwd'')', true, false, '')",
     "security-definer"),
    ("SELECT query_to_xml('SELECT pg_read_file(''/etc/passwd'')', true, false, '')", "permission denied"),
    ("SELECT current_setting('data_directory')", ""),
]


@postgres_only
@pytest.mark.parametrize("sql, contains", PG_ESCAPES)
def test_postgres_escapes_are_refused(seeded: SessionStore, sql: str, contains: str) -> None:
    assert_refused(seeded, sql, contains=contains)


@postgres_only
def test_postgres_copy_creates_no_file_and_runs_no_program(seeded: SessionStore) -> None:
    target, touched = _tmp_target(), _tmp_target()
    for sql in (f"COPY (SELECT 1) TO PROGRAM 'touch {touched}'", f"COPY entries TO '{target}'",
                f"COPY (SELECT 1) TO '{target}'", "COPY entries FROM '/etc/hostname'"):
        assert_refused(seeded, sql)
    assert not target.exists() and not touched.exists()


@postgres_only
def test_postgres_statement_timeout(seeded: SessionStore) -> None:
    started = time.monotonic()
    assert_refused(seeded, "SELECT 1 FROM pg_sleep(5)", timeout=1, contains="statement timeout")
    assert time.monotonic() - started < 3
    assert run_sql(seeded.engine, "SELECT 1 FROM pg_sleep(0.1)", timeout=1).rows == [(1,)]


@postgres_only
def test_postgres_the_statement_runs_as_the_reader(seeded: SessionStore) -> None:
    assert run_sql(seeded.engine, "SELECT current_user::text, current_setting('transaction_read_only')").rows == [
        ("pi_store_reader", "on")]
    # tables a later migration creates are readable through the default privileges
    with seeded.engine.begin() as conn:
        conn.execute(text("CREATE TABLE later_table (a integer)"))
        conn.execute(text("INSERT INTO later_table VALUES (7)"))
    try:
        assert run_sql(seeded.engine, "SELECT a FROM later_table").rows == [(7,)]
    finally:
        with seeded.engine.begin() as conn:
            conn.execute(text("DROP TABLE later_table"))


def test_postgres_dblink_cannot_reach_out() -> None:
    with scratch_pg_database("pi_sql_dblink") as url, SessionStore.connect(url) as store:
        store.create("/w").append_message({"role": "user", "content": "hello", "timestamp": 1})
        with store.engine.begin() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS dblink"))
        name = make_url(url).database
        for sql in (f"SELECT dblink_exec('dbname={name} user=postgres', 'DELETE FROM entries')",
                    f"SELECT set_config('role', 'none', true), dblink_exec('dbname={name}', 'DELETE FROM entries')"):
            assert_refused(store, sql)


@contextmanager
def app_role_database(createrole: bool) -> Iterator[str]:
    """The URL of a scratch database owned by a new LOGIN role that is not a superuser (with
    ``CREATEROLE`` or without), connecting as that role; the role is dropped afterwards."""
    role = f"pi_sql_app_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE ROLE {role} LOGIN" + (" CREATEROLE" if createrole else "")))
    except Exception as exc:
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    try:
        with scratch_pg_database("pi_sql_role") as url:
            with admin.connect() as conn:
                conn.execute(text(f'ALTER DATABASE "{make_url(url).database}" OWNER TO {role}'))
            yield make_url(url).set(username=role).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP ROLE IF EXISTS {role}"))
        admin.dispose()


def _seed(store: SessionStore) -> None:
    store.create("/w").append_message({"role": "user", "content": "hello", "timestamp": 1})


def test_postgres_ordinary_role_with_createrole() -> None:
    with app_role_database(createrole=True) as url, SessionStore.connect(url) as store:
        _seed(store)
        assert run_sql(store.engine, "SELECT current_user::text, session_user::text").rows[0][0] == "pi_store_reader"
        for sql in ("COMMIT; DELETE FROM entries", "ROLLBACK; DELETE FROM entries",
                    "SET transaction_read_only = off; DELETE FROM entries; COMMIT",
                    "SELECT set_config('transaction_read_only', 'off', false)", "DELETE FROM entries",
                    "SELECT set_config('role', 'none', true), query_to_xml('TABLE entries', true, false, '')",
                    "SELECT pg_read_file('/etc/passwd')", "COPY (SELECT 1) TO STDOUT"):
            assert_refused(store, sql)
        assert run_sql(store.engine, "SELECT count(*) FROM messages").rows == [(1,)]


def test_postgres_ordinary_role_without_createrole_is_refused_plainly() -> None:
    """The migration cannot create the reader: ``pi-store sql`` says so and runs nothing."""
    with app_role_database(createrole=False) as url, SessionStore.connect(url) as store:
        _seed(store)
        for sql in ("SELECT count(*) FROM entries", "COMMIT; DELETE FROM entries",
                    "SET transaction_read_only = off; DELETE FROM entries; COMMIT"):
            assert_refused(store, sql, contains="no pi_store_reader setup")
        assert store.list_all()[0].message_count == 1


def test_postgres_downgrade_removes_the_reader_and_upgrade_restores_it() -> None:
    with scratch_pg_database("pi_sql_downgrade") as url, SessionStore.connect(url) as store:
        _seed(store)
        config = alembic_config(store.engine)
        with store.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0004")
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM pg_proc WHERE proname LIKE 'pi_store_sql%'")).scalar() == 0
            assert conn.execute(text("SELECT count(*) FROM pg_default_acl")).scalar() == 0
            assert not conn.execute(text(
                "SELECT has_table_privilege(oid, 'entries', 'SELECT') FROM pg_roles WHERE rolname = 'pi_store_reader'"
            )).scalar()
        assert_refused(store, "SELECT 1", contains="no pi_store_reader setup")
        with store.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
        assert run_sql(store.engine, "SELECT count(*) FROM messages").rows == [(1,)]


# The command line -----------------------------------------------------------------------------

def test_cli_refusals_are_one_line(seeded: SessionStore, db_url: str) -> None:
    runner = CliRunner()
    before = _fingerprint(seeded)
    for args in (["sql", "COMMIT; DELETE FROM entries"], ["sql", "DROP TABLE entries"],
                 ["sql", "--timeout", "1", COUNT_LOOP.format(n=10**12, select="max(x)")]):
        done = runner.invoke(main, ["--db", db_url, *args])
        assert done.exit_code == 1, done.output
        assert done.output.count("\n") == 1 and done.output.startswith("Error: "), done.output
        assert "Traceback" not in done.output
    assert "statement timeout" in done.output
    assert _fingerprint(seeded) == before


def test_cli_streams_every_row(seeded: SessionStore, db_url: str) -> None:
    runner = CliRunner()
    loop = COUNT_LOOP.format(n=2500, select="x AS n, 'v' || x AS s")
    as_json = runner.invoke(main, ["--db", db_url, "sql", "--json", loop])
    assert as_json.exit_code == 0, as_json.output
    assert orjson.loads(as_json.output) == [{"n": i, "s": f"v{i}"} for i in range(1, 2501)]
    as_csv = runner.invoke(main, ["--db", db_url, "sql", "--csv", loop]).output.splitlines()
    assert as_csv[0] == "n,s" and as_csv[1:] == [f"{i},v{i}" for i in range(1, 2501)]
    table = runner.invoke(main, ["--db", db_url, "sql", loop]).output.splitlines()
    assert table[-1] == "(2500 rows)" and len(table) == 2503 and table[-2].split("|")[0].strip() == "2500"
