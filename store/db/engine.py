"""Engines for SQLite (embedded default) and PostgreSQL, with the schema brought to head on first use.

SQLite connections run in WAL mode with foreign keys on and a busy timeout, and SQLAlchemy's
transaction control is taken over from the sqlite3 driver so that write transactions can start
with ``BEGIN IMMEDIATE``: the write lock is taken before any row is read, so two processes that
append to one database serialise cleanly instead of failing with "database is locked" on upgrade.

Nothing waits forever (settings in the environment, whole seconds):

* ``PI_STORE_CONNECT_TIMEOUT`` (default 10): PostgreSQL connection attempts (psycopg waits at least 2 s);
* ``PI_STORE_LOCK_TIMEOUT`` (default 30): waits for a lock, SQLite's busy timeout and PostgreSQL's
  ``lock_timeout``;
* ``PI_STORE_STATEMENT_TIMEOUT`` (default 0, none): PostgreSQL's ``statement_timeout``.

A PostgreSQL server's connections (README "Servers"): the query options of :data:`STORE_OPTIONS`
in the URL, or their environment variables, set the pool (``pool_size``, ``max_overflow``), the
statement timeout, and ``pooler=transaction`` for a pooler in transaction mode (PgBouncer) in
front of the server; ``application_name`` (libpq's own option, or ``$PGAPPNAME``) defaults to
``pi-store``. The driver never sees this project's options.

A fault an operator can act on (disk full, read-only, locked, corrupt, server unreachable) is
raised as its usual SQLAlchemy class with a one-line message naming the database (password
masked), see ``store.db.faults``. ``make_engine(url, read_only=...)`` opens a SQLite file
without writing to it (``mode=ro``, or ``immutable`` where even SQLite's ``-shm`` cannot be made).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, ExceptionContext, make_url
from sqlalchemy.exc import DBAPIError, InvalidatePoolError
from sqlalchemy.pool import NullPool, StaticPool

from store.db.faults import fault_reason, masked_url, with_summary
from store.errors import StoreClosed, StoreError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

BUSY_TIMEOUT_MS = 30_000  # the default lock timeout (PI_STORE_LOCK_TIMEOUT)
CONNECT_TIMEOUT_S = 10
_WRITE = "pi_store_write"
_MIGRATION_LOCK = 0x70695F73746F7265  # "pi_store": the advisory lock key of schema migrations

ReadOnly = Literal["ro", "immutable"]
T = TypeVar("T")


class BadSetting(StoreError):
    """A setting (an environment variable, a URL option of this project) that is not what it must be."""


def _seconds(name: str, default: float, value: str | None = None) -> float:
    """The seconds of the setting ``name``: ``value``, else ``$name`` (``default`` when unset); 0
    means no limit."""
    value = (os.environ.get(name, "") if value is None else value).strip()
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise BadSetting(f"{name} must be a number of seconds (0: no limit), not {value!r}")
    return seconds


def connect_timeout_s(url: URL | None = None) -> int:
    """The URL's ``connect_timeout`` (libpq's own option), else ``$PI_STORE_CONNECT_TIMEOUT``, as
    psycopg applies it: whole seconds, at least 2 (0: none)."""
    given = url.query.get("connect_timeout") if url is not None else None
    if given is None:
        seconds = _seconds("PI_STORE_CONNECT_TIMEOUT", CONNECT_TIMEOUT_S)
    else:
        seconds = _seconds("the URL option connect_timeout", CONNECT_TIMEOUT_S,
                           given[-1] if isinstance(given, tuple) else given)
    seconds = math.ceil(seconds)
    return 0 if seconds == 0 else max(seconds, 2)


def lock_timeout_ms() -> int:
    """``$PI_STORE_LOCK_TIMEOUT`` in ms (default :data:`BUSY_TIMEOUT_MS`; 0: wait as long as it takes)."""
    return round(_seconds("PI_STORE_LOCK_TIMEOUT", BUSY_TIMEOUT_MS / 1000) * 1000)


def statement_timeout_ms(url: URL | None = None) -> int:
    """The URL's ``statement_timeout`` option, else ``$PI_STORE_STATEMENT_TIMEOUT``, in ms
    (default 0: no limit; PostgreSQL only)."""
    name, value = store_setting(url, "statement_timeout")
    return round(_seconds(name, 0, value) * 1000)


# ------------------------------------------------------------------ server settings (PostgreSQL)
# query options of a PostgreSQL URL that are this project's settings, not libpq's, with the
# environment variable each falls back to; make_engine takes them out before the driver connects
STORE_OPTIONS = {"pool_size": "PI_STORE_POOL_SIZE", "max_overflow": "PI_STORE_MAX_OVERFLOW",
                 "pooler": "PI_STORE_POOLER", "statement_timeout": "PI_STORE_STATEMENT_TIMEOUT"}
POOLERS = ("none", "transaction")
APPLICATION_NAME = "pi-store"
# behind a transaction pooler the timeouts hold for one transaction: the first statement of each
_LOCAL_TIMEOUTS = "SELECT set_config('lock_timeout', %s, true), set_config('statement_timeout', %s, true)"
_LOCAL = "pi_store_local_timeouts"
_FRESH = "pi_store_fresh"  # a pooled connection not checked out since it was made
# set while driver_write_transaction checks a connection out: its first statements are the ping
_UNCHECKED: ContextVar[bool] = ContextVar("pi_store_unchecked_checkout", default=False)


def store_setting(url: URL | None, option: str) -> tuple[str, str | None]:
    """A setting of :data:`STORE_OPTIONS`: the name an error message gives it (the URL's query
    option, else its environment variable) and its text (None: unset)."""
    if url is not None and option in url.query:
        value = url.query[option]
        return f"the URL option {option}", value[-1] if isinstance(value, tuple) else value
    name = STORE_OPTIONS[option]
    return name, os.environ.get(name, "").strip() or None


def _count(url: URL, option: str, default: int, minimum: int) -> int:
    return whole_number(*store_setting(url, option), default, minimum)


def whole_number(name: str, value: str | None, default: int, minimum: int) -> int:
    """The setting ``name`` given as ``value`` (None: unset, ``default``), a whole number of at
    least ``minimum``; else :class:`BadSetting`."""
    if value is None:
        return default
    if not (value.strip().isdigit() and int(value) >= minimum):
        raise BadSetting(f"{name} must be a whole number of at least {minimum}, not {value!r}")
    return int(value)


def pool_options(url: URL) -> dict[str, int]:
    """``pool_size`` (connections kept open, default 5) and ``max_overflow`` (more opened while
    all are in use, closed when returned, default 10) for the engine's pool."""
    return {"pool_size": _count(url, "pool_size", 5, 1), "max_overflow": _count(url, "max_overflow", 10, 0)}


