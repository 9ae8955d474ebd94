"""A session's times recomputed from its stored lines: ``sessions.created_ms`` / ``activity_ms`` /
``modified_ms`` and the tool-call pairs' ``call_ms`` / ``duration_ms``.

Writers keep these as rows are written, with what ``new Date(text)`` makes of each timestamp at
that moment (``store.format.jsdate``). When that reading changes (revision 0017: V8's fallback
formats such as ``"Feb 1 2025"``, once read as no date at all), :func:`refresh_odd_sessions`
recomputes them for the sessions that hold a timestamp in any other shape than the one Pi writes
(``2025-02-01T09:00:00.000Z``); a store of Pi-written files has none, and pays one scan. A store
of hand-made files in one other shape (``…:00Z`` without milliseconds, say) has them all: each is
read again, ~45 MB/s of message lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, select, text

from store.analysis import pairs
from store.db.engine import is_sqlite
from store.db.schema import entries, sessions
from store.format import js_parse
from store.format.jsdate import parse_js_date, storable_ms
from store.format.jsvalue import UNDEFINED, prop
from store.listing import ListingState
from store.loading import ENTRY, EXTRA_HEADER, HEADER, VALUE

# Timestamps in exactly the shape Pi writes: every reading of them agrees.
_D = "[0-9]"
_PI_SHAPE_SQLITE = f"timestamp GLOB '{_D * 4}-{_D * 2}-{_D * 2}T{_D * 2}:{_D * 2}:{_D * 2}.{_D * 3}Z'"
_PI_SHAPE_POSTGRESQL = r"timestamp ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$'"


def odd_sessions(conn: Connection) -> list[int]:
    """Keys of the sessions with a string timestamp (header or entry) not in Pi's own shape, or
    a line whose ``timestamp`` is no string (``new Date(["Feb 1 2025"])`` reads the array's text;
    the column holds strings only, so such lines are found by their text: rows without the
    column are few, none in a file Pi wrote)."""
    shape = _PI_SHAPE_SQLITE if is_sqlite(conn) else _PI_SHAPE_POSTGRESQL
    return [pk for (pk,) in conn.execute(text(
        "SELECT DISTINCT session_pk FROM entries WHERE CASE WHEN timestamp IS NULL "
        f"THEN line LIKE :key ELSE NOT ({shape}) END ORDER BY session_pk"), {"key": '%"timestamp"%'})]


@dataclass(slots=True)
class StoredListing:
    """A session's listing info read again from its stored lines (``store.listing``), with the
    header's row and whether a user or assistant message entry is stored."""

    listing: ListingState
    header_seq: int | None
    conversation: bool

    def times(self, mtime_ms: float | None) -> dict[str, int | None]:
        """The ``sessions`` time columns (a time past the Date range stored one past its edge)."""
        listing = self.listing
        timestamp = UNDEFINED if listing.header is None else listing.header.get("timestamp", UNDEFINED)
        created = None if timestamp is UNDEFINED else parse_js_date(timestamp)
        modified = listing.modified_ms(mtime_ms)
        return {"created_ms": None if created is None else storable_ms(created),
                "activity_ms": None if listing.last_activity_ms is None else storable_ms(listing.last_activity_ms),
                "modified_ms": None if modified is None else storable_ms(modified)}


def read_listing(conn: Connection, session_pk: int) -> StoredListing:
    """Feed the session's header, message and session_info lines (and the lines that are not
    entries, as a file read gives them) to a :class:`ListingState`, in file order."""
    c = entries.c
    listing = ListingState()
    header_seq, conversation = None, False
    for seq, kind, line in conn.execute(
        select(c.seq, c.kind, c.line).where(
            c.session_pk == session_pk,
            (c.kind.in_((HEADER, EXTRA_HEADER, VALUE))) | c.type.in_(("message", "session_info")))
        .order_by(c.seq)
    ):
        value = js_parse(line)
        if kind == HEADER:
            header_seq, listing.header = seq, value
            continue
        listing.add(value)
        if kind == ENTRY and prop(prop(value, "message"), "role") in ("user", "assistant"):
            conversation = True
    return StoredListing(listing, header_seq, conversation)


def refresh(conn: Connection, session_pk: int) -> None:
    """Recompute one session's times from its stored lines (Pi's list rules) and pair its tool
    calls again (inside the caller's transaction)."""
    mtime_ms = conn.execute(select(sessions.c.source_mtime_ms).where(sessions.c.pk == session_pk)).scalar_one()
    times = read_listing(conn, session_pk).times(mtime_ms)
    conn.execute(sessions.update().where(sessions.c.pk == session_pk).values(**times))
    pairs.rebuild_session(conn, session_pk)


def refresh_odd_sessions(conn: Connection) -> int:
    """:func:`refresh` every session :func:`odd_sessions` finds; returns how many."""
    found = odd_sessions(conn)
    for session_pk in found:
        refresh(conn, session_pk)
    return len(found)
