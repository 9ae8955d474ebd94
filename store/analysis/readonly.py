"""``pi-store sql``: one statement that cannot change anything, streamed as a table, CSV or JSON.

Read-only is enforced by the database, not by reading the text, on a connection of its own that
is closed after the call (never one of the pool's, so nothing the statement sets outlives it):

* SQLite: the file opened with ``mode=ro``, ``PRAGMA query_only`` on, and an authorizer that
  allows reading tables, a few informational pragmas and functions other than
  :data:`DENIED_FUNCTIONS` — no ``ATTACH``, no write, no transaction control, no ``VACUUM``.
  The driver refuses a second statement. (An in-memory database has no file to reopen: its one
  connection runs the statement under the same authorizer, removed afterwards.)
* PostgreSQL: a ``READ ONLY`` transaction whose first query (setting ``statement_timeout``)
  takes its snapshot, so ``transaction_read_only`` can no longer be switched off; the statement is
  then a parameter of ``pi_store_sql_open`` (migration 0005), which opens it as a cursor — one
  ``SELECT``, ``VALUES``, ``TABLE``, ``SHOW`` or ``EXPLAIN``, never two — and rows come from
  ``pi_store_sql_fetch``. Both are security-definer functions of the role ``pi_store_reader``
  (``SELECT`` on the store's tables only), so the statement is checked and evaluated as that role,
  and cannot switch back to the connecting user (``set_config('role', ...)`` is refused inside
  a security-definer function): no file or program access, no ``COPY``, no large objects.
  Session-level advisory locks it took are released when it ends (behind a pooler the server
  connection lives on).

Both engines stop the statement after ``timeout`` seconds from the start of the call (until its
last row is read). Rows are fetched a batch at a time: memory stays flat for any result size.
"""

from __future__ import annotations

import base64
import io
import itertools
import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy import Engine

from store.analysis import fts
from store.db.engine import ReadOnly, driver_connect, is_sqlite, sqlite_read_only_uri, wal_holds_commits
from store.db.faults import CANNOT_WRITE, sqlite_fault
from store.delimited import CsvWriter
from store.errors import StoreError
from store.format import js_stringify
from store.visible_text import visible

CELL_WIDTH = 80
DEFAULT_TIMEOUT = 30.0
BATCH_ROWS = 2_000
TABLE_PAGE = 1_000  # rows the table output sizes its columns from
DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit"})
# pragmas that only describe the schema or the build, whatever their argument
_INFO_PRAGMAS = frozenset({"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
                           "foreign_key_list", "function_list", "module_list", "pragma_list", "collation_list",
                           "compile_options"})
# settings that may be read (a pragma without an argument), never set
_READABLE_PRAGMAS = frozenset({"user_version", "application_id", "schema_version", "data_version", "page_size",
                               "page_count", "freelist_count", "encoding", "journal_mode", "foreign_keys"})
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
_PG_CURSOR = b"pi_store_sql"


class QueryFailed(StoreError):
    """The database refused the statement (syntax, a missing table, a write attempt, a timeout, ...)."""


@dataclass(frozen=True, slots=True)
class ResultSet:
    columns: list[str]
    rows: list[tuple]


class Rows:
    """The rows of a running statement, read as they are iterated (once); ``columns`` are known
    before the first row. A database error while reading raises :class:`QueryFailed`."""

    def __init__(self, columns: list[str], batches: Iterator[list[tuple]], failure: Callable[[Exception], QueryFailed]):
        self.columns = columns
        self._batches = batches
        self._failure = failure

    def __iter__(self) -> Iterator[tuple]:
        try:
            for batch in self._batches:
                yield from batch
        except QueryFailed:
            raise
        except Exception as exc:
            raise self._failure(exc) from exc


