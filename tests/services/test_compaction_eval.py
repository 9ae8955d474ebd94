"""The seed's evaluation (7.7.6) as a pure test: a real compaction, then the new projection.

After ``prepare_compaction`` + ``compact`` and a compaction entry built as Pi's
``appendCompaction`` builds it: the old text is replaced by the summary, recent messages are
kept verbatim, the latest system sections and tool declarations are rebuilt from the
checkpoint, and every projected message still maps to the entry it came from (the provenance of
kept messages is identical before and after). A split-turn compaction keeps the turn's original
user request in the turn-prefix summary input.
"""

from __future__ import annotations

from typing import Any

import pytest

from store.format.jsdate import parse_js_date
from store.services import (
    CompactionSettings,
    DeterministicSummarizer,
    SummaryFailed,
    SummaryResponse,
    build_compaction_entry,
    build_session_projection,
    compact,
    compute_file_lists,
    estimate_projected_context_tokens,
    get_current_system_message,
    output_caps,
    prepare_compaction,
    summarize_branch,
)
from store.services.compaction import FileOps
from tests.services.builders import PathBuilder, tool
from tests.services.test_branch_summary import _tree

LONG = "lorem ipsum dolor sit amet " * 40  # ~1080 chars, ~270 tokens


def _session() -> PathBuilder:
    b = PathBuilder()
    b.system("You are a careful coding agent.",
             sections={"policy": "Never push to main.", "10": "section ten", "2": "section two"},
             toolsAdded=[tool("read", "read a file"), tool("write", "write a file"), tool("bash", "run")])
    b.model_change("local", "test-model")
    b.user("OLD-REQUEST: refactor the parser. I decided: keep the public API, use approach B.")
    b.assistant("Reading the parser first. " + LONG, tool_calls=[("c1", "read", {"path": "src/parser.py"})],
                usage_total=900)
    b.tool_result("c1", "read", "def parse(): ...\n" + LONG)
    b.assistant("OLD-ANSWER: rewriting it. " + LONG, tool_calls=[("c2", "edit", {"path": "src/parser.py"})],
                usage_total=1500)
    b.tool_result("c2", "edit", "ok")
    old_edit_target = b.assistant("OLD-NOTE that will be edited. " + LONG, usage_total=1800)
    b.context_edit(old_edit_target["id"], {"content": "OLD-NOTE (edited)"})
    b.system("", sections={"policy": "Never push to main; open a pull request.", "2": None},
             toolsRemoved=[{"name": "bash"}], toolsAdded=[tool("deploy", "deploy the service")])
    b.user("RECENT-REQUEST: now add tests for parse().")
    b.assistant("RECENT-ANSWER: writing tests. " + LONG,
                tool_calls=[("c3", "write", {"path": "tests/test_p.py"})], usage_total=2600)
    b.tool_result("c3", "write", "written")
    b.label("e0011", "checkpoint")
    b.assistant("RECENT-DONE: tests pass. " + LONG, usage_total=3000)
    return b


def _texts(messages: list[Any]) -> str:
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [block.get("text", "") for block in content if isinstance(block, dict)]
        if isinstance(message.get("summary"), str):
            out.append(message["summary"])
    return "\n".join(out)


def _provenance(projection) -> dict[str, list[Any]]:
    return {item.source_entry["id"]: item.messages for item in projection.entries}


def _compact_path(b: PathBuilder, settings: CompactionSettings,
                  summarizer: DeterministicSummarizer) -> tuple[Any, Any, dict[str, Any]]:
    path = list(b.entries)
    before = build_session_projection(path)
    prep = prepare_compaction(path, settings)
    assert prep is not None
    result = compact(prep, summarizer, model_max_tokens=4096)
    entry_id = b.next_id()
    timestamp = b.tick()
    entry = build_compaction_entry(result.summary, result.first_kept_entry_id, result.tokens_before,
                                   entry_id=entry_id, parent_id=path[-1]["id"], timestamp=timestamp,
                                   projection_messages=before.messages, details=result.details,
                                   usage=result.usage)
    b.append(entry)
    return prep, result, entry


