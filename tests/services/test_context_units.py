"""Unit tests of the context services' finer rules (the oracle tests cover the rest)."""

from __future__ import annotations

import math

import pytest

from store.format.jsvalue import UNDEFINED
from store.services import (
    CompactionSettings,
    build_context_entries,
    build_session_projection,
    entry_to_messages,
    estimate_context_tokens,
    estimate_tokens,
    get_current_system_message,
    jsonable,
    should_compact,
)


def sysmsg(content, ts=1, **fields):
    message = {"role": "system", "content": content, **fields}
    if ts is not UNDEFINED:
        message["timestamp"] = ts
    return message


def test_system_replay_joins_texts_and_patches_sections_in_js_order() -> None:
    messages = [
        sysmsg([{"type": "text", "text": "a"}, {"type": "image", "data": "x"}, {"type": "text", "text": "b"}], ts=5,
               sections={"z": "Z", "10": "ten", "2": "two"}, toolsAdded=[{"name": "t1"}, {"name": "t2"}]),
        {"role": "user", "content": "hi", "timestamp": 6},
        sysmsg("", ts=7, sections={"2": None, "1": "one", "z": "Z2"}, toolsRemoved=[{"name": "t1"}],
               toolsAdded=[{"name": "t3"}, {"name": "t2", "v": 2}]),
        sysmsg("c", ts=8),
    ]
    replay = get_current_system_message(messages)
    assert replay == {"role": "system", "content": "a\nb\n\nc",
                      "sections": {"1": "one", "10": "ten", "z": "Z2"},
                      "toolsAdded": [{"name": "t2", "v": 2}, {"name": "t3"}], "timestamp": 5}
    assert list(replay["sections"]) == ["1", "10", "z"]
    assert list(replay) == ["role", "content", "sections", "toolsAdded", "timestamp"]


def test_system_replay_absent_cases() -> None:
    assert get_current_system_message([]) is None
    assert get_current_system_message([{"role": "user", "content": "x"}]) is None
    # pi-ai's rule: no timestamp and no tools -> nothing, even though a system message exists.
    assert get_current_system_message([sysmsg("text", ts=UNDEFINED)]) is None
    assert get_current_system_message([sysmsg("t", ts=None)]) == {"role": "system", "content": "t", "timestamp": 0}
    only_tools = get_current_system_message([sysmsg("", ts=UNDEFINED, toolsAdded=[{"name": "x"}])])
    assert only_tools == {"role": "system", "content": "", "toolsAdded": [{"name": "x"}], "timestamp": 0}
    # The first timestamp that is not null/undefined wins.
    assert get_current_system_message([sysmsg("a", ts=None), sysmsg("b", ts=9)])["timestamp"] == 9
    with pytest.raises(TypeError):  # contentText(undefined) throws in pi-ai
        get_current_system_message([{"role": "system", "timestamp": 1}])


def test_entry_to_messages_shapes() -> None:
    assert entry_to_messages({"type": "message", "message": {"role": "system", "content": None}}) == [
        {"role": "system", "content": ""}]
    assert entry_to_messages({"type": "message", "message": {"role": "user"}}) == [{"role": "user", "content": []}]
    custom = entry_to_messages({"type": "custom_message", "customType": "x", "content": None, "display": False,
                                "timestamp": "2025-01-01T00:00:00.000Z"})
    assert custom == [{"role": "custom", "customType": "x", "content": [], "display": False,
                       "timestamp": 1735689600000}]
    bad_time = entry_to_messages({"type": "branch_summary", "summary": "s", "fromId": "f", "timestamp": "nope"})
    assert jsonable(bad_time) == [{"role": "branchSummary", "summary": "s", "fromId": "f", "timestamp": None}]
    assert entry_to_messages({"type": "branch_summary", "summary": "", "timestamp": "x"}) == []
    assert entry_to_messages({"type": "label", "targetId": "a"}) == []
    with pytest.raises(TypeError):
        entry_to_messages({"type": "message", "message": None})


def _entry(i, kind="message", parent=True, **fields):
    return {"type": kind, "id": f"x{i}", "parentId": f"x{i - 1}" if parent and i > 1 else None,
            "timestamp": "2025-01-01T00:00:00.000Z", **fields}