@contextmanager
def stream_sql(engine: Engine, sql: str, *, timeout: float | None = DEFAULT_TIMEOUT) -> Iterator[Rows]:
    """Run one statement read-only and yield its :class:`Rows` (the SQLite search index is
    brought up to date first, on the normal write connection). ``timeout``: seconds from now
    until the statement is stopped; ``None`` or 0 for no limit."""
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: a byte of the command line that is not UTF-8
        raise QueryFailed(f"the statement is not valid UTF-8 (at character {exc.start + 1})") from exc
    fts.sync(engine)
    deadline = time.monotonic() + timeout if timeout else None

    def failure(exc: Exception) -> QueryFailed:
        if deadline is not None and time.monotonic() >= deadline:  # (_pg_timeout: the server's never fires sooner)
            return QueryFailed(f"statement timeout: stopped after {timeout:g} s (pi-store sql --timeout SECONDS)")
        if isinstance(exc, sqlite3.OperationalError) and str(exc) == "interrupted":
            # Ctrl-C's KeyboardInterrupt, raised inside the progress handler, which SQLite turns
            # into this error: the caller sees the interrupt, as it would on PostgreSQL
            raise KeyboardInterrupt from exc
        message = str(exc).strip()
        return QueryFailed(message.splitlines()[0] if message else type(exc).__name__)

    opener = _sqlite_rows if is_sqlite(engine) else _postgres_rows
    running = False
    try:
        with opener(engine, sql, deadline, failure) as rows:
            running = True
            yield rows
    except QueryFailed:
        raise
    except Exception as exc:  # any driver error: report it as the database worded it
        if running:  # the caller's own (writing the rows out: a closed pipe, a full disk), not the query's
            raise
        raise failure(exc) from exc


def run_sql(engine: Engine, sql: str, *, timeout: float | None = DEFAULT_TIMEOUT) -> ResultSet:
    """:func:`stream_sql` with every row in a list."""
    with stream_sql(engine, sql, timeout=timeout) as rows:
        return ResultSet(rows.columns, list(rows))


# SQLite ---------------------------------------------------------------------------------------

def _authorize(action: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None) -> int:
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() in DENIED_FUNCTIONS else sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master":
        # asked while a virtual table (FTS5, a pragma function) is connected; a statement of the
        # user's cannot write it: the file is read-only, query_only is on, writable_schema is off
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name in _INFO_PRAGMAS or (name in _READABLE_PRAGMAS and arg2 is None):
            return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _guard(conn: sqlite3.Connection, deadline: float | None) -> None:
    conn.execute("PRAGMA query_only = ON")
    conn.set_authorizer(_authorize)
    # without a deadline too: SQLite runs a statement in C, and Python runs its signal handlers
    # (Ctrl-C's KeyboardInterrupt, which then stops the statement) only when some Python runs
    conn.set_progress_handler((lambda: time.monotonic() >= deadline) if deadline is not None else lambda: False, 1_000)


def _sqlite_batches(cursor: sqlite3.Cursor) -> Iterator[list[tuple]]:
    while batch := cursor.fetchmany(BATCH_ROWS):
        yield batch


@contextmanager
def _sqlite_rows(engine: Engine, sql: str, deadline: float | None,
                 failure: Callable[[Exception], QueryFailed]) -> Iterator[Rows]:
    database = engine.url.database
    if database in (None, "", ":memory:"):
        with _shared_memory_connection(engine, deadline) as conn:
            cursor = conn.execute(sql)
            yield Rows([d[0] for d in cursor.description or ()], _sqlite_batches(cursor), failure)
        return
    path = Path(os.path.abspath(database))
    # mode=ro needs the -shm file: in a read-only folder (or on a full disk) the file is opened
    # immutable instead, as the CLI opens such a store, when no -wal file holds commits
    modes: tuple[ReadOnly, ...] = ("ro",) if wal_holds_commits(path) else ("ro", "immutable")
    for mode in modes:
        conn = sqlite3.connect(sqlite_read_only_uri(path, mode), uri=True, isolation_level=None,
                               check_same_thread=False, timeout=5.0)
        try:
            _guard(conn, deadline)
            try:
                cursor = conn.execute(sql)
            except sqlite3.Error as exc:
                if mode != modes[-1] and sqlite_fault(exc) in CANNOT_WRITE:
                    continue
                raise
            if cursor.description is None:  # a comment, an empty statement: as PostgreSQL says it
                raise QueryFailed("the statement returns no columns")
            yield Rows([d[0] for d in cursor.description or ()], _sqlite_batches(cursor), failure)
            return
        finally:
            conn.close()


@contextmanager
def _shared_memory_connection(engine: Engine, deadline: float | None) -> Iterator[sqlite3.Connection]:
    """The in-memory database's only connection, guarded for the call: the authorizer lets no
    setting change, so removing it and ``query_only`` afterwards restores the connection."""
    with engine.connect() as connection:
        raw = connection.connection.driver_connection
        _guard(raw, deadline)
        try:
            yield raw
        finally:
            raw.set_authorizer(None)
            raw.set_progress_handler(None, 0)
            raw.execute("PRAGMA query_only = OFF")


