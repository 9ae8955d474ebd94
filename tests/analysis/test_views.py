"""The documented views over real imported history, on SQLite and PostgreSQL, against what the
tests compute themselves: from the raw JSONL (``raw.py``) and from Pi's own documents of the
fixture sessions (``describe.mjs`` outputs committed under ``tests/fixtures/oracle``)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

import pytest
from sqlalchemy import text

from store.analysis.stats import Tokens
from store.db.engine import read_transaction
from store.money import reported_cost
from tests.analysis.conftest import History
from tests.analysis.raw import pi_stats, raw_entries, raw_numbered
from tests.oracle_support import CORPUS_DIR, load_fixture_cases

DESCRIBED = {case.source_path.resolve(): case for case in load_fixture_cases()}


def rows(history: History, sql: str, **params: Any) -> list[Any]:
    with read_transaction(history.store.engine) as conn:
        return list(conn.execute(text(sql), params))


def by_session(history: History, sql: str) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = defaultdict(list)
    for row in rows(history, sql):
        grouped[row.session_id].append(row)
    return grouped


def migrated(history: History) -> set[str]:
    """Sessions migrated on import (v1/v2 files): their entry ids are made at import."""
    return {row.session_id for row in rows(history, "SELECT session_id FROM sessions WHERE migrated_from IS NOT NULL")}


def test_history_holds_the_fixtures_and_the_corpus(history: History) -> None:
    names = {path.name for path in history.files.values()}
    assert len(history.files) >= 50
    assert "small-seed1-0.jsonl" in names and "legacy-v1.jsonl" in names
    assert any(name.startswith("v3-real-") for name in names) or not CORPUS_DIR.is_dir()


def test_usage_and_message_counts_equal_the_raw_sums(history: History) -> None:
    """Stats and the views over every file against sums computed from the raw JSONL: counts and
    token sums exactly, cost as the raw sum rounded by the store's one rule (``store.money``; Pi's
    own numbers: test_stats_oracle)."""
    overview = {row.id: row for row in rows(history, "SELECT * FROM sessions_overview")}
    ledger = by_session(history, "SELECT * FROM usage_ledger")
    messages = by_session(history, "SELECT session_id, role FROM messages")
    checked = 0
    for session_id, path in history.files.items():
        expected = pi_stats(raw_entries(path))
        expected["cost"] = reported_cost(expected["cost"])  # the one number every surface reports
        stats = history.store.stats(session_id)
        got = {"userMessages": stats.user_messages, "assistantMessages": stats.assistant_messages,
               "toolCalls": stats.tool_calls, "toolResults": stats.tool_results,
               "totalMessages": stats.total_messages, "input": stats.tokens.input, "output": stats.tokens.output,
               "cacheRead": stats.tokens.cache_read, "cacheWrite": stats.tokens.cache_write, "cost": stats.cost,
               "records": sum(m.records for m in stats.models)}
        assert got == expected, path.name
        tokens = expected["input"] + expected["output"] + expected["cacheRead"] + expected["cacheWrite"]
        assert len(ledger[session_id]) == expected["records"], path.name
        assert sum(r.tokens for r in ledger[session_id]) == tokens, path.name
        assert math.isclose(sum(r.cost for r in ledger[session_id]), expected["cost"], rel_tol=1e-12, abs_tol=1e-12)
        row = overview[session_id]
        assert (row.input, row.output, row.cache_read, row.cache_write, row.tokens) == (
            expected["input"], expected["output"], expected["cacheRead"], expected["cacheWrite"], tokens)
        assert math.isclose(row.cost, expected["cost"], rel_tol=1e-12, abs_tol=1e-12)
        assert len(messages[session_id]) == expected["totalMessages"] == row.message_count, path.name
        checked += expected["records"]
    assert checked > 500  # the history does carry usage


def test_all_sessions_stats_add_up(history: History) -> None:
    total = history.store.stats()
    assert total.sessions == len(rows(history, "SELECT pk FROM sessions"))
    singles = [history.store.stats(sid) for sid in history.files]
    for counted in ("total_messages", "user_messages", "assistant_messages", "tool_calls", "tool_results"):
        assert getattr(total, counted) == sum(getattr(s, counted) for s in singles), counted
    assert total.tokens == Tokens(*(sum(getattr(s.tokens, t) for s in singles)
                                    for t in ("input", "output", "cache_read", "cache_write")))
    assert math.isclose(total.cost, sum(s.cost for s in singles), rel_tol=1e-9)
    # (the all-sessions figures are read from activity_days: the per-model rows too)
    records: dict[tuple, list] = {}
    for single in singles:
        for m in single.models:
            kept = records.setdefault((m.provider, m.model), [0, 0])
            kept[0] += m.records
            kept[1] += m.tokens.total
    assert {(m.provider, m.model): [m.records, m.tokens.total] for m in total.models} == records


def test_on_path_and_latest_compaction_follow_pi(history: History) -> None:
    """``on_path`` marks Pi's branch (root to leaf), ``is_latest`` the last compaction on it."""
    flagged = by_session(history, "SELECT session_id, entry_id, on_path FROM messages")
    compactions = by_session(history, "SELECT session_id, entry_id, is_latest, on_path FROM compactions")
    skip = migrated(history)  # Pi's ids are pinned by the oracle, ours are made at import
    compared = 0
    for session_id, path in history.files.items():
        case = DESCRIBED.get(path.resolve())
        if case is None or not isinstance(case.describe.get("branchIds"), list):
            continue
        if session_id in skip:
            continue
        branch = set(case.describe["branchIds"])
        for row in flagged[session_id]:
            assert row.on_path == (row.entry_id in branch), (path.name, row.entry_id)
        types = {e.get("id"): e.get("type") for e in case.describe["entries"] if isinstance(e, dict)}
        on_branch = [i for i in case.describe["branchIds"] if types.get(i) == "compaction"]
        assert [row.entry_id for row in compactions[session_id] if row.is_latest] == on_branch[-1:], path.name
        assert {row.entry_id for row in compactions[session_id] if row.on_path} == set(on_branch), path.name
        compared += 1
    assert compared > 40


