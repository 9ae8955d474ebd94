"""What migrations 0011 and 0012 keep at write time: ``activity_days`` (the ``activity`` view added
up per session, day, provider and model; its usage part is the view ``usage_days``),
``tool_call_pairs.path``, the off-path totals and turns of each session's current
path, and the partial index of model errors. Each must equal what
the views give when computed from every row (the references below), on the fixtures and the
corpus, and after appends (single, batched, async), re-imports, replacements, prunes, deletes and
``fts rebuild --recompute``; on both engines."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from store.analysis import activity_days
from store.analysis.backfill import recompute_analysis
from store.analysis.breakdown import breakdown
from store.db import current_path
from store.db.engine import is_sqlite, read_transaction, write_transaction
from store.format import js_stringify
from store.format.jsdate import js_iso
from store.retention import RetentionPolicy, parse_duration
from store.session_store import SessionStore
from tests.analysis.conftest import History
from tests.analysis.test_tool_call_pairs import _assistant, _branched_file, _result

# usage_ledger added up by the key of usage_days
_REFERENCE_DAYS = """
SELECT session_pk, coalesce(substr(timestamp, 1, 10), '') AS day, coalesce(provider, '') AS provider,
       coalesce(model, '') AS model, count(*) AS calls, sum(input) AS input, sum(output) AS output,
       sum(cache_read) AS cache_read, sum(cache_write) AS cache_write, sum(cost) AS cost
FROM usage_ledger
GROUP BY session_pk, coalesce(substr(timestamp, 1, 10), ''), coalesce(provider, ''), coalesce(model, '')
"""
_KEPT_DAYS = ("SELECT session_pk, day, provider, model, calls, input, output, cache_read, cache_write, cost "
              "FROM usage_days")
# the activity view added up by the same key
_SUMMED = ("messages", "user_messages", "assistant_messages", "tool_results", "tool_calls", "tool_errors",
           "input", "output", "cache_read", "cache_write", "cost")
_REFERENCE_ACTIVITY = f"""
SELECT session_pk, coalesce(day, '') AS day, coalesce(provider, '') AS provider, coalesce(model, '') AS model,
       {', '.join(f'sum({c})' for c in _SUMMED)}
FROM activity
GROUP BY session_pk, coalesce(day, ''), coalesce(provider, ''), coalesce(model, '')
"""
_KEPT_ACTIVITY = f"SELECT session_pk, day, provider, model, {', '.join(_SUMMED)} FROM activity_days"


def _number(value: Any) -> Any:
    if isinstance(value, Decimal):
        value = int(value) if value == value.to_integral_value() else float(value)
    return round(value, 9) if isinstance(value, float) and math.isfinite(value) else value


def _days(conn, sql: str) -> list[tuple]:
    return sorted((tuple(_number(v) for v in row) for row in conn.execute(text(sql))), key=repr)


# the messages view's rows off the current path, per session
_REFERENCE_OFF_PATH = """
SELECT s.pk, coalesce(m.messages, 0), coalesce(m.cost, 0)
FROM sessions AS s
LEFT JOIN (SELECT session_pk, count(*) AS messages, sum(cost) AS cost FROM messages WHERE on_path = 0
           GROUP BY session_pk) AS m ON m.session_pk = s.pk
"""
_KEPT_OFF_PATH = "SELECT pk, off_path_messages, off_path_cost FROM sessions"
# the current path's turns as docs/sql.md's "longest turns" query first numbered them
_REFERENCE_TURNS = """
WITH numbered AS (
    SELECT session_pk, seq, role, output, cost,
           sum(CASE WHEN role = 'user' THEN 1 ELSE 0 END) OVER (PARTITION BY session_pk ORDER BY seq) AS turn
    FROM messages
    WHERE on_path = 1
)
SELECT session_pk, turn, min(CASE WHEN role = 'user' THEN seq END), sum(CASE WHEN role = 'assistant' THEN 1 ELSE 0 END),
       sum(output), sum(cost)