def test_context_entries_and_edits() -> None:
    path = [
        _entry(1, message={"role": "system", "content": "S", "timestamp": 1}),
        _entry(2, message={"role": "user", "content": "u1", "timestamp": 1}),
        _entry(3, message={"role": "system", "content": "S2", "timestamp": 1}),
        _entry(4, message={"role": "assistant", "content": [{"type": "text", "text": "a1"}], "timestamp": 1}),
        _entry(5, kind="compaction", summary="old", firstKeptEntryId="x2", tokensBefore=1),
        _entry(6, kind="context_edit", targetId="x4", replacement={"content": "edited"}),
        _entry(7, kind="context_edit", targetId="x2", replacement={"content": "first"}),
        _entry(8, kind="context_edit", targetId="x2", replacement=None),
        _entry(9, kind="compaction", summary="new", firstKeptEntryId="x2", tokensBefore=2),
        _entry(10, message={"role": "user", "content": "after", "timestamp": 1}),
    ]
    ids = [e["id"] for e in build_context_entries(path)]
    # Latest compaction first; kept range from x2 without system messages; then what follows.
    assert ids == ["x9", "x2", "x4", "x5", "x6", "x7", "x8", "x10"]
    projection = build_session_projection(path)
    by_source = {item.source_entry["id"]: item.messages for item in projection.entries}
    assert by_source["x2"] == []  # the latest edit (null) removes it
    assert by_source["x4"][0]["content"] == [{"type": "text", "text": "edited"}]  # string -> text block
    assert by_source["x5"] == []  # an older compaction in the kept range contributes nothing
    assert [m["role"] for m in by_source["x9"]] == ["compactionSummary"]
    # firstKeptEntryId not on the path: nothing before the compaction is kept.
    dangling = [*path[:8], {**path[8], "firstKeptEntryId": "nowhere"}, path[9]]
    assert [e["id"] for e in build_context_entries(dangling)] == ["x9", "x10"]


def test_estimates_count_utf16_and_js_json() -> None:
    assert estimate_tokens({"role": "user", "content": "😀😀"}) == 1  # 4 code units
    assert estimate_tokens({"role": "user", "content": "😀😀a"}) == 2
    assert estimate_tokens({"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "abcd"}]}) == 1201
    call = {"type": "toolCall", "name": "ab", "arguments": {"b": 1e21, "10": -0.0, "a": "\u0000"}}
    # JSON.stringify: {"10":0,"b":1e+21,"a":"\u0000"} is 31 chars; + 2 for the name = 33 -> 9 tokens
    assert estimate_tokens({"role": "assistant", "content": [call]}) == 9
    assert estimate_tokens({"role": "system", "content": "abcd", "sections": {"a": "1234", "b": None},
                            "toolsAdded": [{"name": "x"}]}) == math.ceil((4 + 4 + 14) / 4)
    assert estimate_tokens({"role": "unknown"}) == 0
    assert math.isnan(estimate_tokens({"role": "assistant", "content": [{"type": "text", "text": 5}]}))
    with pytest.raises(TypeError):
        estimate_tokens({"role": "bashExecution", "command": "ls"})


def test_context_estimate_uses_last_valid_usage() -> None:
    usage = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0}
    messages = [
        {"role": "assistant", "content": [], "usage": {**usage, "totalTokens": 100}, "stopReason": "stop"},
        {"role": "user", "content": "abcdefgh"},
        {"role": "assistant", "content": [], "usage": usage, "stopReason": "stop"},  # total 0 -> 15
        {"role": "assistant", "content": [], "usage": {**usage, "totalTokens": 999}, "stopReason": "error"},
        {"role": "user", "content": "abcd"},
    ]
    estimate = estimate_context_tokens(messages)
    assert (estimate.tokens, estimate.usage_tokens, estimate.trailing_tokens, estimate.last_usage_index) == (
        16, 15, 1, 2)


def test_should_compact_is_strict() -> None:
    settings = CompactionSettings()
    assert not should_compact(128000 - 16384, 128000, settings)
    assert should_compact(128000 - 16384 + 1, 128000, settings)
    assert not should_compact(10**9, 1, CompactionSettings(enabled=False))
    assert settings.to_json() == {"enabled": True, "reserveTokens": 16384, "keepRecentTokens": 20000}
