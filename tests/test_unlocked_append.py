"""The PostgreSQL single append without a transaction around it (``SessionManager._append_unlocked``):
one statement that locks the session row only if it is as the manager last saw it, and writes
only then. One round trip; the locked path takes over whenever it writes nothing; a connection
that dies around the statement leaves the entry stored exactly once."""

from __future__ import annotations

import collections
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.util import await_only

from store.db.appends import AppendCursor
from store.errors import SessionChanged, SessionClaimed
from store.session_store import SessionStore
from tests.async_as_sync import async_store
from tests.conftest import scratch_pg_database

_SENT = re.compile(r"\tF\t\d+\t(\w+)")  # a frontend message in libpq's protocol trace


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with scratch_pg_database("pi_store_unlocked") as url:
        yield url


def user(n: int) -> dict:
    return {"role": "user", "content": f"message {n}", "timestamp": n}


def tool_call(n: int) -> dict:
    return {"role": "assistant", "content": [{"type": "toolCall", "id": f"call{n}", "name": "read",
                                              "arguments": {"path": "a.txt"}}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "m", "stopReason": "toolUse",
            "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2,
                      "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
            "timestamp": n}


def tool_result(n: int, *, error: bool) -> dict:
    return {"role": "toolResult", "toolCallId": f"call{n}", "toolName": "read", "isError": error,
            "content": [{"type": "text", "text": "no such file" if error else "contents"}], "timestamp": n}


def round_trips(store: SessionStore, append) -> int:
    """The round trips (simple queries and ``Sync`` messages) libpq sent while ``append()`` ran."""
    with tempfile.TemporaryFile("w+") as trace:
        @event.listens_for(store.engine, "connect")
        def _trace(dbapi_connection, _record) -> None:
            dbapi_connection.pgconn.trace(trace.fileno())

        store.engine.dispose()  # every connection from here on is traced
        try:
            append()
        finally:
            event.remove(store.engine, "connect", _trace)
            store.engine.dispose()
        trace.seek(0)
        sent = collections.Counter(_SENT.findall(trace.read()))
    return sent["Query"] + sent["Sync"]


@contextmanager
def connected(url: str, api: str) -> Iterator[SessionStore]:
    """A store on ``url`` through the sync API, or the async one with the sync call shapes."""
    if api == "async":
        with async_store(url) as store:
            yield store  # type: ignore[misc]
        return
    with SessionStore.connect(url) as store:
        yield store


def stored(store: SessionStore, session_id: str) -> tuple[list[str], int, int]:
    """The session's entry ids in file order, its row version and last row, as stored."""
    with store.engine.connect() as conn:
        pk, version, last_seq = conn.execute(text("SELECT pk, row_version, last_seq FROM sessions "
                                                  "WHERE session_id = :s"), {"s": session_id}).one()
        ids = conn.execute(text("SELECT entry_id FROM entries WHERE session_pk = :pk AND kind = 'entry' "
                                "ORDER BY seq"), {"pk": pk}).scalars().all()
    return list(ids), version, last_seq


def test_a_single_append_is_one_round_trip_after_any_write_of_its_manager(pg_url: str) -> None:
    """Opened, after a single append, after a batch: the manager knows the session's last row and
    version, and the next append is one statement, tool calls and their results paired in it. A
    failed result takes the locked transaction (its failures are counted before it answers)."""
    with SessionStore.connect(pg_url) as store:
        sm = store.create("/w")
        sm.append_message(user(1))
        assert round_trips(store, lambda: sm.append_message(user(2))) == 1
        reopened = store.open(sm.get_session_id())
        assert round_trips(store, lambda: reopened.append_message(user(3))) == 1
        with reopened.batch():
            reopened.append_message(user(4))
            reopened.append_message(user(5))
        assert round_trips(store, lambda: reopened.append_message(user(6))) == 1
        assert round_trips(store, lambda: reopened.append_message(tool_call(7))) == 1
        assert round_trips(store, lambda: reopened.append_message(tool_result(7, error=False))) == 1
        reopened.append_message(tool_call(8))
        assert round_trips(store, lambda: reopened.append_message(tool_result(8, error=True))) > 3
        ids, version, _ = stored(store, sm.get_session_id())
        assert len(ids) == 10 and version == reopened.get_version()
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT tool_call_id, result_seq - seq, is_error FROM tool_calls ORDER BY seq")
                                ).all() == [("call7", 1, 0), ("call8", 1, 1)]


def test_opening_a_session_is_one_read_transaction(pg_url: str) -> None:
    """``open`` reads the key, the session row and its leaf in one snapshot: BEGIN, three
    statements, COMMIT (on a new connection: the pool checks a reused one first). It was two
    transactions; ``continue_recent`` finds the session in the same transaction."""
    with SessionStore.connect(pg_url) as store:
        sm = store.create("/opened")
        sm.append_message(user(1))
        opened: list = []
        assert round_trips(store, lambda: opened.append(store.open(sm.get_session_id()))) == 5
        assert round_trips(store, lambda: opened.append(store.continue_recent("/opened"))) == 6
        assert [m.get_leaf_id() for m in opened] == [sm.get_leaf_id()] * 2
        assert round_trips(store, lambda: opened[1].append_message(user(2))) == 1


@pytest.mark.both_apis
def test_a_stale_manager_writes_nothing_and_is_told(pg_url: str, api: str) -> None:
    """The row moved on after ``stale`` last saw it: its statement finds no row to lock, the
    locked path raises ``SessionChanged``; after a refresh it writes again."""
    with connected(pg_url, api) as store:
        sm = store.create("/w")
        sm.append_message(user(1))
        stale = store.open(sm.get_session_id())
        sm.append_message(user(2))
        with pytest.raises(SessionChanged):
            stale.append_message(user(3))
        stale.refresh()
        stale.append_message(user(3))
        ids, version, last_seq = stored(store, sm.get_session_id())
        assert len(ids) == 3 and version == stale.get_version() and last_seq == len(ids)  # the header is row 0