def behind_pooler(url: URL) -> bool:
    """Whether a pooler in transaction mode sits between the store and the server
    (``pooler=transaction``): no state may then outlive a transaction, see :func:`_postgres_args`."""
    name, value = store_setting(url, "pooler")
    if value is not None and value not in POOLERS:
        raise BadSetting(f"{name} must be one of {', '.join(POOLERS)}, not {value!r}")
    return value == "transaction"


def parse_url(url: str | URL) -> URL:
    """``url`` parsed, if it is a database URL the store can use (SQLite or PostgreSQL); else
    :class:`BadSetting` naming it (a port that is not a number, ``mysql://``)."""
    from sqlalchemy.exc import ArgumentError

    if isinstance(url, str) and not url.isascii():
        try:
            url.encode()
        except UnicodeEncodeError:  # a file name in another encoding (Python's surrogate escapes)
            raise BadSetting(f"cannot open database {masked_url(url)}: its name is not valid UTF-8, which a "
                             "database URL must be (rename the file)") from None
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise BadSetting(f"cannot open database {masked_url(str(url))}: not a database URL ({exc})") from exc
    if parsed.get_backend_name() not in ("sqlite", "postgresql", "postgres"):  # postgres://: libpq's spelling
        raise BadSetting(f"cannot open database {masked_url(str(url))}: pi-store keeps sessions in SQLite or "
                         f"PostgreSQL, not {parsed.get_backend_name()}")
    return parsed