FROM numbered
GROUP BY session_pk, turn
"""
_KEPT_TURNS = "SELECT session_pk, turn, prompt_seq, steps, output_tokens, cost FROM path_turns"


def _paths(conn) -> tuple[list, list]:
    """The kept paths, and the ``path`` of each call's arguments as the ``tool_calls`` view gives
    them (a string, else none)."""
    kept = conn.execute(text("SELECT session_pk, call_seq, call_index, path FROM tool_call_pairs")).all()
    expected = []
    for spk, seq, index, arguments in conn.execute(text(
            "SELECT session_pk, seq, call_index, arguments FROM tool_calls")):
        if isinstance(arguments, str):  # SQLite: JSON text
            arguments = json.loads(arguments)
        path = arguments.get("path") if isinstance(arguments, dict) else None
        expected.append((spk, seq, index, path if isinstance(path, str) else None))
    return sorted(map(tuple, kept), key=repr), sorted(expected, key=repr)


def assert_kept(store: SessionStore) -> int:
    """activity_days, usage_days, the off-path totals and the paths equal their references;
    returns the number of usage_days rows."""
    with read_transaction(store.engine) as conn:
        kept, expected = _days(conn, _KEPT_DAYS), _days(conn, _REFERENCE_DAYS)
        assert kept == expected
        assert _days(conn, _KEPT_ACTIVITY) == _days(conn, _REFERENCE_ACTIVITY)
        assert _days(conn, _KEPT_OFF_PATH) == _days(conn, _REFERENCE_OFF_PATH)
        assert _days(conn, _KEPT_TURNS) == _days(conn, _REFERENCE_TURNS)
        paths, expected_paths = _paths(conn)
        assert paths == expected_paths
    return len(kept)


def test_kept_totals_equal_the_views_on_fixtures_and_corpus(history: History) -> None:
    assert assert_kept(history.store) > 100
    with read_transaction(history.store.engine) as conn:
        paths = conn.execute(text("SELECT count(path) FROM tool_call_pairs")).scalar_one()
        off_path = conn.execute(text("SELECT count(*) FROM sessions WHERE off_path_messages > 0")).scalar_one()
    assert paths > 300 and off_path > 10


def test_rebuild_gives_what_writes_kept(history: History) -> None:
    with read_transaction(history.store.engine) as conn:
        kept = _days(conn, "SELECT * FROM activity_days")
    with write_transaction(history.store.engine) as conn:
        activity_days.rebuild(conn)
        assert _days(conn, "SELECT * FROM activity_days") == kept
        conn.rollback()


def _usage(cost: float, tokens: int = 1) -> dict:
    return {"input": tokens, "output": tokens, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2 * tokens,
            "cost": {"total": cost}}


def _answer(model: str, cost: float, stop: str = "stop", ms: int = 1) -> dict:
    return {"role": "assistant", "api": "x", "provider": "p", "model": model, "stopReason": stop,
            "content": [{"type": "text", "text": "ok"}], "usage": _usage(cost), "timestamp": ms}


@pytest.mark.both_apis
def test_appends_batches_branches_and_compactions(store: SessionStore, clock) -> None:
    manager = store.create("/w")
    manager.append_message({"role": "user", "content": "go"})
    first = manager.append_message(_answer("m1", 0.25))
    manager.append_message(_answer("m1", 0.5))
    manager.append_message(_answer("m2", 0.125, stop="error"))
    assert assert_kept(store) == 2
    clock.now += 2 * 86_400_000  # two days later
    with manager.batch():
        manager.append_message(_answer("m1", 1.0))
        manager.append_message(_assistant(("c1", "read")))
        manager.append_message(_result("c1", False))
    manager.branch(first)
    manager.append_message(_answer("m2", 2.0))
    assert assert_kept(store) == 5
    manager.append_message(_answer("m2", 4.0))  # linear again: nothing more off the path
    assert assert_kept(store) == 5
    with read_transaction(store.engine) as conn:
        by_day = conn.execute(text("SELECT day, sum(calls), sum(cost) FROM usage_days GROUP BY day ORDER BY day")).all()
        off_path = conn.execute(text("SELECT off_path_messages, off_path_cost FROM sessions")).one()
    assert [(calls, round(cost, 9)) for _day, calls, cost in by_day] == [(3, 0.875), (4, 7.001)]
    assert (off_path[0], round(off_path[1], 9)) == (5, 1.626)  # two answers, the batch's three rows (one call at 0.001)
    manager.append_message(_assistant(("c2", "bash"), ("c3", "edit"), ("c4", "read")))
    clock.now += 86_400_000  # the results come a day after their calls: their failures count on the calls' day
    manager.append_message(_result("c2", True))
    with manager.batch():
        manager.append_message(_result("c3", True))
        manager.append_message(_result("c4", False))
    assert assert_kept(store) == 5  # (the calls' message has the batch call's key)
    with read_transaction(store.engine) as conn:
        by_day = conn.execute(text("SELECT day, sum(messages), sum(tool_calls), sum(tool_errors), sum(tool_results) "
                                   "FROM activity_days GROUP BY day ORDER BY day")).all()
    assert [tuple(map(int, row[1:])) for row in by_day] == [(4, 0, 0, 0), (6, 4, 2, 1), (3, 0, 0, 3)]


def test_reimport_replacement_prune_delete_and_recompute(store: SessionStore, tmp_path: Path, clock) -> None:
    now = clock.now
    source = _branched_file(tmp_path / "tp.jsonl", now)
    store.import_file(source)
    other = store.create("/w")
    other.append_message(_answer("m1", 0.5))
    assert assert_kept(store) == 2
    _branched_file(source, now, extra=3)  # the file grew: the import appends its new lines
    store.import_file(source)
    assert assert_kept(store) == 2
    source.write_text(source.read_text("utf-8").replace('"model":"m"', '"model":"m9"'), "utf-8")  # rewritten
    assert store.import_path(source, replace=True)[0].imported
    assert assert_kept(store) == 2
    with read_transaction(store.engine) as conn:
        assert conn.execute(text("SELECT count(*) FROM usage_days WHERE model = 'm'")).scalar_one() == 0
    report = store.prune(RetentionPolicy(parse_duration("30d")), apply=True)
    assert report.trimmed  # the abandoned branch went, and its usage row with it
    assert assert_kept(store) == 2
    with write_transaction(store.engine) as conn:
        conn.exec_driver_sql("UPDATE entries SET usage_cost = 0")  # what a change of the rules would do
        recompute_analysis(conn)
    assert assert_kept(store) == 2
    store.delete(other.get_session_id())
    assert assert_kept(store) == 1
    store.delete("tp")
    with read_transaction(store.engine) as conn:
        assert conn.execute(text("SELECT count(*) FROM usage_days")).scalar_one() == 0


def test_token_totals_past_bigint_are_stored(store: SessionStore, tmp_path: Path) -> None:
    """Crafted usage can pass BIGINT's range when added up: the rows are stored all the same."""
    huge = 2**62  # (a double, as JavaScript reads it: exact)
    lines = [js_stringify({"type": "session", "version": 3, "id": "big", "timestamp": js_iso(0), "cwd": "/w"})]
    for index in range(3):
        message = {"role": "assistant", "provider": "p", "model": "m", "content": [],
                   "usage": {"input": huge, "output": 0, "cacheRead": 0, "cacheWrite": 0, "cost": {"total": 1}}}
        lines.append(js_stringify({"type": "message", "id": f"a{index}", "parentId": f"a{index - 1}" if index else None,
                                   "timestamp": js_iso(1000 * index), "message": message}))
    path = tmp_path / "big.jsonl"
    path.write_text("".join(line + "\n" for line in lines), "utf-8")
    assert store.import_file(path).imported
    with read_transaction(store.engine) as conn:
        calls, tokens = conn.execute(text("SELECT calls, input FROM usage_days")).one()
    assert calls == 3 and float(tokens) == pytest.approx(3.0 * huge)


