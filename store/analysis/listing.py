"""Session listing without reading a payload: filters, sort orders, keyset pagination.

Every filter and sort key is a ``sessions`` column, except what depends on usage — ``--model``
and the ``cost`` order — which the partial index ``ix_entries_usage`` answers on its own (its
columns are the ones read). Sessions without a sort value (no name, say) come after the others
in either direction. A cursor is the sort value and primary key of the last session of a page, so
the next page starts exactly after it whatever was written in between.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    Select,
    exists,
    func,
    literal,
    literal_column,
    or_,
    select,
    text,
    tuple_,
)

from store.db import queries
from store.db.engine import is_sqlite
from store.db.schema import entries, sessions
from store.db.stored_text import db_text
from store.errors import StoreError
from store.money import reported_cost

SORTS = ("modified", "created", "name", "cost")
_DESCENDING = {"modified": True, "created": True, "name": False, "cost": True}
_IN_LIST = 500
_ONE = literal_column("1")  # a literal, not a parameter: the partial index's predicate must be visible
_BIGINT = 2**63  # the range of a BIGINT: -_BIGINT <= n < _BIGINT


class BadCursor(StoreError):
    """A cursor that does not come from a listing with the same sort order."""


@dataclass(frozen=True, slots=True)
class ListFilter:
    """Which sessions to list (all given conditions hold)."""

    cwd: str | None = None
    name: str | None = None  # substring of the name, case-insensitive (ASCII letters on SQLite)
    model: str | None = None  # billed in the session: a model id or "provider/model"
    since_ms: int | None = None  # modified at or after
    until_ms: int | None = None  # modified before


@dataclass(frozen=True, slots=True)
class Usage:
    tokens: int = 0
    cost: float = 0.0


def _usage_by_session(conn: Connection) -> Select:
    """Per-session totals of the usage-bearing rows (read from ``ix_entries_usage`` alone)."""
    add = getattr(func, queries.adding_counts(conn))
    tokens = (add(entries.c.usage_input) + add(entries.c.usage_output)
              + add(entries.c.usage_cache_read) + add(entries.c.usage_cache_write))
    return (select(entries.c.session_pk, tokens.label("tokens"), func.sum(entries.c.usage_cost).label("cost"))
            .where(entries.c.has_usage == _ONE).group_by(entries.c.session_pk))


def session_usage(conn: Connection, session_pks: list[int]) -> dict[int, Usage]:
    """Token and cost totals of the given sessions (the cost as ``store.money`` reports it)."""
    stmt = _usage_by_session(conn)
    if len(session_pks) > _IN_LIST:  # most of the store: one pass over the index
        rows = conn.execute(stmt)
    else:
        rows = conn.execute(stmt.where(entries.c.session_pk.in_(session_pks))) if session_pks else []
    return {pk: Usage(int(tokens), reported_cost(cost)) for pk, tokens, cost in rows}


def encode_cursor(sort: str, reverse: bool, value: Any, pk: int) -> str:
    raw = json.dumps([sort, reverse, value, pk], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str, sort: str, reverse: bool) -> tuple[Any, int]:
    try:
        name, rev, value, pk = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, TypeError) as exc:
        raise BadCursor(f"not a listing cursor: {cursor!r}") from exc
    if name != sort or rev != reverse:
        raise BadCursor(f"cursor was made for --sort {name}{' --reverse' if rev else ''}, not this listing")
    if not (_whole(pk) and pk >= 0 and (value is None or _CURSOR_VALUE[sort](value))):  # as encode_cursor made it
        raise BadCursor(f"not a listing cursor: {cursor!r}")
    return value, pk


def _whole(value: object) -> bool:
    return type(value) is int and -_BIGINT <= value < _BIGINT


_CURSOR_VALUE: dict[str, Callable[[object], bool]] = {  # the sort key's values, as the columns hold them
    "modified": _whole, "created": _whole,
    "name": lambda value: isinstance(value, str) and db_text(value) == value,
    "cost": lambda value: (_whole(value) or type(value) is float) and math.isfinite(value),  # type: ignore[arg-type]
}


def list_rows(conn: Connection, where: ListFilter, *, sort: str = "modified", reverse: bool = False,
              limit: int | None = None, cursor: str | None = None) -> list[tuple[Row, str]]:
    """``sessions`` rows in listing order, each with the cursor that continues after it."""
    if sort not in SORTS:
        raise StoreError(f"unknown sort {sort!r}: choose one of {', '.join(SORTS)}")
    if limit is not None and not (type(limit) is int and 0 <= limit < _BIGINT):
        raise ValueError(f"limit must be a whole number from 0 to 2**63 - 1 (or None), not {limit!r}")
    for name in ("since_ms", "until_ms"):
        _check_ms(name, getattr(where, name))
    descending = _DESCENDING[sort] != reverse
    after = _decode_cursor(cursor, sort, reverse) if cursor else None
    base = select(sessions).where(*_conditions(conn, where))
    if sort == "cost":
        usage = _usage_by_session(conn).subquery()
        key: ColumnElement = func.coalesce(usage.c.cost, 0.0)
        base = base.add_columns(key.label("sort_value")).outerjoin(usage, usage.c.session_pk == sessions.c.pk)
    else:
        column = {"modified": sessions.c.modified_ms, "created": sessions.c.created_ms, "name": sessions.c.name}[sort]
        key = column.collate("C") if sort == "name" and not is_sqlite(conn) else column  # code point order
        base = base.add_columns(column.label("sort_value"))

    rows: list[Row] = []
    if after is None or after[0] is not None:  # the sessions that have a sort value
        stmt = base.where(key.is_not(None))
        if after is not None:
            position, bound = tuple_(key, sessions.c.pk), tuple_(literal(after[0]), literal(after[1]))
            stmt = stmt.where(position < bound if descending else position > bound)
        rows = _fetch(conn, stmt, [key, sessions.c.pk], descending, limit)
    if limit is None or len(rows) < limit:  # then those without one, by primary key
        stmt = base.where(key.is_(None))
        if after is not None and after[0] is None:
            stmt = stmt.where(sessions.c.pk < after[1] if descending else sessions.c.pk > after[1])
        rows += _fetch(conn, stmt, [sessions.c.pk], descending, None if limit is None else limit - len(rows))
    return [(row, encode_cursor(sort, reverse, row.sort_value, row.pk)) for row in rows]


def _fetch(conn: Connection, stmt: Select, order: list, descending: bool, limit: int | None) -> list[Row]:
    stmt = stmt.order_by(*(c.desc() if descending else c.asc() for c in order))
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(conn.execute(stmt))


def _check_ms(name: str, value: object) -> None:
    """A time bound of :class:`ListFilter`: None, or milliseconds a BIGINT column compares with."""
    if value is None:
        return
    if type(value) not in (int, float) or not -_BIGINT < value < _BIGINT:  # NaN fails the range too
        raise ValueError(f"{name} must be milliseconds since the epoch (a number), not {value!r}")


_FOLD_COLLATIONS = """SELECT c.collname FROM pg_catalog.pg_collation AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.collnamespace AND n.nspname = 'pg_catalog'
WHERE (c.collname = 'und-x-icu' AND c.collprovider = 'i' AND pg_catalog.getdatabaseencoding() = 'UTF8')
   OR (c.collname IN ('C.utf8', 'C.UTF-8') AND c.collprovider = 'c'
       AND c.collencoding IN (-1, pg_catalog.pg_char_to_encoding(pg_catalog.getdatabaseencoding())))
