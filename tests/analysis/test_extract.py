"""``analysis_values``: what each kind of entry contributes to search, facts and usage."""

from __future__ import annotations

import json

from store.analysis.extract import ANALYSIS_COLUMNS, NO_ANALYSIS, SEARCH_TEXT_LIMIT, analysis_values
from store.db.stored_text import db_text


def values(entry: dict) -> dict:
    row = dict(zip(ANALYSIS_COLUMNS, analysis_values(entry), strict=True))
    row["facts"] = json.loads(row["facts"])
    return row


def message(msg: dict) -> dict:
    return values({"type": "message", "id": "a", "parentId": None, "timestamp": "t", "message": msg})


USAGE = {"input": 100, "output": 20, "cacheRead": 3, "cacheWrite": 4, "totalTokens": 127,
         "cost": {"input": 0.1, "output": 0.2, "cacheRead": 0.0, "cacheWrite": 0.0, "total": 0.3}}


def test_user_text_and_blocks() -> None:
    assert message({"role": "user", "content": "hello"}) == {
        "search_text": "hello", "facts": {}, "provider": "", "model": "", "has_usage": 0, "usage_input": 0,
        "usage_output": 0, "usage_cache_read": 0, "usage_cache_write": 0, "usage_cost": 0.0}
    row = message({"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "image", "data": "QUJD"},
                                               {"type": "text", "text": "two"}]})
    assert (row["search_text"], row["facts"]) == ("one\ntwo", {})


def test_assistant_text_thinking_tool_calls_and_usage() -> None:
    row = message({"role": "assistant", "provider": "anthropic", "model": "claude", "stopReason": "toolUse",
                   "usage": USAGE, "content": [
                       {"type": "thinking", "thinking": "let me think"},
                       {"type": "text", "text": "I will read it"},
                       {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "/a/b.py", "limit": 5}},
                   ]})
    assert row["search_text"] == "I will read it\nlet me think\nread\n/a/b.py\n5"
    numbers = message({"role": "assistant", "content": [
        {"type": "toolCall", "id": "c2", "name": "calc", "arguments": {"x": 1.0, "y": 1.5e-7}}]})
    assert numbers["search_text"] == "\ncalc\n1\n1.5e-7"  # numbers as JavaScript writes them
    assert row["facts"] == {"stopReason": "toolUse", "totalTokens": 127, "textChars": 14, "toolCalls": [
        {"id": "c1", "name": "read", "arguments": {"path": "/a/b.py", "limit": 5}}]}
    assert (row["provider"], row["model"], row["has_usage"]) == ("anthropic", "claude", 1)
    assert (row["usage_input"], row["usage_output"], row["usage_cache_read"], row["usage_cache_write"],
            row["usage_cost"]) == (100, 20, 3, 4, 0.3)


def test_tool_results_and_other_roles() -> None:
    row = message({"role": "toolResult", "toolCallId": "c1", "toolName": "read", "isError": True,
                   "content": [{"type": "text", "text": "no such file"}]})
    assert row["facts"] == {"toolCallId": "c1", "toolName": "read", "isError": 1} and row["has_usage"] == 0
    assert message({"role": "toolResult", "content": [], "usage": USAGE})["has_usage"] == 1
    bash = message({"role": "bashExecution", "command": "ls", "output": "a.txt", "exitCode": 2})
    assert (bash["search_text"], bash["facts"]) == ("ls\na.txt", {"exitCode": 2})
    system = message({"role": "system", "content": "base", "sections": {"tools": "tool list", "gone": None}})
    assert system["search_text"] == "base\ntool list" and system["facts"] == {"textChars": 4}
    assert message({"role": "custom", "content": "from an extension"})["search_text"] == "from an extension"


def test_other_entries() -> None:
    compaction = values({"type": "compaction", "summary": "we did x", "firstKeptEntryId": "k", "tokensBefore": 900,
                         "fromHook": False, "usage": USAGE})
    assert compaction["search_text"] == "we did x" and compaction["has_usage"] == 1
    assert compaction["facts"] == {"firstKeptEntryId": "k", "tokensBefore": 900, "fromHook": 0, "totalTokens": 127}
    assert values({"type": "branch_summary", "summary": "left", "fromId": "f"})["facts"] == {"fromId": "f"}
    odd = values({"type": "compaction", "summary": "s", "firstKeptEntryId": "a\x00\ud800", "tokensBefore": 1})
    assert odd["facts"]["firstKeptEntryId"] == db_text("a\x00\ud800") == "a\\u0000\\ud800"  # as entry_id holds it
    usage = values({"type": "usage", "kind": "cache_warm", "provider": "p", "model": "m", "usage": USAGE})
    assert (usage["search_text"], usage["model"], usage["has_usage"], usage["facts"]["kind"]) == ("", "m", 1,
                                                                                                 "cache_warm")
    assert values({"type": "context_edit", "targetId": "t", "replacement": None})["facts"] == {"hides": 1}
    edit = values({"type": "context_edit", "targetId": "t", "replacement": {"content": "new words"}})
    assert (edit["search_text"], edit["facts"]) == ("new words", {"hides": 0})
    assert values({"type": "label", "targetId": "t", "label": "mark"})["search_text"] == "mark"
    assert values({"type": "session_info", "name": "my session"})["search_text"] == "my session"
    assert values({"type": "model_change", "provider": "p", "modelId": "m"})["facts"] == {"providerId": "p",
                                                                                            "modelId": "m"}
    assert values({"type": "custom_message", "customType": "x", "content": "c", "display": True})["facts"] == {
        "customType": "x", "display": 1}
    assert analysis_values({"type": "something-new", "text": "x"}) == NO_ANALYSIS
    assert analysis_values({"type": "message", "message": None}) == NO_ANALYSIS


def test_stored_strings_are_clean_and_bounded() -> None:
    row = message({"role": "assistant", "model": "m\x00", "errorMessage": "bad \ud800 thing", "content": [
        {"type": "toolCall", "id": "c", "name": "n", "arguments": {"k\udfff": "v\x00", "big": 10**30}}]})
    assert "\ud800" not in row["search_text"] and row["model"] == "m\ufffd"
    assert row["facts"]["errorMessage"] == "bad \ufffd thing"
    assert row["facts"]["toolCalls"][0]["arguments"] == {"k\ufffd": "v\ufffd", "big": 1e30}
    assert message({"role": "user", "content": "a\x00b"})["search_text"] == "a\ufffdb"
    long = message({"role": "user", "content": "x" * (SEARCH_TEXT_LIMIT + 10)})
    assert len(long["search_text"]) == SEARCH_TEXT_LIMIT and long["facts"] == {"textChars": SEARCH_TEXT_LIMIT + 10}


def test_odd_usage_counts_as_zero() -> None:
    """The store's rule, not Pi's: Pi adds such values as they are (string concatenation, TypeError
    on a missing ``cost``; see test_stats_oracle)."""
    odd = {"input": "12", "output": 1.5, "cacheRead": True, "cacheWrite": 2.0, "cost": {"total": float("inf")}}
    row = message({"role": "assistant", "content": [], "usage": odd})
    assert (row["has_usage"], row["usage_input"], row["usage_output"], row["usage_cache_read"],
            row["usage_cache_write"], row["usage_cost"]) == (1, 0, 0, 0, 2, 0.0)
    assert message({"role": "assistant", "content": [], "usage": None})["has_usage"] == 0
    assert message({"role": "toolResult", "content": [], "usage": {}})["has_usage"] == 1  # {} is truthy in Pi