# The drivers a URL may name, for the sync and the async API alike (each API then uses its own:
# ``sqlite``/``sqlite+aiosqlite``, ``postgresql+psycopg``/``postgresql+psycopg_async``): a URL
# that works with one works with the other.
_DRIVERS = {"sqlite": ("", "pysqlite", "aiosqlite"), "postgresql": ("", "psycopg", "psycopg_async")}


def normalize_url(url: str | URL) -> URL:
    """The URL as the sync API opens it: ``sqlite://`` (also when it names ``+pysqlite`` or
    ``+aiosqlite``), ``postgresql+psycopg://`` (for ``postgres://``, ``postgresql://``,
    ``+psycopg_async``); another driver is :class:`BadSetting` (psycopg2 and asyncpg were
    refused by one API and silently replaced by the other)."""
    parsed = parse_url(url)
    backend, _, driver = parsed.drivername.partition("+")
    backend = "postgresql" if backend == "postgres" else backend
    if driver not in _DRIVERS[backend]:
        ours = ("SQLite through Python's sqlite3", "sqlite:///FILE") if backend == "sqlite" else \
            ("PostgreSQL through psycopg 3", "postgresql://...")
        raise BadSetting(f"cannot open database {masked_url(str(url))}: pi-store reaches {ours[0]}, not {driver} "
                         f"(write {ours[1]})")
    return parsed.set(drivername="sqlite" if backend == "sqlite" else "postgresql+psycopg")


def sqlite_path(url: str | URL) -> Path | None:
    """The database file of a SQLite URL (None for other engines and in-memory databases)."""
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def sqlite_read_only_uri(path: Path, mode: ReadOnly) -> str:
    """The ``file:`` URI that opens ``path`` read-only.

    ``ro``: a read-only connection that still sees concurrent writers' commits (it needs the
    ``-shm`` file, created if missing). ``immutable``: no locking and no ``-wal`` read at all,
    right only while nobody can change the file: SQLite's documentation says an immutable file
    that changes anyway may give wrong results. Only used when ``ro`` cannot open the file (a
    read-only folder or a full disk: no ``-shm`` can be made) and no ``-wal`` holds commits.
    """
    query = "mode=ro" if mode == "ro" else "immutable=1"
    return f"file:{urllib.parse.quote(str(path.absolute()))}?{query}"


def wal_holds_commits(path: Path) -> bool:
    """Whether the database's ``-wal`` file has content (commits not yet in the database file)."""
    try:
        return Path(f"{path}-wal").stat().st_size > 0
    except FileNotFoundError:
        return False


def read_only_modes(path: Path) -> tuple[ReadOnly, ...]:
    """The ways to open the SQLite file ``path`` without writing, to try in turn: ``mode=ro``
    (right with concurrent writers, but it needs to make the ``-shm`` file), then ``immutable``
    unless a ``-wal`` file holds commits it would not see."""
    return ("ro",) if wal_holds_commits(path) else ("ro", "immutable")


_URL_SCHEME = re.compile(r"^[A-Za-z][\w+.-]*://")


def resolve_url(database: str) -> str:
    """A SQLAlchemy URL for ``database``: a URL (``scheme://...``) as given, anything else a SQLite
    file path (``x.db`` relative to the current directory, ``~`` expanded), as ``sqlite:////abs/x.db``."""
    if _URL_SCHEME.match(database):
        return database
    try:
        return sqlite_file_url(Path(database).expanduser())
    except RuntimeError as exc:  # ~user of no such user
        raise StoreError(f"{database}: {exc}") from exc


def sqlite_file_url(path: Path) -> str:
    """The SQLite URL of the file ``path`` (made absolute): a URL decodes ``%XX`` and ends its
    path at ``?``, so those two are escaped."""
    return "sqlite:///" + str(path.absolute()).replace("%", "%25").replace("?", "%3F")


def default_url(*, make_folder: bool = False) -> str:
    """``$PI_STORE_DB`` (a URL or a file path, see :func:`resolve_url`), else the SQLite file
    :func:`default_file`, whose folder is made only when ``make_folder`` (a store about to write)."""
    if database := os.environ.get("PI_STORE_DB"):
        return resolve_url(database)
    path = default_file()
    if make_folder:
        path.parent.mkdir(parents=True, exist_ok=True)
    return sqlite_file_url(path)