@pytest.mark.both_apis
def test_a_claim_taken_after_the_manager_last_wrote_stops_its_next_append(pg_url: str, api: str) -> None:
    """Claims change the session row without changing its version: the statement checks them too."""
    with connected(pg_url, api) as store:
        sm = store.create("/w")
        sm.append_message(user(1))
        other = store.open(sm.get_session_id())
        other.claim("host-b", ttl_ms=None)
        with pytest.raises(SessionClaimed):
            sm.append_message(user(2))
        other.append_message(user(3))  # the holder writes, unlocked (its claim's owner and token match)
        store.open(sm.get_session_id()).claim("host-b", ttl_ms=None, force=True)  # same owner, new token, same version
        with pytest.raises(SessionClaimed):  # the holder's own row version still matches: the token stops it
            other.append_message(user(4))
        assert [e["message"]["content"] for e in other.get_entries()] == ["message 1", "message 3"]
        ids, version, _ = stored(store, sm.get_session_id())
        assert len(ids) == 2 and version == other.get_version()


@pytest.mark.both_apis
@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not-applied"])
def test_a_connection_that_dies_around_the_statement_leaves_the_entry_stored_once(
        pg_url: str, api: str, applied: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server ends the connection right after it applied the statement (or right before):
    the append cannot know which, so the locked transaction looks first — the entry is there
    once, the manager's view is the stored one, no error reaches the caller."""
    real = AppendCursor.insert_if_current
    kills = []

    def dying(self: AppendCursor, *args) -> bool:
        if applied:
            real(self, *args)
        kills.append(1)
        end = "SELECT pg_terminate_backend(pg_backend_pid())"
        if api == "async":  # psycopg's AsyncConnection behind SQLAlchemy's adapter
            await_only(self._connection.driver_connection.execute(end))
        else:
            self._connection.execute(end)
        raise AssertionError("the server ended the connection: not reached")

    with connected(pg_url, api) as store:
        sm = store.create("/w")
        sm.append_message(user(1))
        monkeypatch.setattr(AppendCursor, "insert_if_current", dying)
        second = sm.append_message(user(2))
        monkeypatch.undo()
        third = sm.append_message(user(3))
        assert kills == [1]
        ids, version, _ = stored(store, sm.get_session_id())
        assert ids[1:] == [second, third] and version == sm.get_version()
        assert [e["id"] for e in store.open(sm.get_session_id()).get_branch()][1:] == [second, third]


def end_backend(url: str, connection) -> None:
    """The server ends this (sync psycopg) connection's backend, from another connection; the
    connection's next statement fails."""
    import psycopg

    pid = connection.info.backend_pid
    libpq = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            time.sleep(0.01)


def test_a_lost_statement_found_written_after_another_writer_is_still_this_managers_write(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The statement was applied, another writer appended, then the connection died: the entry is
    this manager's (its line is there), not a reason to report ``SessionChanged`` — a caller that
    refreshed and tried again would store it twice. The next append learns of the other write."""
    real = AppendCursor.insert_if_current

    with SessionStore.connect(pg_url) as store:
        sm = store.create("/w")
        first = sm.append_message(user(1))
        other = store.open(sm.get_session_id())

        def applied_then_other_then_lost(self: AppendCursor, *args) -> bool:
            real(self, *args)
            monkeypatch.undo()  # the other writer's append is a plain one
            other.refresh()  # it sees the applied entry
            other.append_message(user(99))
            self._connection.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            raise AssertionError("not reached")

        monkeypatch.setattr(AppendCursor, "insert_if_current", applied_then_other_then_lost)
        second = sm.append_message(user(2))
        ids, _, _ = stored(store, sm.get_session_id())
        assert ids[:2] == [first, second] and len(ids) == 3  # and the other writer's
        with pytest.raises(SessionChanged):
            sm.append_message(user(3))
        sm.refresh()
        sm.append_message(user(3))
        assert len(stored(store, sm.get_session_id())[0]) == 4


def test_a_failure_after_the_lost_statement_was_found_written_does_not_undo_it(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection dies after the statement, and the connection of the check that finds it
    written dies before that check's (read-only) transaction ends: the entry is stored all the
    same, the manager counts it, and its next append goes under it — no fork, no error."""
    real_insert, real_holds = AppendCursor.insert_if_current, AppendCursor.holds

    def applied_then_lost(self: AppendCursor, *args) -> bool:
        real_insert(self, *args)
        self._connection.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        raise AssertionError("not reached")

    def holds_then_lost(self: AppendCursor, *args) -> bool:
        found = real_holds(self, *args)
        end_backend(pg_url, self._connection)  # the transaction's COMMIT then fails
        return found

    with SessionStore.connect(pg_url) as store:
        sm = store.create("/w")
        sm.append_message(user(1))
        monkeypatch.setattr(AppendCursor, "insert_if_current", applied_then_lost)
        monkeypatch.setattr(AppendCursor, "holds", holds_then_lost)
        second = sm.append_message(user(2))
        monkeypatch.undo()
        third = sm.append_message(user(3))
        entries = [e for e in store.open(sm.get_session_id()).get_entries()]
        assert [(e["id"], e["parentId"]) for e in entries][1:] == [(second, entries[0]["id"]), (third, second)]
        assert stored(store, sm.get_session_id())[1] == sm.get_version()