def test_sums_past_bigint_and_past_a_double_are_reported(store: SessionStore, tmp_path: Path) -> None:
    """Token counts whose sums pass BIGINT (SQLite's sum() raises there: total() does not) and
    costs whose sum would pass a double's range (PostgreSQL's sum() raises there; a cost of 1e300
    or more counts as 0, as a cost that is not finite does): every surface reports them."""
    huge = 9 * 10**18
    lines = [js_stringify({"type": "session", "version": 3, "id": "big", "timestamp": js_iso(0), "cwd": "/w"})]
    for index, cost in enumerate((1.7976931348623157e308, 1.7976931348623157e308, 10**400, 2.5)):
        message = {"role": "assistant", "provider": "p", "model": "m", "content": [],
                   "usage": {"input": huge, "output": 1, "cacheRead": 0, "cacheWrite": 0, "cost": {"total": cost}}}
        lines.append(js_stringify({"type": "message", "id": f"a{index}", "parentId": f"a{index - 1}" if index else None,
                                   "timestamp": js_iso(1000 * index), "message": message}))
    path = tmp_path / "big.jsonl"
    path.write_text("".join(line + "\n" for line in lines), "utf-8")
    assert store.import_file(path).imported
    stats = store.stats("big")
    assert (stats.tokens.input, stats.tokens.output, stats.cost) == (4 * huge, 4, 2.5)
    assert store.stats().tokens.input == pytest.approx(4 * huge)
    assert [(m.tokens.input, m.cost) for m in stats.models] == [(pytest.approx(4 * huge), 2.5)]
    [listed] = store.list_all(sort="cost")
    assert (listed.tokens, listed.cost) == (pytest.approx(4 * huge + 4), 2.5)
    for by in ("day", "model"):
        [group] = [g for g in breakdown(store.engine, by).rows if g.tokens]
        assert (group.tokens.total, group.cost) == (pytest.approx(4 * huge + 4), 2.5)