def test_compaction_replaces_old_text_keeps_recent_and_rebuilds_system() -> None:
    b = _session()
    path_before = list(b.entries)
    before = build_session_projection(path_before)
    settings = CompactionSettings(keep_recent_tokens=600)
    summarizer = DeterministicSummarizer()
    prep, result, entry = _compact_path(b, settings, summarizer)

    # The cut: the recent turn is kept, the old one summarised (nothing split here).
    assert prep.first_kept_entry_id == "e0011"
    assert not prep.is_split_turn
    assert [m["role"] for m in prep.messages_to_summarize] == [
        "user", "assistant", "toolResult", "assistant", "toolResult", "assistant"]
    assert prep.tokens_before == estimate_projected_context_tokens(before, path_before).tokens

    # The summary request: our prompt, the transcript, caps; the stored entry as appendCompaction.
    [request] = summarizer.requests
    assert request.max_tokens == min(int(0.8 * settings.reserve_tokens), 4096)
    assert "OLD-REQUEST" in request.prompt and "RECENT-REQUEST" not in request.prompt
    assert "OLD-NOTE (edited)" in request.prompt and "OLD-NOTE that will" not in request.prompt
    topics = ("Goal", "decisions", "Progress", "files and resources", "Unverified", "Failures", "Next steps")
    for topic in topics:
        assert topic in request.prompt
    assert result.details == {"readFiles": [], "modifiedFiles": ["src/parser.py"]}
    assert result.summary.endswith("\n\n<modified-files>\nsrc/parser.py\n</modified-files>")
    assert list(entry) == ["type", "id", "parentId", "timestamp", "summary", "firstKeptEntryId",
                           "tokensBefore", "details", "usage", "systemMessage"]
    assert entry["systemMessage"]["timestamp"] == parse_js_date(entry["timestamp"])

    after = build_session_projection(b.entries)
    # 1. Old text is replaced by the summary.
    assert after.entries[0].source_entry is entry
    system, summary = after.entries[0].messages
    assert summary == {"role": "compactionSummary", "summary": result.summary,
                       "tokensBefore": result.tokens_before, "timestamp": parse_js_date(entry["timestamp"])}
    visible = _texts([m for m in after.messages if m["role"] != "compactionSummary"])
    assert "OLD-REQUEST" not in visible and "OLD-ANSWER" not in visible and "OLD-NOTE" not in visible
    # 2. Recent messages verbatim, with identical provenance.
    kept_before = {k: v for k, v in _provenance(before).items() if k >= "e0011"}
    kept_after = {k: v for k, v in _provenance(after).items() if k != entry["id"]}
    assert kept_after == kept_before
    assert "RECENT-REQUEST" in visible and "RECENT-DONE" in visible
    # Every projected message maps to the entry it came from.
    for item in after.entries:
        for message in item.messages:
            if item.source_entry is not entry:
                assert message is item.source_entry["message"]
    # 3. The latest system sections and tool declarations are rebuilt from the checkpoint.
    assert system is entry["systemMessage"]
    assert [m["role"] for m in after.messages].count("system") == 1
    replayed_before = get_current_system_message(before.messages)
    replayed_after = get_current_system_message(after.messages)
    assert replayed_after == {**replayed_before, "timestamp": parse_js_date(entry["timestamp"])}
    assert list(replayed_after["sections"]) == ["10", "policy"]  # integer-like first; "2" deleted
    assert replayed_after["sections"]["policy"] == "Never push to main; open a pull request."
    assert [t["name"] for t in replayed_after["toolsAdded"]] == ["read", "write", "deploy"]
    # 4. Usage from before the compaction is no longer trusted for the projected size.
    estimate = estimate_projected_context_tokens(after, b.entries)
    assert estimate.last_usage_index is None and estimate.usage_tokens == 0
    # Thinking level and model are restored over the full path.
    assert after.model == {"provider": "local", "modelId": "test-model"}