def test_tool_calls_match_their_results(history: History) -> None:
    calls = by_session(history, "SELECT * FROM tool_calls")
    matched = 0
    for session_id, path in history.files.items():
        results: dict[str, list[tuple[int, Any]]] = defaultdict(list)
        for seq, entry in raw_numbered(path):
            message = entry.get("message") if isinstance(entry, dict) and entry.get("type") == "message" else None
            if isinstance(message, dict) and message.get("role") == "toolResult":
                results[message.get("toolCallId")].append((seq, message.get("isError")))
        expected = pi_stats(raw_entries(path))["toolCalls"]
        assert len(calls[session_id]) == expected, path.name
        for row in calls[session_id]:
            after = [(seq, error) for seq, error in results.get(row.tool_call_id, []) if seq > row.seq]
            assert (row.result_seq is None) == (not after), (path.name, row.tool_call_id)
            if after:  # the first result after the call
                assert row.result_seq == after[0][0]
                assert row.is_error == (1 if after[0][1] is True else 0 if after[0][1] is False else None), path.name
                matched += 1
    assert matched > 100


def test_branches_are_branch_points_and_leaves(history: History) -> None:
    """For files without duplicate ids: children counted from ``parentId``, as Pi's tree does."""
    branches = by_session(history, "SELECT session_id, entry_id, kind, children, is_current_leaf FROM branches")
    skip = migrated(history)
    compared = 0
    for session_id, path in history.files.items():
        entries = [e for e in raw_entries(path) if isinstance(e, dict) and isinstance(e.get("id"), str)]
        ids = [e["id"] for e in entries]
        if len(set(ids)) != len(ids) or session_id in skip or not ids:
            continue
        children = Counter(e.get("parentId") for e in entries if e.get("parentId") in set(ids))
        expected = {(i, "leaf", 0) for i in ids if children[i] == 0}
        expected |= {(i, "branch_point", n) for i, n in children.items() if n > 1}
        if any(e.get("parentId") == e.get("id") for e in entries):
            continue  # a self-parent: Pi's tree makes it a root
        got = {(r.entry_id, r.kind, r.children) for r in branches[session_id] if r.entry_id is not None}
        assert got == expected, path.name  # (an entry without an id is a leaf too)
        last = [e for e in raw_entries(path) if isinstance(e, dict)][-1]  # Pi's leaf: the last entry
        assert [r.entry_id for r in branches[session_id] if r.is_current_leaf] == [last.get("id")], path.name
        compared += 1
    assert compared > 30


def test_labels_resolve_like_pi(history: History) -> None:
    labels = by_session(history, "SELECT session_id, target_id, label, is_current FROM labels")
    seen = 0
    for session_id, path in history.files.items():
        current: dict[str, str] = {}
        for entry in raw_entries(path):
            if isinstance(entry, dict) and entry.get("type") == "label" and isinstance(entry.get("targetId"), str):
                label = entry.get("label")
                if isinstance(label, str) and label:
                    current[entry["targetId"]] = label
                else:
                    current.pop(entry["targetId"], None)
        got = {r.target_id: r.label for r in labels[session_id] if r.is_current and r.label is not None}
        assert got == current, path.name
        seen += len(current)
    assert seen > 10


@pytest.mark.parametrize("view", ["sessions_overview", "messages", "tool_calls", "usage_ledger", "compactions",
                                  "branches", "labels", "current_path", "activity"])
def test_every_view_answers(history: History, view: str) -> None:
    assert rows(history, f"SELECT count(*) AS n FROM {view}")[0].n > 0