def default_file() -> Path:
    """The store's file when no database is named: ``$XDG_DATA_HOME/pi-store/sessions.db``."""
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "pi-store" / "sessions.db"


def make_engine(url: str | URL, *, read_only: ReadOnly | None = None, wal: bool = True) -> Engine:
    """Create an engine with this project's connection settings (no schema changes).

    ``read_only`` (SQLite files only): open the file without writing to it, see
    :func:`sqlite_read_only_uri`; every write then fails with "attempt to write a readonly database".
    ``wal=False`` (SQLite): leave the file's journal mode as it is (read commands: a database
    that is not in WAL mode, or not a store at all, is not switched to it by a read).
    """
    return _build_engine(normalize_url(url), create_engine, read_only, wal)


ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+psycopg_async"}


def make_async_engine(url: str | URL) -> AsyncEngine:
    """:func:`make_engine`'s engine on SQLAlchemy's asyncio extension (``aiosqlite``, psycopg's
    async connection): the same settings, pragmas and event handlers, registered on its
    ``sync_engine`` — the engine every function of this package is given (``store.aio``)."""
    from sqlalchemy.ext.asyncio import create_async_engine

    parsed = normalize_url(url)
    return _build_engine(parsed.set(drivername=ASYNC_DRIVERS[parsed.get_backend_name()]), create_async_engine)


def _build_engine(parsed: URL, create: Callable[..., Any], read_only: ReadOnly | None = None,
                  wal: bool = True) -> Any:
    """The engine ``create`` (``create_engine`` or ``create_async_engine``) makes of ``parsed``,
    with this project's settings (see :func:`make_engine`)."""
    lock_ms = lock_timeout_ms()
    if parsed.get_backend_name() == "sqlite":
        if parsed.query:  # SQLAlchemy would warn and ignore them
            raise BadSetting(f"a SQLite URL takes no options here (given: {', '.join(sorted(parsed.query))}); "
                             "read commands open a file they cannot write read-only by themselves")
        memory = parsed.database in (None, "", ":memory:")
        options: dict[str, Any] = {}
        if read_only is not None:
            if memory:
                raise ValueError("an in-memory database cannot be opened read-only")
            uri = sqlite_read_only_uri(Path(parsed.database), read_only)
            options["creator"] = lambda: sqlite3.connect(uri, uri=True, check_same_thread=False,
                                                         timeout=_sqlite_busy_ms(lock_ms) / 1000)
        engine = create(
            parsed,
            poolclass=StaticPool if memory else None,
            connect_args={"check_same_thread": False, "timeout": _sqlite_busy_ms(lock_ms) / 1000},
            **options,
        )
        _configure_sqlite(_sync(engine), memory, read_only is not None, lock_ms, wal)
    else:
        engine = create(parsed, connect_args=_postgres_args(parsed, lock_ms), **pool_options(parsed))
        _configure_postgres(_sync(engine), parsed, lock_ms)
    _summarise_faults(_sync(engine))
    return engine


def close_engine(engine: Engine) -> None:
    """Close the pool's connections and open no more: a later call raises ``StoreClosed``
    (``Engine.dispose`` alone makes a new pool, so a closed store went on writing). Connections
    checked out now finish what they are doing and are closed when they are given back."""
    pool = engine.pool
    engine.pool = NullPool(_refuse_to_connect, dialect=pool._dialect)  # first: no checkout from a new pool
    event.listen(pool, "checkin", _close_on_checkin)
    pool.dispose()


def _refuse_to_connect() -> Any:
    raise StoreClosed("the store is closed")


def _close_on_checkin(_dbapi_connection: Any, record: Any) -> None:
    record.invalidate()  # closes the driver's connection; the closed pool never hands it out again


def _sync(engine: Engine | AsyncEngine) -> Engine:
    """The engine that events are registered on (an ``AsyncEngine``'s ``sync_engine``)."""
    return getattr(engine, "sync_engine", engine)