ORDER BY c.collprovider = 'i' DESC, c.collname LIMIT 1"""


def _lowered(conn: Connection, column: ColumnElement) -> ColumnElement:
    """``column`` in lower case, every script's letters (as Python's ``str.lower``): SQLite's
    ``lower()`` folds ASCII only, so the store's own ``pi_lower`` (``store.db.engine``); on
    PostgreSQL ``lower()`` under ICU's root collation, else ``C.utf8`` (as the search words,
    migration 0018), since in a ``C`` database it too folds ASCII only."""
    if is_sqlite(conn):
        return func.pi_lower(column)
    if "pi_fold_collation" not in conn.info:  # per server connection: one lookup, not one a listing
        conn.info["pi_fold_collation"] = conn.execute(text(_FOLD_COLLATIONS)).scalar()
    collation = conn.info["pi_fold_collation"]
    return func.lower(column if collation is None else column.collate(collation))


def _conditions(conn: Connection, where: ListFilter) -> list[ColumnElement]:
    conditions: list[ColumnElement] = []
    if where.cwd is not None:  # text columns hold db_text's form (store.db.stored_text)
        conditions.append(sessions.c.cwd == db_text(where.cwd))
    if where.name:
        pattern = "%" + db_text(where.name).lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        conditions.append(_lowered(conn, sessions.c.name).like(pattern, escape="\\"))
    if where.model:
        model = db_text(where.model)
        conditions.append(exists().where(
            entries.c.session_pk == sessions.c.pk, entries.c.has_usage == _ONE,
            or_(entries.c.model == model, entries.c.provider + "/" + entries.c.model == model),
        ))
    if where.since_ms is not None:
        conditions.append(sessions.c.modified_ms >= where.since_ms)
    if where.until_ms is not None:
        conditions.append(sessions.c.modified_ms < where.until_ms)
    return conditions
