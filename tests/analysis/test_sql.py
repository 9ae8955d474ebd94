"""``pi-store sql`` and the documented queries: every query of ``docs/sql.md`` runs on both engines
over real history, the two engines give the same rows, and the connection cannot write."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from store.analysis.readonly import QueryFailed, ResultSet, run_sql, to_csv, to_rows_json, to_table
from store.cli.output import Column, write_delimited
from store.errors import StoreError
from store.session_store import SessionStore
from tests.analysis.conftest import History, history_files
from tests.conftest import scratch_pg_database

DOC = Path(__file__).resolve().parents[2] / "docs" / "sql.md"


def documented_queries() -> list[tuple[str, str]]:
    """``(title, sql)`` of each block under "## Ten queries"."""
    section = DOC.read_text("utf-8").split("## Ten queries", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"### (.+?)\n.*?```sql\n(.*?)```", section, flags=re.S)


QUERIES = documented_queries()


def test_the_doc_has_ten_queries() -> None:
    assert len(QUERIES) == 10


@pytest.mark.parametrize("title, sql", QUERIES, ids=[t.split(".")[0] for t, _ in QUERIES])
def test_documented_query_runs(history: History, title: str, sql: str) -> None:
    result = run_sql(history.store.engine, sql)
    assert result.columns and result.rows, title


def test_documented_answers_match_the_store(history: History) -> None:
    by_title = dict(QUERIES)
    expensive = run_sql(history.store.engine, by_title["2. The most expensive sessions"])
    top = max(history.files, key=lambda sid: history.store.stats(sid).cost)
    assert expensive.rows[0][0] == top
    tools = to_rows_json(run_sql(history.store.engine, by_title["4. Tools that fail most"]))
    failures = run_sql(history.store.engine, "SELECT count(*) FROM tool_calls WHERE is_error = 1").rows[0][0]
    assert sum(row["failures"] for row in tools) <= failures and tools[0]["failures"] > 0


def _doubles(value: Any) -> Any:
    """A JSON value with its numbers as doubles (as JavaScript reads them; -0 is 0)."""
    if isinstance(value, dict):
        return {k: _doubles(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_doubles(v) for v in value]
    return float(value) + 0.0 if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool) else value


def _normal(value: Any) -> Any:
    """A cell as meaning: numbers as rounded doubles, JSON (jsonb on PostgreSQL, text on SQLite)
    with sorted keys and double numbers."""
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float):
        return round(value, 9) if math.isfinite(value) else value
    if isinstance(value, str) and value[:1] in "{[":
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, (dict, list)):
        return json.dumps(_doubles(value), sort_keys=True)
    return value


VIEWS = ("sessions_overview", "messages", "tool_calls", "usage_ledger", "compactions", "branches", "labels",
         "activity")


def test_both_engines_give_the_same_rows(tmp_path: Path) -> None:
    """The same files imported into SQLite and PostgreSQL: every view, row for row."""
    files = [p for p in history_files() if p.stat().st_size < 600_000][:40]
    with scratch_pg_database("pi_store_agree") as pg_url:
        urls = [f"sqlite:///{tmp_path / 'agree.db'}", pg_url]
        results: list[dict[str, list]] = []
        for url in urls:
            with SessionStore.connect(url) as store:
                for path in files:
                    try:
                        store.import_file(path)
                    except StoreError:  # a second file for a session id: refused on both engines
                        continue
                views = {}
                for view in VIEWS:
                    result = run_sql(store.engine, f"SELECT * FROM {view}")
                    keep = [i for i, c in enumerate(result.columns) if c != "session_pk"]
                    views[view] = sorted((tuple(_normal(row[i]) for i in keep) for row in result.rows), key=repr)
                results.append(views)
    for view in VIEWS:
        assert results[0][view] == results[1][view], view
        assert results[0][view], view


def test_the_connection_is_read_only(store: SessionStore) -> None:
    sm = store.create("/w")
    sm.append_message({"role": "user", "content": "hello", "timestamp": 1})
    for statement in ("DELETE FROM entries", "UPDATE sessions SET name = 'x'", "CREATE TABLE t (a INTEGER)",
                      "INSERT INTO sessions (session_id) VALUES ('x')"):
        with pytest.raises(QueryFailed):
            run_sql(store.engine, statement)
    assert run_sql(store.engine, "SELECT count(*) AS n FROM entries WHERE kind = 'entry'").rows == [(1,)]
    assert store.list_all()[0].message_count == 1
    with pytest.raises(QueryFailed):
        run_sql(store.engine, "SELECT * FROM no_such_view")
    for nothing in ("/* only a comment */", "-- a comment"):  # SQLite said "(0 rows)", PostgreSQL this
        with pytest.raises(QueryFailed):  # (each engine in its words: no statement to run)
            run_sql(store.engine, nothing)


def test_a_column_no_row_can_hold_is_named() -> None:
    """PostgreSQL's pseudo-types (``pg_sleep()`` returns void; SQLite has none): the rows are
    fetched through a function whose column list cannot name them; the refusal names the user's
    column, not ours."""
    with scratch_pg_database("pi_store_pseudo") as url, SessionStore.connect(url) as store:
        with pytest.raises(QueryFailed, match=r'^column "pg_sleep" has the pseudo-type void, .* cast it to text'):
            run_sql(store.engine, "SELECT 1 AS a, pg_sleep(0)")
        assert run_sql(store.engine, "SELECT 1 AS a, pg_sleep(0)::text AS slept").rows == [(1, "")]


def test_postgresql_values_python_cannot_hold_are_shown_as_postgresql_writes_them() -> None:
    """An interval came out as Python's ``timedelta`` (``'1 month'`` as "30 days, 0:00:00",
    ``'-1 second'`` as "-1 day, 23:59:59"); an infinite or BC date or timestamp failed the whole
    query ("date too large"); a numeric with a fraction lost its digits in CSV and the table (NaN
    stays JSON's null there, as in every format: test_cli_output)."""
    statement = ("SELECT interval '1 month' AS month, interval '-1 second' AS back, date 'infinity' AS forever, "
                 "timestamptz '-infinity' AS never, date '0044-03-15 BC' AS ides, "
                 "12345678901234567890.5::numeric AS big, 'NaN'::numeric AS nan, date '2026-12-07' AS day, "
                 "1e-20::numeric AS tiny")
    with scratch_pg_database("pi_store_values") as url, SessionStore.connect(url) as store:
        result = run_sql(store.engine, statement)
    assert list(csv.reader(io.StringIO(to_csv(result))))[1] == [
        "1 mon", "-00:00:01", "infinity", "-infinity", "0044-03-15 BC", "12345678901234567890.5", "null", "2026-12-07",
        "0.00000000000000000001"]
    assert "12345678901234567890.5 | null" in to_table(result)
    assert to_rows_json(result)[0]["month"] == "1 mon" and to_rows_json(result)[0]["day"] == "2026-12-07"


def test_a_killed_sql_command_does_not_leave_its_query_running_on_the_server() -> None:
    """Ctrl-C cancels the query (psycopg sends the cancel); a SIGTERM ended the process and left
    the server running the statement, with no time limit (``--timeout 0``), until someone
    terminated the backend by hand (the server does not notice a client gone mid-query). A
    SIGTERM is now handled as Ctrl-C is, with its own exit status, 143."""
    import signal
    import time

    endless = "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t"
    running = ("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pi_store_sql_fetch%' AND state = 'active' "
               "AND pid <> pg_backend_pid()")
    with scratch_pg_database("pi_store_sigterm") as url, SessionStore.connect(url) as store:
        process = subprocess.Popen([sys.executable, "-m", "store.cli", "--db", url, "sql", "--timeout", "0", endless],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:  # a new view each time
                deadline = time.monotonic() + 60
                while conn.execute(text(running)).scalar_one() == 0 and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert conn.execute(text(running)).scalar_one() == 1
                process.send_signal(signal.SIGTERM)
                assert process.wait(timeout=30) == 143
                deadline = time.monotonic() + 15
                while conn.execute(text(running)).scalar_one() and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert conn.execute(text(running)).scalar_one() == 0
        finally:
            process.kill()
            process.wait()


def test_formats() -> None:
    result = ResultSet(["n", "name", "data", "missing"],
                       [(1, "a,b", {"k": [1, 2]}, None), (Decimal("2.5"), "é\nx", [], None)])
    assert to_rows_json(result) == [{"n": 1, "name": "a,b", "data": {"k": [1, 2]}, "missing": None},
                                    {"n": 2.5, "name": "é\nx", "data": [], "missing": None}]
    assert list(csv.reader(io.StringIO(to_csv(result)))) == [
        ["n", "name", "data", "missing"], ["1", "a,b", '{"k":[1,2]}', ""], ["2.5", "é\nx", "[]", ""]]
    table = to_table(result).splitlines()
    assert table[0].split(" | ")[0].strip() == "n" and table[-1] == "(2 rows)" and "é x" in table[3]
    numbers = ResultSet(["cost", "big", "flag"], [(1e-05, 1e16, True)])  # as --json writes them
    assert to_csv(numbers).splitlines()[1] == "0.00001,10000000000000000,true"
    whole = ResultSet(["int", "numeric"], [(2**53 + 1, Decimal("12345678901234567890"))])  # text keeps every digit
    assert to_csv(whole).splitlines()[1] == "9007199254740993,12345678901234567890"
    assert "9007199254740993 | 12345678901234567890" in to_table(whole)


def test_the_table_shows_control_characters_instead_of_sending_them() -> None:
    """The table (on a terminal and the piped default) is for people: a stored text's escape
    sequences (set the window title, clear the screen), carriage returns and bidi overrides are
    shown, not sent to the terminal, as ``list`` and ``tree`` show them; JSON keeps them."""
    text = "title\x1b]0;PWNED\x07 clear\x1b[2J cr\r bs\b rtl\u202eabc"
    result = ResultSet(["text", "alias\x1b[31m"], [(text, 1)])
    table = to_table(result)
    assert not set(table) & {"\x1b", "\x07", "\r", "\b", "\u202e"}
    assert "cr⟨U+000D⟩ bs⟨U+0008⟩ rtl⟨U+202E⟩abc" in table and table.splitlines()[0].rstrip().endswith("alias")
    assert to_rows_json(result)[0]["text"] == text


def test_csv_quotes_a_carriage_return() -> None:
    """The csv module quotes only its own line terminator's characters ("\\n" here): a value
    holding a bare "\\r" went out unquoted and split its record for every CSV reader."""
    result = ResultSet(["text", "n"], [("line\rnext", 1), ("plain", 2)])
    assert list(csv.reader(io.StringIO(to_csv(result), newline=""))) == [
        ["text", "n"], ["line\rnext", "1"], ["plain", "2"]]
    rows = [{"id": "s\r1", "cwd": "/w"}, {"id": "s2", "cwd": "/v"}]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # list/search/stats --csv
        write_delimited([Column("id", "id"), Column("cwd", "cwd")], rows, ",")
    assert list(csv.DictReader(io.StringIO(out.getvalue(), newline=""))) == rows


def test_cli_sql_prints_the_count_first(store: SessionStore, db_url: str) -> None:
    sm = store.create("/w")
    for i in range(3):
        sm.append_message({"role": "user", "content": f"m{i}", "timestamp": i})

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "store.cli", "--db", db_url, *args],
                              capture_output=True, text=True, timeout=120)

    done = cli("sql", "SELECT count(*) AS n FROM messages")
    assert done.returncode == 0, done.stderr
    assert re.search(r"\d+", done.stdout).group() == "3"
    assert json.loads(cli("sql", "--json", "SELECT role, count(*) AS n FROM messages GROUP BY role").stdout) == [
        {"role": "user", "n": 3}]
    assert cli("sql", "--csv", "SELECT 1 AS a").stdout == "a\n1\n"
    refused = cli("sql", "DELETE FROM entries")
    assert refused.returncode == 1 and "Error" in refused.stderr


