"""``pi-store stats --by day|model|cwd|tool`` through the real CLI on SQLite and PostgreSQL, field by
field against groups the test computes itself from the raw JSONL files (``raw.pi_activity``)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from store.analysis.readonly import run_sql
from store.cli import main
from store.money import reported_cost
from tests.analysis.conftest import History
from tests.analysis.raw import pi_activity, raw_entries

BY = ("day", "model", "cwd", "tool")


def cli(history: History, *args: str) -> tuple[int, str, str]:
    url = history.store.engine.url.render_as_string(hide_password=False)
    result = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["--db", url, *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def stats_by(history: History, *args: str) -> dict:
    code, out, err = cli(history, "stats", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def records(history: History, session_ids: Iterable[str]) -> list[dict[str, Any]]:
    """The counted entries of the given sessions' files, each with its session id."""
    out = []
    for session_id in session_ids:
        path = history.files[session_id]
        header = header_of(path)
        for record in pi_activity(raw_entries(path), header.get("cwd") if isinstance(header.get("cwd"), str) else ""):
            out.append({**record, "session": session_id})
    return out


def header_of(path: Path) -> dict:
    """The header line of a file (the first JSON value of it)."""
    for line in path.read_bytes().decode("utf-8", "replace").split("\n"):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        return value if isinstance(value, dict) else {}
    return {}


def expected(recs: list[dict[str, Any]], by: str) -> dict[str | None, dict[str, Any]]:
    """The groups ``stats --by`` should print, keyed by their key (costs by the store's money rule)."""
    groups: dict[str | None, dict[str, Any]] = {}
    costs: dict[str | None, list[float]] = defaultdict(list)
    sessions: dict[str | None, set[str]] = defaultdict(set)
    for rec in recs:
        if by == "tool":
            for name, failed in rec["calls"]:
                group = groups.setdefault(name, {"toolCalls": 0, "toolResults": 0, "toolErrors": 0})
                group["toolCalls"] += 1
                group["toolResults"] += failed is not None
                group["toolErrors"] += failed is True
                sessions[name].add(rec["session"])
            continue
        key = rec[by]
        group = groups.setdefault(
            key,
            dict.fromkeys(
                (
                    "messages",
                    "userMessages",
                    "assistantMessages",
                    "toolResults",
                    "toolCalls",
                    "toolErrors",
                    "input",
                    "output",
                    "cacheRead",
                    "cacheWrite",
                ),
                0,
            ),
        )
        sessions[key].add(rec["session"])
        group["messages"] += rec["message"]
        group["userMessages"] += rec["message"] and rec["role"] == "user"
        group["assistantMessages"] += rec["message"] and rec["role"] == "assistant"
        group["toolResults"] += rec["message"] and rec["role"] == "toolResult"
        group["toolCalls"] += len(rec["calls"])
        group["toolErrors"] += sum(failed is True for _, failed in rec["calls"])
        for field in ("input", "output", "cacheRead", "cacheWrite"):
            group[field] += rec[field]
        costs[key].append(rec["cost"])
    for key, group in groups.items():
        group["sessions"] = len(sessions[key])
        if by != "tool":
            group["cost"] = reported_cost(math.fsum(costs[key]))
    return groups


def flat(row: dict[str, Any]) -> dict[str, Any]:
    """A printed row in the shape of :func:`expected`'s groups."""
    row = dict(row)
    key = row.pop("key")
    tokens = row.pop("tokens")
    if tokens is None:  # a tool: no message or usage fields
        assert all(row.pop(field) is None for field in ("messages", "userMessages", "assistantMessages", "cost"))
    else:
        assert tokens["total"] == tokens["input"] + tokens["output"] + tokens["cacheRead"] + tokens["cacheWrite"]
        row.update({field: tokens[field] for field in ("input", "output", "cacheRead", "cacheWrite")})
    return {"key": key, **row}


def check(doc: dict, want: dict[str | None, dict[str, Any]]) -> None:
    got = {row["key"]: row for row in map(flat, doc["rows"])}
    assert len(got) == len(doc["rows"]), "a key printed twice"
    assert set(got) == set(want)
    for key, group in want.items():
        assert {field: got[key][field] for field in group} == group, key
        assert set(got[key]) == {"key", *group}, key


@pytest.mark.parametrize("by", BY)
def test_every_grouping_equals_the_raw_sums(history: History, by: str) -> None:
    doc = stats_by(history, "--by", by)
    assert list(doc) == ["by", "sessionId", "since", "until", "rows"]
    assert (doc["by"], doc["sessionId"], doc["since"], doc["until"]) == (by, None, None, None)
    check(doc, expected(records(history, history.files), by))
    keys = [row["key"] for row in doc["rows"]]
    if by == "day":  # oldest first, the rows without a timestamp last
        assert keys == sorted(keys, key=lambda k: (k is None, k or ""))
    elif by == "tool":
        assert [row["toolCalls"] for row in doc["rows"]] == sorted((r["toolCalls"] for r in doc["rows"]), reverse=True)
    else:
        assert [row["cost"] for row in doc["rows"]] == sorted((r["cost"] for r in doc["rows"]), reverse=True)
    assert len(doc["rows"]) >= (5 if by != "cwd" else 3)