def test_second_compaction_updates_previous_summary_and_keeps_checkpoint() -> None:
    b = _session()
    settings = CompactionSettings(keep_recent_tokens=600)
    _, first, _ = _compact_path(b, settings, DeterministicSummarizer())
    b.user("NEWER-REQUEST: document the parser. " + LONG)
    b.assistant("NEWER-ANSWER. " + LONG, tool_calls=[("c4", "read", {"path": "docs/parser.md"})],
                usage_total=4000)
    b.tool_result("c4", "read", LONG)
    b.user("LATEST: thanks")
    b.assistant("LATEST-ANSWER " + LONG, usage_total=4500)
    summarizer = DeterministicSummarizer()
    prep, second, entry = _compact_path(b, CompactionSettings(keep_recent_tokens=300), summarizer)
    assert prep.previous_summary == first.summary
    assert not prep.is_split_turn
    [request] = summarizer.requests
    assert f"<previous-summary>\n{first.summary}\n</previous-summary>" in request.prompt
    # File lists accumulate through the previous compaction's details.
    assert second.details["modifiedFiles"] == ["src/parser.py", "tests/test_p.py"]
    assert second.details["readFiles"] == ["docs/parser.md"]
    after = build_session_projection(b.entries)
    assert after.entries[0].source_entry is entry
    # Only the newest compaction contributes: the older one's summary is gone from the context.
    assert sum(1 for m in after.messages if m["role"] == "compactionSummary") == 1
    system = get_current_system_message(after.messages)
    assert list(system["sections"]) == ["10", "policy"]
    assert [t["name"] for t in system["toolsAdded"]] == ["read", "write", "deploy"]


def _long_turn() -> PathBuilder:
    b = PathBuilder()
    b.system("Agent.", toolsAdded=[tool("read", "read")])
    b.user("EARLY question. " + LONG)
    b.assistant("EARLY answer. " + LONG, usage_total=700)
    b.user("ORIGINAL-REQUEST: port the build to meson, keep the old Makefile working.")
    for i in range(6):
        b.assistant(f"step {i}", tool_calls=[(f"t{i}", "read", {"path": f"build/file{i}.txt"})])
        b.tool_result(f"t{i}", "read", LONG)
    b.assistant("STEP-FINAL: done. " + LONG, usage_total=5000)
    return b


def test_split_turn_keeps_original_request_in_turn_prefix_summary() -> None:
    b = _long_turn()
    settings = CompactionSettings(keep_recent_tokens=800, reserve_tokens=10000)
    prep = prepare_compaction(b.entries, settings)
    assert prep is not None and prep.is_split_turn
    assert prep.turn_prefix_messages[0]["role"] == "user"
    assert prep.turn_prefix_messages[0]["content"].startswith("ORIGINAL-REQUEST")
    assert [m["role"] for m in prep.messages_to_summarize] == ["user", "assistant"]
    kept = next(e for e in b.entries if e["id"] == prep.first_kept_entry_id)
    assert kept["message"]["role"] == "assistant"

    summarizer = DeterministicSummarizer()
    result = compact(prep, summarizer, model_max_tokens=6000)
    history, prefix = summarizer.requests
    assert (history.max_tokens, prefix.max_tokens) == (6000, 5000) == output_caps(10000, 6000)
    assert "ORIGINAL-REQUEST" in prefix.prompt and "EARLY question" not in prefix.prompt
    assert "EARLY question" in history.prompt and "ORIGINAL-REQUEST" not in history.prompt
    assert "Original request" in prefix.prompt
    history_summary, _, prefix_summary = result.summary.partition("\n\n---\n\n")
    assert history_summary.startswith("Summary #1") and "Summary #2" in prefix_summary
    assert result.usage["output"] == 14 and result.usage["totalTokens"] == (
        summarizer_usage_total(history) + summarizer_usage_total(prefix))
    prefix_reads = sorted(block["arguments"]["path"]
                          for m in prep.turn_prefix_messages if m["role"] == "assistant"
                          for block in m["content"] if block["type"] == "toolCall")
    assert prefix_reads and result.details == {"readFiles": prefix_reads, "modifiedFiles": []}
    assert result.summary.endswith("<read-files>\n" + "\n".join(prefix_reads) + "\n</read-files>")


def summarizer_usage_total(request) -> int:
    return (len(request.prompt) + 3) // 4 + 7


def test_split_turn_without_earlier_history_uses_placeholder() -> None:
    b = PathBuilder()
    b.user("ORIGINAL-REQUEST: one huge turn.")
    for i in range(5):
        b.assistant(f"step {i}", tool_calls=[(f"t{i}", "read", {"path": f"f{i}"})])
        b.tool_result(f"t{i}", "read", LONG)
    prep = prepare_compaction(b.entries, CompactionSettings(keep_recent_tokens=400))
    assert prep is not None and prep.is_split_turn and prep.messages_to_summarize == []
    summarizer = DeterministicSummarizer()
    result = compact(prep, summarizer)
    assert len(summarizer.requests) == 1
    assert "ORIGINAL-REQUEST" in summarizer.requests[0].prompt
    assert result.summary.startswith("No earlier history.\n\n---\n\n")