def test_model_errors_are_read_from_their_index(store: SessionStore) -> None:
    manager = store.create("/w")
    manager.append_message(_answer("m1", 0.5, stop="error"))
    manager.append_message(_answer("m1", 0.5))
    # as docs/sql.md's query 3 reads them (on entries: SQLite matches no view expression to the index)
    sql = ("SELECT session_pk, count(*) FROM entries "
           "WHERE kind = 'entry' AND type = 'message' AND facts ->> 'stopReason' = 'error' GROUP BY session_pk")
    with read_transaction(store.engine) as conn:
        assert [count for _spk, count in conn.execute(text(sql))] == [1]
        if is_sqlite(conn):
            plan = " ".join(row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
        else:
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            plan = " ".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + sql))
    assert "ix_entries_model_errors" in plan


def test_the_last_turn_is_one_index_lookup(tmp_path: Path) -> None:
    """A linear append finds the path's last turn with one index lookup, not a scan of the
    session's turns (SQLite ran max() inside an INSERT's SELECT as a scan: appends got slower as
    the session grew). Counted in SQLite's virtual machine steps, with 3 turns and with 3,000."""
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        manager = store.create("/w")
        with manager.batch():
            for index in range(3000):
                manager.append_message({"role": "user", "content": f"turn {index}", "timestamp": 1})
        store.create("/w").append_message({"role": "user", "content": "go", "timestamp": 1})
        with write_transaction(store.engine) as conn:
            sqlite = conn.connection.dbapi_connection
            steps = {}
            for spk in (1, 2):
                counted = [0]

                def count(counted: list[int] = counted) -> int:
                    counted[0] += 1
                    return 0

                sqlite.set_progress_handler(count, 1)
                for sql, parameters in ((current_path.START_TURN, (spk, spk, 10_000, 0, 0, 0.0)),
                                        (current_path.ADD_TO_LAST_TURN, (spk, spk, 1, 1, 0.5))):
                    conn.exec_driver_sql(sql.format(source=""), parameters)
                sqlite.set_progress_handler(None, 1)
                steps[spk] = counted[0]
            conn.rollback()
    assert steps[1] < steps[2] + 20, steps  # the same few steps, however many turns there are


def test_a_failed_result_finds_its_calls_by_index(tmp_path: Path) -> None:
    """Counting a failed result's calls in ``activity_days`` looks them up by id among the
    session's open calls (the pairing's own index), not by scanning every pair of the session:
    the same SQLite steps with 3 earlier answered calls as with 1,000."""
    from store.analysis.pairs import pair_inserted
    from store.db.writes import entry_values

    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        sessions = {}
        for calls in (1000, 3):
            manager = store.create("/w")
            with manager.batch():
                for index in range(calls):
                    manager.append_message(_assistant((f"c{index}", "read")))
                    manager.append_message(_result(f"c{index}", False))
                manager.append_message(_assistant(("open", "bash")))
            sessions[calls] = manager.get_session_id()
        steps = {}
        with write_transaction(store.engine) as conn:
            sqlite = conn.connection.dbapi_connection
            for calls, session_id in sessions.items():
                spk, last = conn.exec_driver_sql("SELECT pk, last_seq FROM sessions WHERE session_id = ?",
                                                 (session_id,)).one()
                value = {"type": "message", "id": "r", "parentId": None, "timestamp": js_iso(0),
                         "message": _result("open", True)}
                row = entry_values(spk, last + 1, "entry", value, js_stringify(value), None)
                counted = [0]

                def count(counted: list[int] = counted) -> int:
                    counted[0] += 1
                    return 0

                sqlite.set_progress_handler(count, 1)
                pair_inserted(sqlite.cursor(), conn.dialect, [row])
                sqlite.set_progress_handler(None, 1)
                steps[calls] = counted[0]
                failed = conn.exec_driver_sql("SELECT sum(tool_errors) FROM activity_days WHERE session_pk = ?",
                                              (spk,)).scalar_one()
                assert failed == 1, calls  # the open call's day got the failure
            conn.rollback()
    assert steps[1000] < steps[3] + 50, steps  # (the first version scanned the pairs: 5,243 against 256)
