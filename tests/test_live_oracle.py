"""Against the live Pi (skipped, with the reason, when ../shared/oracle is not installed):
fresh generator seeds that no committed fixture covers, and sessions written through our API,
which Pi must open exactly as we describe them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from store.describe import describe_session
from store.session_store import SessionStore
from tests.oracle_support import ORACLE_SKIP_REASON, js_diff, oracle_available, run_describe, run_gen
from tests.test_differential_store import check_case

pytestmark = [pytest.mark.oracle, pytest.mark.skipif(not oracle_available(), reason=ORACLE_SKIP_REASON)]

FRESH = [("small", seed) for seed in (101, 102, 103, 104, 105, 106)] + [("medium", 11)]


@dataclass
class LiveCase:
    """The subset of ``FixtureCase`` that ``check_case`` reads, made from a live oracle run."""

    name: str
    source_path: Path
    describe: dict
    kind: str = "live"
    all_leaves: bool = True
    reduced: bool = False
    skip_reason: str | None = None


@pytest.mark.parametrize(("size", "seed"), FRESH, ids=lambda v: str(v))
def test_fresh_seeds_match_pi(tmp_path: Path, size: str, seed: int) -> None:
    path = run_gen(seed, size, tmp_path / "gen")
    case = LiveCase(f"{size}-seed{seed}", path, run_describe(path, all_leaves=True))
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        check_case(store, case)


def test_pi_opens_api_written_sessions_as_we_describe_them(tmp_path: Path) -> None:
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        sm = store.create("/work/api")
        sm.append_thinking_level_change("high")
        sm.append_model_change("anthropic", "claude-x")
        q = sm.append_message({"role": "user", "content": [{"type": "text", "text": "plan ✓ \u2028"}], "timestamp": 1})
        a = sm.append_message({"role": "assistant", "content": [
            {"type": "text", "text": "A"}, {"type": "toolCall", "id": "t1", "name": "read",
                                           "arguments": {"path": "/x", "n": 1e21, "f": 0.1 + 0.2}}],
            "provider": "anthropic", "model": "claude-x", "api": "messages", "stopReason": "toolUse",
            "usage": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 3}, "timestamp": 2})
        sm.append_label_change(q, "start")
        sm.append_context_edit(a, {"content": "short"})
        sm.append_custom_entry("ext.state", {"2": "b", "10": "a", "z": None})
        sm.append_custom_message_entry("ext.note", "shown", True, {"k": [1, 2]})
        sm.append_usage("summary", "anthropic", "claude-x", {"input": 5, "output": 1}, note="")
        sm.append_session_info("Line one\nline two")
        sm.branch(q)
        sm.append_message({"role": "assistant", "content": [{"type": "text", "text": "B"}], "timestamp": 3})
        sm.branch_with_summary(q, "left branch B")
        sm.append_compaction("summary so far", q, 1234, {"readFiles": ["/x"], "modifiedFiles": []}, False)
        out = tmp_path / "api.jsonl"
        store.export_jsonl(sm.get_session_id(), out)
        ours = describe_session(store, sm.get_session_id(), all_leaves=True)
    theirs = run_describe(out, all_leaves=True)
    assert theirs["openError"] is None
    assert theirs["fileAfterOpen"] == {"changed": False, "content": None}  # nothing for Pi to repair
    for field in ("header", "entries", "leafId", "branchIds", "tree", "sessionName", "listInfo"):
        assert js_diff(theirs[field], ours[field], field) is None, js_diff(theirs[field], ours[field], field)


def test_pi_opens_a_compacted_v1_session_as_we_describe_it(tmp_path: Path) -> None:
    """Written to, a migrated (v1) session exports in its v3 form: Pi then finds the entries the
    compaction keeps (from the v1 bytes, it migrated them again with new ids and kept none)."""
    from store import services
    from tests.oracle_support import FIXTURES

    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        session_id = store.import_jsonl(FIXTURES / "sessions" / "legacy-v1.jsonl")
        sm = store.open(session_id)
        assert sm.compact(services.DeterministicSummarizer(), services.CompactionSettings(keep_recent_tokens=5))
        sm.append_message({"role": "user", "content": "after the compaction", "timestamp": 9})
        out = tmp_path / "v1.jsonl"
        store.export_jsonl(session_id, out)
        ours = describe_session(store, session_id, all_leaves=True)
    theirs = run_describe(out, all_leaves=True)
    assert theirs["openError"] is None and theirs["fileAfterOpen"]["changed"] is False
    kept = [m["role"] for m in theirs["sessionContext"]["messages"]]
    assert kept[0] == "compactionSummary" and len(kept) > 2
    for field in ("entries", "leafId", "sessionContext"):
        assert js_diff(theirs[field], ours[field], field) is None, js_diff(theirs[field], ours[field], field)


@pytest.mark.parametrize("last", ["complete", "cut"])
def test_an_append_after_a_file_without_final_newline_matches_pi(tmp_path: Path, last: str) -> None:
    """What the store does to an imported file whose last line has no newline (it ends that line
    before its first write) checked against Pi itself: Pi opens the file, appends a message, and
    the bytes up to the new line, and the new entry's parent, must be the store's export's."""
    import json
    import subprocess

    from tests.oracle_support import FIXTURES, RUN_SH

    lines = (FIXTURES / "sessions" / "small-seed1-0.jsonl").read_bytes().splitlines(keepends=True)
    body = b"".join(lines[:6]).rstrip(b"\n") if last == "complete" else b"".join(lines[:5]) + lines[5][:40]
    for name in ("pi.jsonl", "store.jsonl"):
        (tmp_path / name).write_bytes(body)
    done = subprocess.run([str(RUN_SH), str(Path(__file__).with_name("pi_open_append.mjs")),
                           str(tmp_path / "pi.jsonl"), str(tmp_path)], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        session_id = store.import_jsonl(tmp_path / "store.jsonl")
        store.open(session_id).append_message({"role": "user", "content": "appended", "timestamp": 1})
        ours = b"".join(store.iter_export(session_id))
    pi_head, pi_new = done.stdout.rstrip(b"\n").rsplit(b"\n", 1)
    our_head, our_new = ours.rstrip(b"\n").rsplit(b"\n", 1)
    assert our_head == pi_head and pi_head.startswith(body)
    assert json.loads(our_new)["parentId"] == json.loads(pi_new)["parentId"]
    assert json.loads(our_new)["message"] == json.loads(pi_new)["message"]


@pytest.mark.parametrize("leaf", ['""', "0", "5", "true", "null", None], ids=["empty", "zero", "number", "true",
                                                                          "null", "missing"])
def test_an_append_under_a_leaf_whose_id_is_not_a_string_matches_pi(tmp_path: Path, leaf: str | None) -> None:
    """Pi opens a file whose last entry's id is not a non-empty string and appends: its new line's
    ``parentId`` (or its absence) must be the store's, and Pi must read the store's export as the
    store does (tests/test_non_string_ids.py has the same cases without Node)."""
    import json
    import subprocess

    from tests.oracle_support import RUN_SH
    from tests.test_non_string_ids import leaf_file

    (tmp_path / "pi").mkdir()
    pi_file = leaf_file(tmp_path / "pi", leaf)
    done = subprocess.run([str(RUN_SH), str(Path(__file__).with_name("pi_open_append.mjs")), str(pi_file),
                           str(tmp_path / "pi")], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    theirs = json.loads(done.stdout.splitlines()[-1])
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.import_file(leaf_file(tmp_path, leaf))
        store.open("leafy").append_message({"role": "user", "content": "appended", "timestamp": 1})
        ours = json.loads(b"".join(store.iter_export("leafy")).splitlines()[-1])
        assert ("parentId" in ours) == ("parentId" in theirs)
        assert js_diff(theirs.get("parentId"), ours.get("parentId"), "parentId") is None
        (tmp_path / "export.jsonl").write_bytes(b"".join(store.iter_export("leafy")))
    doc = run_describe(tmp_path / "export.jsonl", all_leaves=True)
    with SessionStore.connect(f"sqlite:///{tmp_path / 'reread.db'}") as reread:
        check_case(reread, LiveCase(f"leaf-{leaf}", tmp_path / "export.jsonl", doc))
