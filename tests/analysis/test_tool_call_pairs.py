"""``tool_calls`` reads the pairs kept at write time (``store.analysis.pairs``): it must return
exactly what migration 0003's query-time view returned — kept below as the reference — on the
fixtures and the corpus, and after appends, re-imports, context edits, deletes and prunes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import text

from store.analysis import pairs
from store.db.engine import is_sqlite, read_transaction, write_transaction
from store.format import js_stringify
from store.format.jsdate import js_iso
from store.retention import RetentionPolicy, parse_duration
from store.session_store import SessionStore
from tests.analysis.conftest import History
from tests.oracle_support import CORPUS_DIR

# migration 0003's tool_calls view, as a query (the current path view is unchanged)
_REFERENCE = """
WITH calls AS (
    {calls}
),
results AS (
    SELECT r.session_pk, r.seq, r.entry_id, r.facts ->> 'toolCallId' AS tool_call_id,
           r.facts ->> 'isError' AS is_error,
           coalesce(CAST(r.facts ->> 'textChars' AS INTEGER), length(r.search_text)) AS text_chars
    FROM entries AS r
    WHERE r.kind = 'entry' AND r.type = 'message' AND r.role = 'toolResult'
),
matched AS (
    SELECT c.*, r.entry_id AS result_entry_id, r.seq AS result_seq, r.is_error, r.text_chars AS result_chars,
           row_number() OVER (PARTITION BY c.session_pk, c.seq, c.call_index ORDER BY r.seq) AS match_rank
    FROM calls AS c
    LEFT JOIN results AS r
      ON r.session_pk = c.session_pk AND r.tool_call_id = c.tool_call_id AND r.seq > c.seq
)
SELECT s.session_id, e.entry_id, e.seq, e.timestamp, e.provider, e.model, e.call_index, e.tool_call_id,
       e.name, e.arguments, e.result_entry_id, e.result_seq,
       CAST(e.is_error AS INTEGER) AS is_error, e.result_chars,
       CASE WHEN cp.session_pk IS NULL THEN 0 ELSE 1 END AS on_path,
       e.session_pk
