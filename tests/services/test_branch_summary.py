"""Branch summaries: collecting the abandoned branch, the newest-first budget, file operations."""

from __future__ import annotations

from typing import Any

import pytest

from store.services import (
    DeterministicSummarizer,
    SummaryFailed,
    collect_entries_for_branch_summary,
    generate_branch_summary,
    prepare_branch_entries,
    summarize_branch,
)
from store.services.estimates import estimate_tokens
from tests.services.builders import PathBuilder, tool

LONG = "lorem ipsum dolor sit amet " * 40


def _tree() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(old path, target path) sharing a common prefix ending at e0003."""
    b = PathBuilder()
    b.system("Agent.", toolsAdded=[tool("read", "read")])
    b.user("COMMON question")
    b.assistant("COMMON answer")
    common = list(b.entries)
    b.user("OLD-BRANCH: try approach A. " + LONG)
    b.assistant("trying A", tool_calls=[("c1", "read", {"path": "src/a.py"}),
                                        ("c2", "edit", {"path": "src/b.py"})])
    b.tool_result("c1", "read", LONG)
    b.tool_result("c2", "edit", "ok")
    b.append({"type": "branch_summary", "id": b.next_id(), "parentId": b.entries[-1]["id"],
              "timestamp": b.tick(), "fromId": "zzz", "summary": "EARLIER-SUMMARY " + LONG,
              "details": {"readFiles": ["docs/old.md"], "modifiedFiles": ["src/c.py"]}})
    b.append({"type": "branch_summary", "id": b.next_id(), "parentId": b.entries[-1]["id"],
              "timestamp": b.tick(), "fromId": "yyy", "summary": "HOOK-SUMMARY", "fromHook": True,
              "details": {"readFiles": ["hook/ignored.md"], "modifiedFiles": []}})
    hidden = b.assistant("HIDDEN attempt")
    b.context_edit(hidden["id"], None)
    replaced = b.assistant("REPLACED original")
    b.context_edit(replaced["id"], {"content": "REPLACED edited"})
    b.user("OLD-BRANCH last words")
    old_path = list(b.entries)
    target = PathBuilder()
    target.entries = [dict(e) for e in common]
    target.clock = b.clock
    target.user("TARGET branch")["id"] = "t0001"  # a sibling of e0004
    return old_path, target.entries


def test_collect_entries_from_old_leaf_to_common_ancestor() -> None:
    old_path, target_path = _tree()
    entries, common = collect_entries_for_branch_summary(old_path, target_path)
    assert common == "e0003"
    assert entries == old_path[3:]
    assert collect_entries_for_branch_summary([], target_path) == ([], None)
    # Moving to an ancestor on the same path: everything after it.
    entries, common = collect_entries_for_branch_summary(old_path, old_path[:2])
    assert common == "e0002" and entries == old_path[2:]


def test_prepare_branch_entries_rules() -> None:
    old_path, target_path = _tree()
    entries, _ = collect_entries_for_branch_summary(old_path, target_path)
    prepared = prepare_branch_entries(entries)
    roles = [m["role"] for m in prepared.messages]
    # Tool results are skipped; the hidden attempt is gone; summaries are included (hook or not).
    assert roles == ["user", "assistant", "branchSummary", "branchSummary", "assistant", "user"]
    texts = [m.get("summary") or m["content"] for m in prepared.messages]
    assert texts[4] == [{"type": "text", "text": "REPLACED edited"}]
    assert prepared.total_tokens == sum(estimate_tokens(m) for m in prepared.messages)
    # File operations: tool calls plus earlier non-hook summaries' details.
    assert list(prepared.file_ops.read) == ["docs/old.md", "src/a.py"]
    assert list(prepared.file_ops.edited) == ["src/c.py", "src/b.py"]


def test_prepare_branch_entries_budget_newest_first() -> None:
    old_path, target_path = _tree()
    entries, _ = collect_entries_for_branch_summary(old_path, target_path)
    # Newest first: user (6 tokens), assistant (4), hook summary (3), big summary (274), ...
    # A summary that does not fit is still taken while less than 90% of the budget is used.
    loose = prepare_branch_entries(entries, token_budget=20)
    assert [m["role"] for m in loose.messages] == ["branchSummary", "branchSummary", "assistant", "user"]
    assert loose.total_tokens == 287
    tight = prepare_branch_entries(entries, token_budget=12)  # 10 used < 10.8: the summary squeezes in
    assert [m["role"] for m in tight.messages] == ["branchSummary", "assistant", "user"]
    tighter = prepare_branch_entries(entries, token_budget=11)  # 10 used >= 9.9: it does not
    assert [m["role"] for m in tighter.messages] == ["assistant", "user"]
    # A regular message that does not fit ends the walk.
    assert prepare_branch_entries(entries, token_budget=5).messages == []


def test_generate_branch_summary() -> None:
    old_path, target_path = _tree()
    summarizer = DeterministicSummarizer()
    result = summarize_branch(old_path, target_path, summarizer, context_window=32768, model_max_tokens=2000)
    assert result.from_id == old_path[-1]["id"]
    [request] = summarizer.requests
    assert request.max_tokens == 2000
    assert "OLD-BRANCH: try approach A" in request.prompt and "TARGET" not in request.prompt
    assert "HIDDEN attempt" not in request.prompt and "REPLACED edited" in request.prompt
    assert result.summary.startswith("The user worked on another branch")
    assert result.details == {"readFiles": ["docs/old.md", "src/a.py"],
                              "modifiedFiles": ["src/b.py", "src/c.py"]}
    assert result.summary.endswith(
        "<read-files>\ndocs/old.md\nsrc/a.py\n</read-files>\n\n<modified-files>\nsrc/b.py\nsrc/c.py\n</modified-files>")
    assert result.usage["output"] == 7


def test_branch_summary_failures_and_empty_branch() -> None:
    old_path, target_path = _tree()
    entries, _ = collect_entries_for_branch_summary(old_path, target_path)
    for fail in ("error", "length", "tool_call"):
        with pytest.raises(SummaryFailed):
            generate_branch_summary(entries, DeterministicSummarizer(fail=fail))
    empty = generate_branch_summary([], DeterministicSummarizer())
    assert empty.usage is None and empty.details == {"readFiles": [], "modifiedFiles": []} and empty.summary
