"""``pi-store sql``: one statement on a read-only connection, rendered as a table, CSV or JSON.

Read-only is enforced by the database, not by inspecting the text: SQLite runs the statement with
``PRAGMA query_only`` on, PostgreSQL in a ``READ ONLY`` transaction. The statement goes to the
driver as written (no parameter substitution), one statement per call.
"""

from __future__ import annotations

import base64
import csv
import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Engine

from store.analysis import fts
from store.db.engine import is_sqlite
from store.errors import StoreError
from store.format import js_stringify

CELL_WIDTH = 80


class QueryFailed(StoreError):
    """The database refused the statement (syntax, a missing table, a write attempt, ...)."""


@dataclass(frozen=True, slots=True)
class ResultSet:
    columns: list[str]
    rows: list[tuple]


@contextmanager
def readonly_connection(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that cannot write (rolled back at the end)."""
    if is_sqlite(engine):
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            raw.execute("PRAGMA query_only = ON")
            try:
                with conn.begin() as transaction:
                    yield conn
                    transaction.rollback()
            finally:
                raw.execute("PRAGMA query_only = OFF")
        return
    with engine.connect().execution_options(postgresql_readonly=True) as conn, conn.begin() as transaction:
        yield conn
        transaction.rollback()


def run_sql(engine: Engine, sql: str) -> ResultSet:
    """Run one statement read-only (the SQLite search index is brought up to date first)."""
    fts.sync(engine)
    with readonly_connection(engine) as conn:
        cursor = conn.connection.dbapi_connection.cursor()
        try:
            cursor.execute(sql)
            columns = [d[0] for d in cursor.description or ()]
            rows = [tuple(row) for row in cursor.fetchall()] if cursor.description else []
        except Exception as exc:  # any driver error: report it as the database worded it
            raise QueryFailed(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__) from exc
    return ResultSet(columns, rows)


def json_value(value: Any) -> Any:
    """A cell as a JSON value (decimals as numbers, bytes as base64; jsonb values stay JSON)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, (str, int, float, bool, dict, list)) or value is None:
        return value
    return str(value)


def cell_text(value: Any) -> str:
    """A cell as text (CSV and table): NULL is empty, everything else as ``--json`` writes it
    (JSON.stringify's form), strings without their quotes."""
    value = json_value(value)
    if value is None:
        return ""
    return value if isinstance(value, str) else js_stringify(value)


def to_rows_json(result: ResultSet) -> list[dict]:
    return [{c: json_value(v) for c, v in zip(result.columns, row, strict=True)} for row in result.rows]


def to_csv(result: ResultSet) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([cell_text(v) for v in row] for row in result.rows)
    return out.getvalue()


def to_table(result: ResultSet, width: int = CELL_WIDTH) -> str:
    """Aligned columns; cells on one line, cut at ``width`` characters; a row count at the end."""
    def cell(value: Any) -> str:
        shown = "NULL" if value is None else " ".join(cell_text(value).split("\n"))
        return shown if len(shown) <= width else shown[: width - 1] + "…"

    cells = [[cell(v) for v in row] for row in result.rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(result.columns)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(result.columns, widths, strict=True)).rstrip(),
             "-+-".join("-" * w for w in widths)]
    lines += [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    count = len(result.rows)
    lines.append(f"({count} row{'' if count == 1 else 's'})")
    return "\n".join(lines) + "\n"