# PostgreSQL -----------------------------------------------------------------------------------

@contextmanager
def _postgres_rows(engine: Engine, sql: str, deadline: float | None,
                   failure: Callable[[Exception], QueryFailed]) -> Iterator[Rows]:
    import psycopg

    conn: psycopg.Connection = driver_connect(engine)
    try:
        _load_as_postgresql_writes(conn)
        conn.autocommit = True  # the transaction below is ours, as written
        cursor = conn.cursor()
        cursor.execute("BEGIN READ ONLY")
        _pg_timeout(cursor, deadline)  # also the transaction's first query: its snapshot is taken
        cursor.execute("SELECT to_regprocedure('pi_store_sql_open(text)') IS NOT NULL")
        if not cursor.fetchone()[0]:
            raise QueryFailed("this database has no pi_store_reader setup (migration 0005 needs a user with "
                              "CREATEROLE or SUPERUSER): pi-store sql refuses to run here")
        try:
            cursor.execute("SELECT pi_store_sql_open(%s)", [sql])
        except psycopg.errors.InvalidCursorDefinition as exc:
            raise QueryFailed("only one SELECT, VALUES, TABLE, SHOW or EXPLAIN statement runs here "
                              f"({exc.diag.message_primary})") from exc
        described = conn.pgconn.describe_portal(_PG_CURSOR)
        if described.status != psycopg.pq.ExecStatus.COMMAND_OK:
            raise QueryFailed((described.error_message or b"").decode(errors="replace").strip())
        names = [described.fname(i).decode() for i in range(described.nfields)]
        if not names:
            raise QueryFailed("the statement returns no columns")
        cursor.execute("SELECT format_type(t, m), typtype = 'p' FROM unnest(%s::oid[], %s::int[]) "
                       "WITH ORDINALITY AS u(t, m, i) JOIN pg_type ON pg_type.oid = t ORDER BY i",
                       [[described.ftype(i) for i in range(len(names))],
                        [described.fmod(i) for i in range(len(names))]])
        types = cursor.fetchall()
        for (name, (kind, pseudo)) in zip(names, types, strict=True):
            if pseudo:  # no column of a row set can have it (pg_sleep() returns void)
                raise QueryFailed(f'column "{name}" has the pseudo-type {kind}, which a result row cannot hold: '
                                  "cast it to text (...::text) or leave it out")
        fetch = ("SELECT * FROM pi_store_sql_fetch(%s) AS t("
                 + ", ".join(f"c{i} {t}" for i, (t, _) in enumerate(types)) + ")")

        def batches() -> Iterator[list[tuple]]:
            while True:
                _pg_timeout(cursor, deadline)
                cursor.execute(fetch, [BATCH_ROWS])
                batch = cursor.fetchall()
                if batch:
                    yield batch
                if len(batch) < BATCH_ROWS:
                    return

        yield Rows(names, batches(), failure)
    finally:
        with suppress(psycopg.Error):  # ended here, not by closing: a pooler can reuse its server connection
            conn.execute("ROLLBACK")
            # a session-level advisory lock (pg_advisory_lock may run in a read-only transaction)
            # outlives the rollback: released too, or the pooler's next client inherits it
            conn.execute("SELECT pg_advisory_unlock_all()")
        conn.close()  # nothing was written, nothing stays


def _load_as_postgresql_writes(conn: Any) -> None:
    """Values Python's types would change or cannot hold, as PostgreSQL's text: an interval (a
    ``timedelta`` has no months: ``'1 month'`` became "30 days, 0:00:00"), and dates and
    timestamps out of Python's range (``infinity``, BC, after 9999), which failed the query."""
    import psycopg
    from psycopg.types.datetime import DateLoader, TimestampLoader, TimestamptzLoader
    from psycopg.types.string import TextLoader

    conn.adapters.register_loader("interval", TextLoader)
    for name, loader in (("date", DateLoader), ("timestamp", TimestampLoader), ("timestamptz", TimestamptzLoader)):

        class OrText(loader):  # type: ignore[valid-type,misc]
            def load(self, data: Any) -> Any:
                try:
                    return super().load(data)
                except psycopg.DataError:
                    return bytes(data).decode()

        conn.adapters.register_loader(name, OrText)