def _postgres_args(url: URL, lock_ms: int) -> dict[str, Any]:
    """psycopg connection arguments: the connect timeout, ``application_name`` (unless the URL or
    ``$PGAPPNAME`` names one), and the lock and statement timeouts as session defaults (after any
    ``options`` the URL gives).

    Behind a transaction pooler consecutive transactions may run on different server connections
    and other clients' transactions on this one: no ``options`` (PgBouncer refuses the startup
    parameter, and would share the settings), the timeouts set per transaction instead
    (:func:`_configure_postgres`), and no server-side prepared statements (psycopg prepares a
    statement from its fifth run on a connection, on the server connection that run had: another
    one has no such statement, or another client's under the same name).
    """
    args: dict[str, Any] = {"connect_timeout": connect_timeout_s(url)}
    if "application_name" not in url.query and not os.environ.get("PGAPPNAME"):
        args["application_name"] = APPLICATION_NAME
    if behind_pooler(url):
        return {**args, "prepare_threshold": None}
    settings = f"-c lock_timeout={lock_ms} -c statement_timeout={statement_timeout_ms(url)}"
    given = url.query.get("options")
    given = " ".join(given) if isinstance(given, tuple) else given
    return {**args, "options": f"{given} {settings}" if given else settings}


def _configure_postgres(engine: Engine, url: URL, lock_ms: int) -> None:
    """This project's URL options never reach the driver; behind a transaction pooler every
    transaction starts by setting its timeouts (``set_config(..., true)``: for this transaction
    only), SQLAlchemy's on ``begin`` and :func:`driver_write_transaction`'s through the setting
    kept in the pooled connection's ``info``."""
    local = (str(lock_ms), str(statement_timeout_ms(url))) if behind_pooler(url) else None

    @event.listens_for(engine, "do_connect")
    def _on_do_connect(_dialect: Any, record: Any, _cargs: list, cparams: dict) -> None:
        for option in STORE_OPTIONS:
            cparams.pop(option, None)
        if local is not None:
            record.info[_LOCAL] = local

    if local is not None:
        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql(_LOCAL_TIMEOUTS, local)

    @event.listens_for(engine, "connect")
    def _on_connect(_dbapi_connection: Any, record: Any) -> None:
        record.info[_FRESH] = True

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        # SQLAlchemy's pool_pre_ping, except for a connection just made and for a checkout whose
        # first statements prove the connection themselves (driver_write_transaction)
        if record.info.pop(_FRESH, False) or _UNCHECKED.get():
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            if engine.dialect.is_disconnect(exc, dbapi_connection, None):
                raise InvalidatePoolError() from exc  # the pool reconnects and tries again
            raise


def driver_connect(engine: Engine) -> Any:
    """A PostgreSQL driver connection of its own, outside the engine's pool, with the settings
    :func:`make_engine` gives the pool's; behind a transaction pooler the caller sets any timeout
    it needs in its transaction."""
    cargs, cparams = engine.dialect.create_connect_args(engine.url)
    for option in STORE_OPTIONS:
        cparams.pop(option, None)
    cparams.update(_postgres_args(engine.url, lock_timeout_ms()))
    return engine.dialect.connect(*cargs, **cparams)


def _summarise_faults(engine: Engine) -> None:
    """Faults (``store.db.faults.fault_reason``) leave the engine with a one-line message."""

    @event.listens_for(engine, "handle_error")
    def _on_error(context: ExceptionContext) -> BaseException | None:
        error = context.sqlalchemy_exception
        if not isinstance(error, DBAPIError):
            return None
        summarised = summarise(engine, error, connecting=context.connection is None)
        return summarised if summarised is not error else None


def summarise(engine: Engine, error: DBAPIError, *, connecting: bool = False) -> DBAPIError:
    """``error`` with a one-line message when it is a fault (else ``error`` itself): the reason
    and the database, or ``cannot connect to DATABASE: reason`` when a connection to a server failed."""
    postgres = engine.dialect.name == "postgresql"
    reason = fault_reason(error, connecting=connecting and postgres,
                          connect_timeout_s=connect_timeout_s(engine.url) if postgres else None)
    if reason is None:
        return error
    where = masked_url(engine.url)
    return with_summary(error, f"cannot connect to {where}: {reason}" if connecting and postgres
                        else f"{reason} ({where})")