# Queries 1, 3, 4, 5, 6, 7, 9 and 10 as docs/sql.md first wrote them (the rewrites read less, or
# read totals kept at write time: docs/sql.md, "What the views cost at scale"); each rewrite must
# return the same rows.
_FIRST_WRITTEN = {
    "1. Cost per model per day": """
SELECT substr(timestamp, 1, 10) AS day, provider, model, count(*) AS calls, sum(tokens) AS tokens,
       sum(cost) AS cost
FROM usage_ledger
GROUP BY substr(timestamp, 1, 10), provider, model
ORDER BY day, cost DESC""",
    "3. Sessions with the most errors (model errors and failed tool calls)": """
SELECT o.id, o.cwd, coalesce(m.model_errors, 0) AS model_errors, coalesce(t.tool_errors, 0) AS tool_errors
FROM sessions_overview AS o
LEFT JOIN (SELECT session_id, count(*) AS model_errors FROM messages
           WHERE stop_reason = 'error' GROUP BY session_id) AS m ON m.session_id = o.id
LEFT JOIN (SELECT session_id, count(*) AS tool_errors FROM tool_calls
           WHERE is_error = 1 GROUP BY session_id) AS t ON t.session_id = o.id
WHERE coalesce(m.model_errors, 0) + coalesce(t.tool_errors, 0) > 0
ORDER BY coalesce(m.model_errors, 0) + coalesce(t.tool_errors, 0) DESC
LIMIT 10""",
    "6. What files an agent touched": """
SELECT arguments ->> 'path' AS file, name AS tool, count(*) AS times, max(timestamp) AS last_time
FROM tool_calls
WHERE name IN ('read', 'write', 'edit') AND arguments ->> 'path' IS NOT NULL{only_strings}
GROUP BY arguments ->> 'path', name
ORDER BY times DESC, file
LIMIT 20""",
    "9. Work left on abandoned branches": """
SELECT session_id, count(*) AS messages_off_path, sum(cost) AS cost_off_path
FROM messages
WHERE on_path = 0
GROUP BY session_id
ORDER BY cost_off_path DESC, messages_off_path DESC
LIMIT 10""",
    "4. Tools that fail most": """
SELECT name, count(*) AS calls, sum(is_error) AS failures,
       round(100.0 * sum(is_error) / count(*), 1) AS failure_pct
FROM tool_calls
WHERE result_entry_id IS NOT NULL
GROUP BY name
ORDER BY failures DESC, calls DESC
LIMIT 10""",
    "5. The longest turns (assistant steps between two user messages, on the current path)": """
WITH numbered AS (
    SELECT session_id, seq, role, text, output, cost,
           sum(CASE WHEN role = 'user' THEN 1 ELSE 0 END) OVER (PARTITION BY session_id ORDER BY seq) AS turn
    FROM messages
    WHERE on_path = 1
)
SELECT session_id, turn, min(CASE WHEN role = 'user' THEN substr(text, 1, 60) END) AS prompt,
       sum(CASE WHEN role = 'assistant' THEN 1 ELSE 0 END) AS steps, sum(output) AS output_tokens,
       sum(cost) AS cost
FROM numbered
GROUP BY session_id, turn
ORDER BY steps DESC, output_tokens DESC
LIMIT 10""",
    "7. Prompt-cache hit rate per model": """
SELECT provider, model, sum(input) AS input, sum(cache_read) AS cache_read,
       round(100.0 * sum(cache_read) / nullif(sum(input) + sum(cache_read), 0), 1) AS cache_hit_pct
FROM usage_ledger
WHERE model IS NOT NULL
GROUP BY provider, model
ORDER BY cache_hit_pct DESC NULLS LAST""",
    "10. Bookmarks: current labels and the text they mark": """
SELECT l.session_id, l.label, l.target_role, substr(m.text, 1, 80) AS marked_text, l.timestamp
FROM labels AS l
LEFT JOIN messages AS m ON m.session_id = l.session_id AND m.entry_id = l.target_id AND m.superseded = 0
WHERE l.is_current = 1 AND l.label IS NOT NULL
ORDER BY l.timestamp""",
}


@pytest.mark.parametrize("title", list(_FIRST_WRITTEN), ids=[t.split(".")[0] for t in _FIRST_WRITTEN])
def test_rewritten_queries_return_what_the_first_texts_did(history: History, title: str) -> None:
    def rows(sql: str) -> list:  # every row, not the first ten of an order with ties
        every = re.sub(r"\bLIMIT (10|20)\b", "", sql)
        return sorted((tuple(_normal(v) for v in row) for row in run_sql(history.store.engine, every).rows), key=repr)

    # query 6 counts a path only when it is a string (tool_call_pairs.path); the first text also
    # counted a number or an object given as the path (an edge-case fixture has one)
    strings = ("json_type(arguments, '$.path') = 'text'" if history.dialect == "sqlite"
               else "jsonb_typeof(arguments -> 'path') = 'string'")
    first_sql = _FIRST_WRITTEN[title].replace("{only_strings}", f" AND {strings}")
    now, first = rows(dict(QUERIES)[title]), rows(first_sql)
    assert now == first and len(now) > 5