FROM matched AS e
JOIN sessions AS s ON s.pk = e.session_pk
LEFT JOIN current_path AS cp ON cp.session_pk = e.session_pk AND e.seq BETWEEN cp.first_seq AND cp.last_seq
WHERE e.match_rank = 1
"""
_COLUMNS = ("e.session_pk, e.seq, e.entry_id, e.timestamp, NULLIF(e.provider, '') AS provider, "
            "NULLIF(e.model, '') AS model")
_FIELDS = "c.value ->> 'id' AS tool_call_id, c.value ->> 'name' AS name, c.value -> 'arguments' AS arguments"
_WHERE = "e.kind = 'entry' AND e.type = 'message' AND e.role = 'assistant'"
_SQLITE_CALLS = f"""SELECT {_COLUMNS}, c.key AS call_index, {_FIELDS}
    FROM entries AS e, json_each(e.facts, '$.toolCalls') AS c WHERE {_WHERE}"""
_PG_CALLS = f"""SELECT {_COLUMNS}, c.ordinality - 1 AS call_index, {_FIELDS}
    FROM entries AS e
    CROSS JOIN LATERAL jsonb_array_elements(
        CASE WHEN jsonb_typeof(e.facts -> 'toolCalls') = 'array' THEN e.facts -> 'toolCalls' ELSE '[]' END
    ) WITH ORDINALITY AS c(value, ordinality)
    WHERE {_WHERE}"""
_VIEW_COLUMNS = ("session_id, entry_id, seq, timestamp, provider, model, call_index, tool_call_id, name, arguments, "
                 "result_entry_id, result_seq, is_error, result_chars, on_path, session_pk")
_DAY = 86_400_000


def _rows(conn, sql: str) -> list[tuple]:
    def normal(value: Any) -> Any:  # SQLite: JSON text; PostgreSQL: jsonb read as Python values
        return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value

    return sorted((tuple(normal(v) for v in row) for row in conn.execute(text(sql))), key=repr)


def assert_same_as_reference(store: SessionStore) -> int:
    """The view's rows equal the reference query's; returns how many there are."""
    with read_transaction(store.engine) as conn:
        reference = _REFERENCE.format(calls=_SQLITE_CALLS if is_sqlite(conn) else _PG_CALLS)
        expected = _rows(conn, f"SELECT {_VIEW_COLUMNS} FROM ({reference}) AS reference")
        actual = _rows(conn, f"SELECT {_VIEW_COLUMNS} FROM tool_calls")
    if is_sqlite(store.engine):  # arguments: JSON text on SQLite, compare the values
        expected = [(*row[:9], row[9] and json.loads(row[9]), *row[10:]) for row in expected]
        actual = [(*row[:9], row[9] and json.loads(row[9]), *row[10:]) for row in actual]
    assert actual == expected
    return len(actual)


def test_pairs_equal_the_query_time_view_on_fixtures_and_corpus(history: History) -> None:
    calls = assert_same_as_reference(history.store)
    assert calls > (1000 if any(CORPUS_DIR.glob("*.jsonl")) else 500)  # the committed fixtures alone hold 688


def test_rebuild_gives_what_writes_kept(history: History) -> None:
    with read_transaction(history.store.engine) as conn:
        kept = conn.execute(text("SELECT * FROM tool_call_pairs ORDER BY session_pk, call_seq, call_index")).all()
    with write_transaction(history.store.engine) as conn:
        assert pairs.rebuild(conn) == len(kept)
        assert conn.execute(text("SELECT * FROM tool_call_pairs ORDER BY session_pk, call_seq, call_index")
                            ).all() == kept


def _assistant(*calls: tuple[str, str]) -> dict:
    return {"role": "assistant", "api": "x", "provider": "p", "model": "m", "stopReason": "toolUse",
            "content": [{"type": "toolCall", "id": call_id, "name": name, "arguments": {"path": f"/{call_id}"}}
                        for call_id, name in calls],
            "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2,
                      "cost": {"total": 0.001}}}


def _result(call_id: str, error: bool, body: str = "ok") -> dict:
    return {"role": "toolResult", "toolCallId": call_id, "toolName": "read", "isError": error,
            "content": [{"type": "text", "text": body}], "timestamp": 1}


def test_appends_context_edits_and_branches(store: SessionStore) -> None:
    manager = store.create("/w")
    manager.append_message({"role": "user", "content": "go"})
    first = manager.append_message(_assistant(("c1", "read"), ("c2", "bash"), ("c1", "edit")))
    manager.append_message(_result("c2", True, "no"))
    assert assert_same_as_reference(store) == 3  # c1 twice and c2: c2 answered, the c1 calls not yet
    manager.append_message(_result("c1", False))  # answers both c1 calls
    manager.append_message(_result("c1", True))  # later: answers nothing
    later = manager.append_message(_assistant(("c2", "read")))  # an id used again: only later results
    manager.append_context_edit(first, None)  # hides the message from the context, not from history
    manager.append_message(_result("c2", False))
    manager.branch(first)
    manager.append_message(_result("c3", False))
    manager.append_message(_assistant(("c3", "grep")))  # its result came before it: unanswered
    assert assert_same_as_reference(store) == 5
    with read_transaction(store.engine) as conn:
        answered = conn.execute(text(
            "SELECT count(*) FROM tool_calls WHERE result_seq IS NOT NULL AND duration_ms IS NOT NULL")).scalar_one()
    assert answered == 4
    assert later


def _line(kind: str, entry_id: str, parent: str | None, ms: float, **fields: Any) -> str:
    return js_stringify({"type": kind, "id": entry_id, "parentId": parent, "timestamp": js_iso(ms), **fields})


def _message(entry_id: str, parent: str | None, ms: float, message: dict) -> str:
    return _line("message", entry_id, parent, ms, message=message)


def _branched_file(path: Path, now_ms: float, *, extra: int = 0) -> Path:
    """A call answered first on an old abandoned branch (a failed result), then again on the
    current path; ``extra`` more answered calls appended at the end."""
    old = now_ms - 90 * _DAY
    lines = [
        js_stringify({"type": "session", "version": 3, "id": "tp", "timestamp": js_iso(old), "cwd": "/w"}),
        _message("u1", None, old + 1, {"role": "user", "content": "start", "timestamp": 1}),
        _message("a1", "u1", old + 2, _assistant(("t1", "read"))),
        _message("x1", "a1", old + 3, _result("t1", True, "failed, abandoned")),
        _message("x2", "x1", old + 4, {"role": "user", "content": "old branch", "timestamp": 1}),
        _message("r1", "a1", old + 5, _result("t1", False, "worked")),
        _message("u2", "r1", old + 6, {"role": "user", "content": "next", "timestamp": 1}),
    ]
    parent = "u2"
    for index in range(extra):
        lines.append(_message(f"e{index}", parent, old + 10 + 2 * index, _assistant((f"n{index}", "bash"))))
        lines.append(_message(f"f{index}", f"e{index}", old + 11 + 2 * index, _result(f"n{index}", False)))
        parent = f"f{index}"
    path.write_text("".join(line + "\n" for line in lines), "utf-8")
    return path


def test_reimport_replacement_delete_and_prune(store: SessionStore, tmp_path: Path, clock) -> None:
    now = clock.now
    source = _branched_file(tmp_path / "tp.jsonl", now)
    store.import_file(source)
    other = store.create("/w")
    other.append_message({"role": "user", "content": "go"})
    other.append_message(_assistant(("k1", "read")))
    other.append_message(_result("k1", False))
    assert assert_same_as_reference(store) == 2
    _branched_file(source, now, extra=3)  # the file grew: the import appends its new lines
    store.import_file(source)
    assert assert_same_as_reference(store) == 5
    source.write_text(source.read_text("utf-8").replace("worked", "replaced"), "utf-8")  # rewritten
    assert store.import_path(source, replace=True)[0].imported
    assert assert_same_as_reference(store) == 5
    with read_transaction(store.engine) as conn:
        result = conn.execute(text("SELECT result_entry_id FROM tool_calls WHERE tool_call_id = 't1'")).scalar_one()
    assert result == "x1"  # the first result after the call, on the abandoned branch
    report = store.prune(RetentionPolicy(parse_duration("30d")), apply=True)
    assert report.trimmed  # the abandoned branch went; the kept rows were renumbered
    assert assert_same_as_reference(store) == 5
    with read_transaction(store.engine) as conn:
        result = conn.execute(text("SELECT result_entry_id, is_error FROM tool_calls WHERE tool_call_id = 't1'")
                              ).one()
    assert tuple(result) == ("r1", 0)
    store.delete(other.get_session_id())
    assert assert_same_as_reference(store) == 4
    store.delete("tp")
    with read_transaction(store.engine) as conn:
        assert conn.execute(text("SELECT count(*) FROM tool_call_pairs")).scalar_one() == 0


def test_a_result_looks_up_the_open_calls_by_id(tmp_path: Path) -> None:
    """The answering update reads the partial index of unanswered calls by id, not every earlier
    call of the session: a range scan of the primary key made a long import quadratic."""
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        manager = store.create("/w")
        manager.append_message({"role": "user", "content": "go", "timestamp": 1})
        with write_transaction(store.engine) as conn:
            plan = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + pairs._ANSWER,
                                        (1, 0, 0, 0, 1, "call_1", 10)).all()
    assert [row[-1] for row in plan] == [
        "SEARCH tool_call_pairs USING INDEX ix_tool_call_pairs_open (session_pk=? AND tool_call_id=?)"]