def _sqlite_busy_ms(lock_ms: int) -> int:
    """SQLite's busy timeout for a lock timeout: 0 means no limit, which SQLite spells as its
    largest timeout (its own 0 is "do not wait at all")."""
    return lock_ms or 2**31 - 1


def _lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


def _configure_sqlite(engine: Engine, memory: bool, read_only: bool, lock_ms: int, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (see _on_begin)
        cur = dbapi_conn.cursor()
        if read_only:
            cur.execute("PRAGMA query_only=ON")
        elif wal and not memory:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA cache_size=-32768")  # 32 MiB of page cache: long batches and imports
        # checkpoint every ~40 MB of WAL instead of 4 MB: each checkpoint syncs the database file,
        # and an append dirties ~7 pages (row, indexes, session row); measured +15 % single appends
        cur.execute("PRAGMA wal_autocheckpoint=10000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={_sqlite_busy_ms(lock_ms)}")
        cur.close()
        # lower() of every script's letters (SQLite's own folds ASCII only): the listing's name filter
        dbapi_conn.create_function("pi_lower", 1, _lower, deterministic=True)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # through SQLAlchemy, so that a lock held past the busy timeout raises its OperationalError
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.pop(_WRITE, False) else "BEGIN")


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction that will write: on SQLite it holds the write lock from its first statement."""
    with engine.connect() as conn:
        conn.info[_WRITE] = True
        with conn.begin():
            yield conn


@contextmanager
def driver_write_transaction(engine: Engine, begin: Callable[[Any, str], T]) -> Iterator[T]:
    """A write transaction straight on a pooled DBAPI connection, for the few fixed statements of
    one append: SQLAlchemy's ``Connection`` costs more per transaction (checkout events, begin and
    commit bookkeeping) than the statements themselves. ``begin(dbapi_connection, opening)``
    sends the transaction's first statements, which must only read (the session row under its
    lock); the block gets what it returns. Commits when the block ends, rolls back when it raises.

    On PostgreSQL every statement is a round trip, so ``begin`` opens the transaction itself:
    ``opening`` is the SQL that does it (``BEGIN;`` and, behind a transaction pooler, the
    timeouts), to send in front of its first statement as one simple query; the connection is in
    autocommit mode meanwhile (psycopg would send its own ``BEGIN`` first), and back to normal
    when it returns to the pool. On SQLite ``opening`` is empty (``BEGIN IMMEDIATE`` was sent).

    On PostgreSQL the connection is not pinged when it leaves the pool (another round trip): if
    it turns out dead during ``begin`` — the server restarted, say — nothing can have been
    written, so it is discarded and the transaction starts again on a pinged connection. A
    connection that dies later fails the append as it is (its commit may have been applied).
    """
    error = engine.dialect.loaded_dbapi.Error
    try:
        pooled, value = _begun(engine, begin, unchecked=True)
    except error as exc:
        raise driver_error(engine, exc) from exc
    try:
        try:
            yield value
        except BaseException:
            pooled.rollback()
            raise
        pooled.commit()
    except error as exc:  # the block's statements go to the driver: its errors, as SQLAlchemy's
        raise driver_error(engine, exc) from exc
    finally:
        _give_back(engine, pooled)


class ConnectionLost(StoreError):
    """The connection of :func:`driver_statement` failed: its statement may or may not have been
    applied (the caller must find out, under the lock, before it writes again)."""


def driver_statement(engine: Engine, run: Callable[[Any], T]) -> T:
    """``run(dbapi_connection)`` on a pooled PostgreSQL connection in autocommit mode, not pinged
    when it leaves the pool: a single statement that is its own transaction (one round trip where
    :func:`driver_write_transaction` takes three). Only when no timeout must be set per
    transaction (not behind a transaction pooler). A connection that fails raises
    :class:`ConnectionLost` (and is discarded); other driver errors as SQLAlchemy's."""
    token = _UNCHECKED.set(True)
    try:
        pooled = engine.raw_connection()
    finally:
        _UNCHECKED.reset(token)
    try:
        pooled.dbapi_connection.autocommit = True
        return run(pooled.dbapi_connection)
    except engine.dialect.loaded_dbapi.Error as exc:
        if engine.dialect.is_disconnect(exc, pooled.dbapi_connection, None):
            pooled.invalidate(exc)
            raise ConnectionLost(f"the connection failed during an append: {exc}") from exc
        raise driver_error(engine, exc) from exc
    finally:
        _give_back(engine, pooled)


