"""Who may write a session: optimistic versions and writer claims with fencing tokens.

Every write transaction of a :class:`~store.manager.SessionManager` reads the session row under
the write lock (``store.db.appends.AppendCursor.lock_session``) and calls :func:`check_write`
before it writes anything (PostgreSQL's one-statement single append,
``AppendCursor.insert_if_current``, writes only where the row passes the same checks, and leaves
the others to this path):

* **Optimistic writes.** ``sessions.row_version`` counts the write transactions that changed the
  session. A manager remembers the version it last opened, refreshed or wrote; if the row holds
  another one, someone else wrote in between and the manager's leaf may be stale:
  :class:`~store.errors.SessionChanged`, nothing written.
* **Claims.** A host that wants to be the session's only writer claims it
  (:func:`take_claim`): ``claim_owner`` names it and ``claim_token`` grows by one — the fencing
  token, which never goes back. While a claim is live, writers without it are refused; a writer
  whose token is not the row's current one (its claim was taken over) is refused whatever its
  clock says. ``claim_expires_ms`` only tells when another host may take the claim over; no write
  depends on a heartbeat arriving on time, because a takeover bumps the token that every write
  of the old holder is checked against, inside its own transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, select, update

from store.db.appends import LockedSession
from store.db.engine import is_sqlite
from store.db.schema import sessions
from store.db.stored_text import db_text
from store.errors import SessionChanged, SessionClaimed, SessionNotFound
from store.format.jsdate import js_iso

_TTL_LIMIT = 9 * 10**15  # ms: now + ttl stays a BIGINT (and an exact double)


@dataclass(frozen=True, slots=True)
class Claim:
    """A writer's claim on a session: ``token`` is the fencing token its writes carry."""

    session_id: str
    owner: str
    token: int
    expires_ms: int | None

    def live(self, now_ms: float) -> bool:
        return self.expires_ms is None or self.expires_ms > now_ms

    def to_json(self, now_ms: float | None = None) -> dict:
        doc = {"sessionId": self.session_id, "owner": self.owner, "token": self.token,
               "expires": js_iso(self.expires_ms) if self.expires_ms is not None else None}
        if now_ms is not None:
            doc["live"] = self.live(now_ms)
        return doc


def check_write(locked: LockedSession | None, *, session_id: str, expected_version: int,
                claim: Claim | None, clock: Callable[[], float]) -> None:
    """Raise unless a writer that last saw ``expected_version`` (holding ``claim``, if any) may
    write the session whose row, read under the write lock, is ``locked`` (``clock``: ms since the
    epoch, read only when a claim's expiry matters)."""
    if locked is None or locked.session_id != session_id:
        raise SessionChanged(session_id, expected_version, None)
    if claim is not None:
        if locked.claim_token != claim.token or locked.claim_owner != claim.owner:
            holder = f"now held by {locked.claim_owner!r}" if locked.claim_owner is not None else "released"
            raise SessionClaimed(f"session {session_id}: the claim of {claim.owner!r} (token {claim.token}) was "
                                 f"taken over or released ({holder}, token {locked.claim_token}); nothing was written")
    elif locked.claim_owner is not None and (locked.claim_expires_ms is None or locked.claim_expires_ms > clock()):
        raise SessionClaimed(f"session {session_id} is claimed by {locked.claim_owner!r} (token {locked.claim_token}"
                             f"{_until(locked.claim_expires_ms)}); nothing was written")
    if locked.row_version != expected_version:
        raise SessionChanged(session_id, expected_version, locked.row_version)


def live_claim(owner: str | None, token: int, expires_ms: int | None, now_ms: float) -> str | None:
    """How a session's live claim reads in a refusal (``claimed by 'host-a' (token 3, until …)``);
    None when it has none (never claimed, released, or expired at ``now_ms``)."""
    if owner is None or (expires_ms is not None and expires_ms <= now_ms):
        return None
    return f"claimed by {owner!r} (token {token}{_until(expires_ms)})"


def _until(expires_ms: int | None) -> str:
    return "" if expires_ms is None else f", until {js_iso(expires_ms)}"


