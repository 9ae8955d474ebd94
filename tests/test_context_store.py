"""Context services through the store, on both engines: the context read from the window of
the path equals the context of the whole path; a real compaction replaces old text with the
summary, keeps recent messages and their provenance, and rebuilds the system checkpoint; a
failed summary stores nothing; ``pi-store compact`` plans and runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from store import services
from store.session_store import SessionStore

pytestmark = pytest.mark.both_apis  # every test on the `store` fixture: on the sync API, then the async one


def system(content: str, sections: dict | None = None, tools: list | None = None) -> dict:
    message = {"role": "system", "content": content, "timestamp": 1}
    if sections is not None:
        message["sections"] = sections
    if tools is not None:
        message["toolsAdded"] = tools
    return message


def user(text: str) -> dict:
    return {"role": "user", "content": text, "timestamp": 2}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": text}], "provider": "p", "model": "m",
            "api": "a", "stopReason": "stop", "timestamp": 3,
            "usage": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15}}


def build_long_session(store: SessionStore, turns: int = 12):
    sm = store.create("/w")
    sm.append_thinking_level_change("high")
    sm.append_message(system("You are helpful.", {"policy": "v1", "10": "ten", "2": "two"},
                             [{"name": "read", "parameters": {"type": "object"}}]))
    ids = []
    for turn in range(turns):
        ids.append(sm.append_message(user(f"question {turn} " + "lorem ipsum " * 40)))
        ids.append(sm.append_message(assistant(f"answer {turn} " + "dolor sit " * 40)))
        if turn == 5:
            sm.append_message(system("", {"policy": "v2", "2": None}, None))
    return sm, ids


def test_window_context_equals_full_path_context(store: SessionStore) -> None:
    sm, _ = build_long_session(store)
    sm.compact(services.DeterministicSummarizer(), services.CompactionSettings(keep_recent_tokens=400))
    sm.append_message(user("after the compaction"))
    full = services.build_session_projection(sm.get_branch())
    window = sm.build_session_projection()
    assert window.describe_json() == full.describe_json()
    assert len(sm.context_path()) < len(sm.get_branch())  # the window really is smaller


def test_compaction_through_the_store(store: SessionStore) -> None:
    sm, ids = build_long_session(store)
    before = sm.build_session_projection()
    kept_sources = {id(item.source_entry) for item in before.entries}
    assert kept_sources
    summarizer = services.DeterministicSummarizer()
    compaction_id = sm.compact(summarizer, services.CompactionSettings(keep_recent_tokens=400))
    assert compaction_id is not None
    entry = sm.get_entry(compaction_id)
    assert list(entry)[-4:] == ["details", "usage", "fromHook", "systemMessage"]  # Pi's order: fromHook before
    assert entry["fromHook"] is False  # Pi's own compaction (not an extension's) writes false
    after = store.open(sm.get_session_id()).build_session_projection()
    roles = [m["role"] for m in after.messages]
    assert roles[:2] == ["system", "compactionSummary"]  # checkpoint, then the summary
    assert after.messages[1]["summary"] == entry["summary"]
    assert entry["systemMessage"]["sections"] == {"policy": "v2", "10": "ten"}  # latest sections replayed
    assert entry["systemMessage"]["toolsAdded"] == [{"name": "read", "parameters": {"type": "object"}}]
    verbatim = json.dumps([m for m in after.messages if m["role"] in ("user", "assistant")])
    assert "question 0 " not in verbatim  # the old turns survive only inside the summary
    first_kept = entry["firstKeptEntryId"]
    kept_ids = ids[ids.index(first_kept):]
    after_ids = [item.source_entry["id"] for item in after.entries if item.source_entry["type"] == "message"]
    assert after_ids == [i for i in kept_ids]  # recent messages verbatim, each mapped to its own entry
    before_by_id = {item.source_entry["id"]: item.messages for item in before.entries}
    for item in after.entries:
        if item.source_entry["id"] in kept_ids:
            assert item.messages == before_by_id[item.source_entry["id"]]


def test_failed_summary_stores_nothing(store: SessionStore) -> None:
    sm, _ = build_long_session(store)
    leaf = sm.get_leaf_id()
    with pytest.raises(services.SummaryFailed):
        sm.compact(services.DeterministicSummarizer(fail="length"), services.CompactionSettings(keep_recent_tokens=400))
    assert sm.get_leaf_id() == leaf
    assert all(e["type"] != "compaction" for e in store.open(sm.get_session_id()).get_entries())


class _Aborted:
    """A summarizer whose request was aborted (Pi's stop reason "aborted": the text is partial)."""

    def summarize(self, system_prompt: str, prompt: str, max_tokens: int | None) -> services.SummaryResponse:
        return services.SummaryResponse("a partial summ", "aborted")


def test_an_aborted_summary_stores_nothing(store: SessionStore) -> None:
    """It was stored as the compaction's (or the branch summary's) summary; Pi never stores it."""
    sm, ids = build_long_session(store)
    leaf, entries = sm.get_leaf_id(), len(sm.get_entries())
    with pytest.raises(services.SummaryFailed, match=r"^Summary failed: the request was aborted$"):
        sm.compact(_Aborted(), services.CompactionSettings(keep_recent_tokens=400))
    with pytest.raises(services.SummaryFailed, match=r"^Branch summary failed: the request was aborted$"):
        sm.branch_with_generated_summary(ids[1], _Aborted())
    assert sm.get_leaf_id() == leaf and len(store.open(sm.get_session_id()).get_entries()) == entries


def test_branch_with_generated_summary(store: SessionStore) -> None:
    sm, ids = build_long_session(store, turns=3)
    old_leaf = sm.get_leaf_id()
    summary_id = sm.branch_with_generated_summary(ids[1], services.DeterministicSummarizer())
    entry = sm.get_entry(summary_id)
    assert list(entry)[-3:] == ["details", "usage", "fromHook"] and entry["fromHook"] is False  # as Pi's navigateTree
    assert entry["fromId"] == old_leaf and entry["parentId"] == ids[1] and entry["summary"]
    assert sm.build_session_projection().messages[-1]["role"] == "branchSummary"


def test_a_branch_summary_of_nothing_left_behind_moves_the_leaf_and_writes_nothing(store: SessionStore) -> None:
    """Moving to the leaf itself or further along its path leaves no entry behind: Pi moves
    without a summary; a "Nothing to summarize." summary was written into the model's context."""
    sm, ids = build_long_session(store, turns=3)
    entries = len(sm.get_entries())
    assert sm.branch_with_generated_summary(sm.get_leaf_id(), services.DeterministicSummarizer()) is None
    sm.branch(ids[1])
    assert sm.branch_with_generated_summary(ids[2], services.DeterministicSummarizer()) is None
    assert sm.get_leaf_id() == ids[2] and len(store.open(sm.get_session_id()).get_entries()) == entries
    assert all(m["role"] != "branchSummary" for m in sm.build_session_projection().messages)


def test_cli_compact_plans_and_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with SessionStore.connect(url) as store:
        sm, _ = build_long_session(store)
        session_id = sm.get_session_id()
    cli = [sys.executable, "-m", "store.cli", "--db", url, "compact", session_id, "--keep-recent", "400", "--json"]
    plan = subprocess.run([*cli, "--dry-run"], capture_output=True, text=True, timeout=120)
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    assert planned["plan"]["messagesToSummarize"]["count"] > 0 and planned["keptEntryIds"]
    missing = subprocess.run([*cli, "--summarizer", "openai"], capture_output=True, text=True, timeout=120,
                             env={"PATH": "/usr/bin:/bin"})
    assert missing.returncode == 1 and "PI_STORE_SUMMARY_BASE_URL" in missing.stderr
    done = subprocess.run([*cli, "--summarizer", "deterministic"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["firstKeptEntryId"] == planned["plan"]["firstKeptEntryId"]
    again = subprocess.run([*cli, "--summarizer", "deterministic"], capture_output=True, text=True, timeout=120)
    assert json.loads(again.stdout)["compacted"] is False  # the path now ends in a compaction