def driver_error(engine: Engine, error: Exception, statement: str | None = None) -> DBAPIError:
    """A driver's error of a statement sent past SQLAlchemy (:func:`driver_write_transaction`,
    ``BEGIN IMMEDIATE``) as SQLAlchemy raises it for its own statements: its class
    (``OperationalError`` for a lock timeout, say) and, for a fault, the one-line summary."""
    return summarise(engine, DBAPIError.instance(statement, (), error, engine.dialect.loaded_dbapi.Error,
                                                 dialect=engine.dialect))


def _begun(engine: Engine, begin: Callable[[Any, str], T], *, unchecked: bool) -> tuple[Any, T]:
    """A pooled connection on which ``begin`` ran (see :func:`driver_write_transaction`)."""
    postgres = engine.dialect.name == "postgresql"
    token = _UNCHECKED.set(unchecked and postgres)
    try:
        pooled = engine.raw_connection()
    finally:
        _UNCHECKED.reset(token)
    try:
        if postgres:
            pooled.dbapi_connection.autocommit = True
            local = pooled.info.get(_LOCAL)  # behind a transaction pooler, see _configure_postgres
            opening = "BEGIN; " + (_LOCAL_TIMEOUTS % tuple(f"'{int(ms)}'" for ms in local) + "; " if local else "")
        else:  # SQLite: the database's write lock before anything is read
            _begin_immediate(engine, pooled.dbapi_connection)
            opening = ""
        return pooled, begin(pooled.dbapi_connection, opening)
    except engine.dialect.loaded_dbapi.Error as exc:
        dead = postgres and unchecked and engine.dialect.is_disconnect(exc, pooled.dbapi_connection, None)
        if dead:
            pooled.invalidate(exc)
        else:
            pooled.rollback()
        _give_back(engine, pooled)
        if dead:
            return _begun(engine, begin, unchecked=False)
        raise
    except BaseException:
        pooled.rollback()
        _give_back(engine, pooled)
        raise


def _give_back(engine: Engine, pooled: Any) -> None:
    """Return a connection of :func:`driver_write_transaction` to the pool (out of autocommit
    mode; one that cannot be is closed instead)."""
    if engine.dialect.name == "postgresql" and pooled.dbapi_connection is not None:
        try:
            pooled.dbapi_connection.autocommit = False
        except engine.dialect.loaded_dbapi.Error as exc:
            pooled.invalidate(exc)
    pooled.close()


def _begin_immediate(engine: Engine, driver: Any) -> None:
    """``BEGIN IMMEDIATE`` on a sqlite3 connection (or the asyncio extension's adapter of an
    aiosqlite one, which has the same ``execute``); a lock held past the busy timeout raises
    SQLAlchemy's ``OperationalError``, as :func:`write_transaction` does."""
    try:
        driver.execute("BEGIN IMMEDIATE")
    except engine.dialect.loaded_dbapi.Error as exc:
        raise driver_error(engine, exc, "BEGIN IMMEDIATE") from exc


@contextmanager
def read_transaction(engine: Engine) -> Iterator[Connection]:
    """A snapshot: one transaction whose queries all see the same state, whatever other writers
    commit meanwhile. SQLite's transactions are (WAL: the snapshot of the first read); on
    PostgreSQL that takes ``REPEATABLE READ`` (the default, ``READ COMMITTED``, gives each
    statement its own, and ``verify`` comparing two reads of a session could see a commit land
    between them). A transaction that only reads never fails for it."""
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn


def is_sqlite(conn_or_engine: Connection | Engine) -> bool:
    return conn_or_engine.dialect.name == "sqlite"