def test_the_groups_add_up_to_stats(history: History) -> None:
    total = json.loads(cli(history, "stats", "--json")[1])
    for by in ("day", "model", "cwd"):
        rows = stats_by(history, "--by", by)["rows"]
        for field, name in (
            ("userMessages", "userMessages"),
            ("assistantMessages", "assistantMessages"),
            ("toolResults", "toolResults"),
            ("toolCalls", "toolCalls"),
            ("messages", "totalMessages"),
        ):
            assert sum(row[field] for row in rows) == total[name], (by, field)
        assert sum(row["tokens"]["total"] for row in rows) == total["tokens"]["total"], by
        assert math.isclose(sum(row["cost"] for row in rows), total["cost"], rel_tol=1e-12)
    tools = stats_by(history, "--by", "tool")["rows"]
    assert sum(row["toolCalls"] for row in tools) == total["toolCalls"]


def test_one_session_and_a_time_window(history: History) -> None:
    session_id = max(history.files, key=lambda sid: len(raw_entries(history.files[sid])))
    recs = records(history, [session_id])
    stamps = sorted(r["timestamp"] for r in recs if isinstance(r["timestamp"], str))
    since, until = stamps[len(stamps) // 4], stamps[3 * len(stamps) // 4]
    window = [r for r in recs if isinstance(r["timestamp"], str) and since <= r["timestamp"] < until]
    assert 0 < len(window) < len(recs)
    for by in BY:
        doc = stats_by(history, session_id, "--by", by)
        assert doc["sessionId"] == session_id
        check(doc, expected(recs, by))
        assert stats_by(history, "--session", session_id, "--by", by) == doc
        doc = stats_by(history, session_id, "--by", by, "--since", since, "--until", until)
        assert (doc["since"], doc["until"]) == (since, until)
        check(doc, expected(window, by))
    # years past four digits (+010000-...) compared as text sorted before 2026: all rows were
    # "since" the year 10000 and none "until" it
    every_day = stats_by(history, session_id, "--by", "day")["rows"]
    far = stats_by(history, session_id, "--by", "day", "--until", "+010000-01-01")
    assert far["until"] == "+010000-01-01T00:00:00.000Z" and far["rows"] == every_day
    assert stats_by(history, session_id, "--by", "day", "--since", "+010000-01-01")["rows"] == []
    assert stats_by(history, session_id, "--by", "day", "--since", "-000100-01-01")["rows"] == every_day


def test_the_output_formats_print_the_same_rows(history: History) -> None:
    doc = stats_by(history, "--by", "model")
    rows = doc["rows"]
    code, out, _ = cli(history, "stats", "--by", "model", "--nl")
    assert code == 0 and [json.loads(line) for line in out.splitlines()] == rows
    table = list(csv.DictReader(io.StringIO(cli(history, "stats", "--by", "model", "--csv")[1])))
    assert [r["key"] for r in table] == [row["key"] or "" for row in rows]
    for printed, row in zip(table, rows, strict=True):
        assert float(printed["cost"]) == row["cost"] and printed["tokensTotal"] == str(row["tokens"]["total"])
        assert printed["toolCalls"] == str(row["toolCalls"]) and printed["sessions"] == str(row["sessions"])
    tsv = cli(history, "stats", "--by", "model", "--tsv")[1].splitlines()
    assert tsv[0].split("\t") == list(table[0]) and len(tsv) == len(rows) + 1
    plain = cli(history, "stats", "--by", "model")[1].splitlines()
    first = rows[0]
    assert plain[0] == (
        f"{first['key']}  {first['messages']:,} messages  {first['toolCalls']:,} tool calls  "
        f"{first['tokens']['total']:,} tokens  ${first['cost']:.4f}  {first['sessions']:,} sessions"
    )
    assert cli(history, "stats", "--by", "day", "--table")[1].split()[:4] == ["day", "sessions", "messages", "tool"]
    tools = cli(history, "stats", "--by", "tool", "--csv")[1].splitlines()
    assert tools[0] == ",".join(table[0]) and tools[1].endswith(",,,,,,")  # the same columns, usage empty


def test_refusals(history: History) -> None:
    code, _, err = cli(history, "stats", "--by", "day", "no-such-session")
    assert code == 1 and "no-such-session" in err
    code, _, err = cli(history, "stats", "--since", "2026-01-01")
    assert code == 2 and "--since and --until go with --by" in err
    code, _, err = cli(history, "stats", "--by", "day", "--since", "yesterday-ish")
    assert code == 2 and "not a date" in err
    code, _, err = cli(history, "stats", "a", "--session", "b", "--by", "day")
    assert code == 2 and "give the session once" in err
    code, _, err = cli(history, "stats", "--by", "week")
    assert code == 2


def test_the_cli_offers_every_grouping() -> None:
    from store.analysis import breakdown
    from store.cli import analysis

    assert analysis.BY == breakdown.BY == BY


def test_the_documented_activity_query_gives_the_by_day_rows(history: History) -> None:
    """docs/sql.md's query over ``activity`` prints what ``stats --by day`` prints."""
    doc = (Path(__file__).parents[2] / "docs" / "sql.md").read_text("utf-8")
    sql = doc.split("### `activity`", 1)[1].split("```sql\n", 1)[1].split("```", 1)[0]
    result = run_sql(history.store.engine, sql)
    got = [dict(zip(result.columns, row, strict=True)) for row in result.rows]
    want = stats_by(history, "--by", "day")["rows"]
    assert sorted(
        (
            r["day"] or "~",
            r["sessions"],
            r["messages"],
            r["tool_calls"],
            r["tool_errors"],
            r["tokens"],
            reported_cost(r["cost"]),
        )
        for r in got
    ) == sorted(
        (
            r["key"] or "~",
            r["sessions"],
            r["messages"],
            r["toolCalls"],
            r["toolErrors"],
            r["tokens"]["total"],
            r["cost"],
        )
        for r in want
    )