@pytest.mark.parametrize("fail", ["error", "length", "tool_call"])
@pytest.mark.parametrize("fail_on_call", [None, 1, 2])
def test_failed_summary_is_never_returned(fail: str, fail_on_call: int | None) -> None:
    prep = prepare_compaction(_long_turn().entries, CompactionSettings(keep_recent_tokens=800))
    assert prep is not None and prep.is_split_turn
    summarizer = DeterministicSummarizer(fail=fail, fail_on_call=fail_on_call)
    with pytest.raises(SummaryFailed) as info:
        compact(prep, summarizer)
    assert info.value.response is not None
    assert len(summarizer.requests) == (fail_on_call or 1)


class _Answering:
    """A summarizer (someone else's) that answers every request with ``answer``."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def summarize(self, system_prompt: str, prompt: str, max_tokens: int | None) -> Any:
        return self.answer


@pytest.mark.parametrize(("answer", "says"), [
    (SummaryResponse(b"bytes"), "the summarizer's text is bytes, not str"),
    (SummaryResponse(None), "the summarizer's text is NoneType, not str"),  # type: ignore[arg-type]
    (SummaryResponse(7), "the summarizer's text is int, not str"),  # type: ignore[arg-type]
    (SummaryResponse(["a summary"]), "the summarizer's text is list, not str"),  # type: ignore[arg-type]
    (SummaryResponse({"text": "a summary"}), "the summarizer's text is dict, not str"),  # type: ignore[arg-type]
    ("a summary", "the summarizer returned str, not a SummaryResponse"),
    (None, "the summarizer returned NoneType, not a SummaryResponse"),
    (SummaryResponse("a summary", "aborted"), "the request was aborted"),  # Pi never stores an aborted summary
    (SummaryResponse("a summary", usage=None), "the summarizer's usage is NoneType, not a dict"),  # type: ignore[arg-type]
    (SummaryResponse("a summary", usage=[1]), "the summarizer's usage is list, not a dict"),  # type: ignore[arg-type]
])
def test_an_answer_that_is_no_usable_summary_fails(answer: Any, says: str) -> None:
    """bytes became the summary "b'bytes'…" and an aborted answer was stored; the other
    answers raised a bare AttributeError."""
    prep = prepare_compaction(_long_turn().entries, CompactionSettings(keep_recent_tokens=800))
    assert prep is not None
    with pytest.raises(SummaryFailed, match=f"^Summary failed: {says}$"):
        compact(prep, _Answering(answer))
    with pytest.raises(SummaryFailed, match=f"^Branch summary failed: {says}$"):
        summarize_branch(*_tree(), _Answering(answer))


def test_nothing_to_compact() -> None:
    b = _session()
    _compact_path(b, CompactionSettings(keep_recent_tokens=600), DeterministicSummarizer())
    assert prepare_compaction(b.entries, CompactionSettings()) is None  # path ends in a compaction
    assert prepare_compaction([], CompactionSettings()) is None
    short = PathBuilder()
    short.user("hi")
    assert prepare_compaction(short.entries, CompactionSettings()) is None


def test_retain_none_compaction_keeps_nothing_before_it() -> None:
    b = _session()
    before = build_session_projection(b.entries)
    entry = build_compaction_entry("S", None, 10, entry_id="c0", parent_id=b.entries[-1]["id"],
                                   timestamp=b.tick(), projection_messages=before.messages)
    assert entry["firstKeptEntryId"] == "c0"
    b.append(entry)
    after = build_session_projection(b.entries)
    assert [item.source_entry["id"] for item in after.entries] == ["c0"]
    assert [m["role"] for m in after.messages] == ["system", "compactionSummary"]


def test_file_lists_sort_by_utf16_code_units() -> None:
    ops = FileOps()
    for path in ("b", "\uff5e", "😀", "a", "B"):
        ops.read.add(path)
    ops.written.add("a")
    ops.edited.add("z")
    read_files, modified = compute_file_lists(ops)
    # U+1F600 is the surrogate pair D83D DE00, which sorts before U+FF5E in UTF-16 order.
    assert read_files == ["B", "b", "😀", "\uff5e"]
    assert modified == ["a", "z"]