def ensure_schema(engine: Engine) -> None:
    """Bring the database to the newest Alembic revision (creating it when empty).

    A database already at the head costs one query: Alembic (slow to import) is loaded only when
    the stored revision is not the one :func:`script_head` reads from the migration scripts.
    """
    if script_head() is not None and stored_revision(engine) == script_head():
        return
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    config = alembic_config(engine)
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    if current == head_revision():
        return
    if current is not None:
        from alembic.script import ScriptDirectory
        from alembic.util import CommandError

        try:
            ScriptDirectory.from_config(config).get_revision(current)
        except CommandError as exc:
            raise StoreError(f"the database's schema is at revision {current!r}, which this pi-store does not know: "
                             "it was made or upgraded by a newer pi-store (upgrade this one)") from exc
    with migration_transaction(engine) as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")


class ForeignKeyViolation(StoreError):
    """A migration left rows whose foreign keys point nowhere (it was rolled back)."""


@contextmanager
def migration_transaction(engine: Engine) -> Iterator[Connection]:
    """The transaction migrations run in. SQLite: with foreign keys off (they can only be switched
    outside a transaction), so that a migration can rebuild a parent table (rename it aside, create
    it anew, drop the old one) without renaming its children's references or cascading the drop;
    ``PRAGMA foreign_key_check`` must then find nothing, or the whole migration is rolled back.

    One process migrates at a time, the others wait (up to the lock timeout) and then find the
    schema at the revision it left: on SQLite the transaction takes the write lock before its
    first read (a read transaction that then writes fails at once when another wrote first), on
    PostgreSQL a transaction-scoped advisory lock comes first (two creating the same tables at
    once fail on the catalog's unique indexes)."""
    with engine.connect() as conn:
        sqlite = is_sqlite(conn)
        # outside SQLAlchemy's transaction (it would BEGIN); a DB-API cursor: the same call on
        # sqlite3 and on the async engine's aiosqlite adapter
        driver = conn.connection.dbapi_connection.cursor()
        if sqlite:
            driver.execute("PRAGMA foreign_keys = OFF")
            conn.info[_WRITE] = True  # BEGIN IMMEDIATE (see _configure_sqlite)
        try:
            with conn.begin():
                if not sqlite:
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
                yield conn
                if sqlite and (broken := conn.exec_driver_sql("PRAGMA foreign_key_check").all()):
                    raise ForeignKeyViolation(f"the migration left {len(broken)} row(s) whose foreign key "
                                              f"points nowhere (first: {tuple(broken[0])}); rolled back")
        except BaseException:
            # Ctrl-C may have closed the connection already: its restore must not replace the interrupt
            with contextlib.suppress(Exception):
                _end_migration(driver, sqlite)
            raise
        _end_migration(driver, sqlite)


def _end_migration(driver: Any, sqlite: bool) -> None:
    if sqlite:
        driver.execute("PRAGMA foreign_keys = ON")
    driver.close()


def alembic_config(engine: Engine | None = None):
    """An Alembic config pointing at this package's migrations (and at ``engine`` if given)."""
    from alembic.config import Config

    from store import migrations

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    if engine is not None:  # the config is a ConfigParser: "%" starts an interpolation unless doubled
        url = engine.url.render_as_string(hide_password=False)
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


_REVISION = re.compile(r'^(down_)?revision\s*(?::[^=]*)?=\s*(?:"([^"]*)"|\'([^\']*)\'|None)', re.M)


@functools.cache
def script_head() -> str | None:
    """The newest revision of ``store.migrations``, read from its scripts without Alembic (None
    when they do not form one plain chain: then Alembic decides)."""
    from store import migrations

    revisions: dict[str, str | None] = {}
    for script in (Path(migrations.__file__).parent / "versions").glob("*.py"):
        found = {down: rev or rev2 for down, rev, rev2 in _REVISION.findall(script.read_text("utf-8"))}
        if "" not in found:
            return None
        revisions[found[""]] = found.get("down_") or None
    heads = set(revisions) - set(revisions.values())
    return heads.pop() if len(heads) == 1 else None


def stored_revision(engine: Engine) -> str | None:
    """The database's Alembic revision (None when it has none yet)."""
    from sqlalchemy import text

    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except DBAPIError:  # no such table: a new database
        return None


def table_names(engine: Engine) -> list[str]:
    return inspect(engine).get_table_names()