def _pg_timeout(cursor: Any, deadline: float | None) -> None:
    """``statement_timeout`` for the next statement: what is left until ``deadline``."""
    left_ms = 0 if deadline is None else math.ceil((deadline - time.monotonic()) * 1000)  # not before it
    if deadline is not None and left_ms <= 0:
        raise TimeoutError("statement timeout: the time limit passed between two fetches")
    cursor.execute("SELECT set_config('statement_timeout', %s, true)", [str(left_ms)])


# Output ---------------------------------------------------------------------------------------

def json_value(value: Any) -> Any:
    """A cell as a JSON value (decimals as numbers, bytes as base64; jsonb values stay JSON)."""
    if isinstance(value, Decimal):  # NaN and ±Infinity (PostgreSQL's numeric has them) as floats: null
        return int(value) if value.is_finite() and value == value.to_integral_value() else float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, (str, int, float, bool, dict, list)) or value is None:
        return value
    return str(value)


def cell_text(value: Any) -> str:
    """A cell as text (CSV and table): NULL is empty, numbers in all their digits (as
    ``--tsv`` writes them; ``--json`` has JSON.stringify's, which rounds past 2**53), everything
    else as ``--json`` writes it, strings without their quotes."""
    kind = type(value)
    if kind is str or kind is int:
        return str(value)
    if isinstance(value, Decimal) and value.is_finite():  # every digit (NaN, Infinity: JSON's null, below)
        return str(int(value)) if value == value.to_integral_value() else format(value, "f")
    value = json_value(value)
    if value is None:
        return ""
    return value if isinstance(value, str) else js_stringify(value)


def row_objects(columns: Sequence[str], rows: Iterable[tuple]) -> Iterator[dict]:
    for row in rows:
        yield {c: json_value(v) for c, v in zip(columns, row, strict=True)}


def write_json(columns: Sequence[str], rows: Iterable[tuple], out: TextIO) -> None:
    """A JSON list of row objects, one row written at a time (the same text as ``emit`` of the list)."""
    out.write("[")
    for i, obj in enumerate(row_objects(columns, rows)):
        out.write(("," if i else "") + js_stringify(obj))
    out.write("]\n")


def write_csv(columns: Sequence[str], rows: Iterable[tuple], out: TextIO) -> None:
    writer = CsvWriter(out)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([cell_text(v) for v in row])


def write_table(columns: Sequence[str], rows: Iterable[tuple], out: TextIO, width: int = CELL_WIDTH,
                page: int = TABLE_PAGE) -> None:
    """Aligned columns, sized from the first ``page`` rows (later, wider cells widen their line);
    cells on one line, cut at ``width`` characters; a row count at the end. Text is shown as
    ``list`` and ``tree`` show it (``visible``: escape sequences left out, other control
    characters and bidi overrides as ``⟨U+…⟩``), never sent to the terminal as it is."""
    def cell(value: Any) -> str:
        shown = "NULL" if value is None else " ".join(visible(cell_text(value)).split("\n"))
        return shown if len(shown) <= width else shown[: width - 1] + "…"

    columns = [cell(c) for c in columns]
    rows = iter(rows)
    first = [[cell(v) for v in row] for row in itertools.islice(rows, page)]
    widths = [max([len(c), *(len(r[i]) for r in first)]) for i, c in enumerate(columns)]

    def line(cells: Sequence[str]) -> str:
        return " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() + "\n"

    out.write(line(columns))
    out.write("-+-".join("-" * w for w in widths) + "\n")
    count = 0
    for cells in itertools.chain(first, ([cell(v) for v in row] for row in rows)):
        out.write(line(cells))
        count += 1
    out.write(f"({count} row{'' if count == 1 else 's'})\n")


def to_rows_json(result: ResultSet) -> list[dict]:
    return list(row_objects(result.columns, result.rows))


def to_csv(result: ResultSet) -> str:
    out = io.StringIO()
    write_csv(result.columns, result.rows, out)
    return out.getvalue()


def to_table(result: ResultSet, width: int = CELL_WIDTH) -> str:
    out = io.StringIO()
    write_table(result.columns, result.rows, out, width)
    return out.getvalue()