def _locked_row(conn: Connection, session_id: str):
    stmt = select(sessions.c.pk, sessions.c.claim_owner, sessions.c.claim_token, sessions.c.claim_expires_ms
                  ).where(sessions.c.session_id == db_text(session_id))
    row = conn.execute(stmt if is_sqlite(conn) else stmt.with_for_update()).first()
    if row is None:
        raise SessionNotFound(f"no session {session_id!r} in the store")
    return row


def _check_ttl(ttl_ms: object) -> None:
    """None (no expiry), or milliseconds from 0 up to ~285,000 years (the expiry is a BIGINT)."""
    if ttl_ms is not None and not (type(ttl_ms) in (int, float) and 0 <= ttl_ms < _TTL_LIMIT):
        raise ValueError(f"ttl_ms must be milliseconds from 0 to {_TTL_LIMIT:,} (or None: no expiry), not {ttl_ms!r}")


def take_claim(conn: Connection, session_id: str, owner: str, *, ttl_ms: int | None, now_ms: float,
               force: bool = False) -> Claim:
    """Claim ``session_id`` for ``owner`` (inside ``conn``'s write transaction) with a new fencing
    token. Refused (:class:`SessionClaimed`) while another owner's claim is live, unless ``force``;
    ``ttl_ms`` None: the claim never expires by itself (only a release or a forced takeover ends it)."""
    if not isinstance(owner, str) or not owner:
        raise ValueError("a claim needs a non-empty owner name")
    if db_text(owner) != owner:
        raise ValueError(f"a claim's owner name cannot hold NUL or lone surrogates: {owner!r}")
    _check_ttl(ttl_ms)
    row = _locked_row(conn, session_id)
    held = row.claim_owner is not None and (row.claim_expires_ms is None or row.claim_expires_ms > now_ms)
    if held and row.claim_owner != owner and not force:
        raise SessionClaimed(f"session {session_id} is claimed by {row.claim_owner!r} (token {row.claim_token}"
                             f"{_until(row.claim_expires_ms)})")
    token = row.claim_token + 1
    expires = None if ttl_ms is None else int(now_ms + ttl_ms)
    conn.execute(update(sessions).where(sessions.c.pk == row.pk)
                 .values(claim_owner=owner, claim_token=token, claim_expires_ms=expires))
    return Claim(session_id, owner, token, expires)


def renew_claim(conn: Connection, claim: Claim, *, ttl_ms: int | None, now_ms: float) -> Claim:
    """Extend ``claim`` (same token) if it is still the session's current claim, even past its
    expiry when nobody took it over; else :class:`SessionClaimed`."""
    _check_ttl(ttl_ms)
    row = _locked_row(conn, claim.session_id)
    if row.claim_owner != claim.owner or row.claim_token != claim.token:
        raise SessionClaimed(f"session {claim.session_id}: the claim of {claim.owner!r} (token {claim.token}) was "
                             "taken over or released")
    expires = None if ttl_ms is None else int(now_ms + ttl_ms)
    conn.execute(update(sessions).where(sessions.c.pk == row.pk).values(claim_expires_ms=expires))
    return Claim(claim.session_id, claim.owner, claim.token, expires)


def release_claim(conn: Connection, session_id: str, *, owner: str | None = None, token: int | None = None) -> bool:
    """End the session's claim (the token stays, so no old holder can write again); with
    ``owner`` / ``token`` only if they match the current claim. Returns whether a claim ended."""
    row = _locked_row(conn, session_id)
    if row.claim_owner is None:
        return False
    if (owner is not None and row.claim_owner != owner) or (token is not None and row.claim_token != token):
        raise SessionClaimed(f"session {session_id} is claimed by {row.claim_owner!r} (token {row.claim_token}), "
                             "not by the claim named")
    conn.execute(update(sessions).where(sessions.c.pk == row.pk).values(claim_owner=None, claim_expires_ms=None))
    return True


def list_claims(conn: Connection) -> list[Claim]:
    """Every session's current claim (live or expired), by session id."""
    rows = conn.execute(select(sessions.c.session_id, sessions.c.claim_owner, sessions.c.claim_token,
                               sessions.c.claim_expires_ms)
                        .where(sessions.c.claim_owner.is_not(None)).order_by(sessions.c.session_id))
    return [Claim(r.session_id, r.claim_owner, r.claim_token, r.claim_expires_ms) for r in rows]
