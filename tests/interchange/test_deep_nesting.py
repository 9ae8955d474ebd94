"""A line nested deeper than 1,024 levels is JSON to Node: Pi keeps the entry, its path and its
context. The store reads it as Pi does (checked against the real Pi) and exports it unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.describe import describe_session
from store.format import js_parse, js_stringify
from store.session_store import SessionStore
from tests.oracle_support import ORACLE_SKIP_REASON, _oracle, oracle_available, run_describe_raw

pytestmark = [pytest.mark.oracle, pytest.mark.skipif(not oracle_available(), reason=ORACLE_SKIP_REASON)]

DEEP_ORACLE = Path(__file__).with_name("deep_oracle.mjs")


def deep_session(path: Path, depth: int) -> Path:
    """A session whose assistant tool call and custom entry nest ``depth`` levels, between two user turns."""
    def stamp(second: int) -> str:
        return f'"timestamp":"2025-01-01T00:00:0{second}.000Z"'

    arrays, objects = "[" * depth + '"\\ud800"' + "]" * depth, '{"k":' * depth + "1e21" + "}" * depth
    usage = ('"usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,"cost":{"input":0,'
             '"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}')
    lines = [
        f'{{"type":"session","version":3,"id":"deep-{depth}",{stamp(0)},"cwd":"/w"}}',
        f'{{"type":"message","id":"a1","parentId":null,{stamp(1)},"message":{{"role":"user","content":"hello",'
        '"timestamp":1}}',
        f'{{"type":"message","id":"a2","parentId":"a1",{stamp(2)},"message":{{"role":"assistant","content":'
        f'[{{"type":"toolCall","id":"t1","name":"bash","arguments":{{"x":{arrays}}}}}],"api":"x","provider":"p",'
        f'"model":"m",{usage},"stopReason":"toolUse","timestamp":2}}}}',
        f'{{"type":"custom","id":"a3","parentId":"a2",{stamp(3)},"customType":"x","data":{objects}}}',
        f'{{"type":"message","id":"a4","parentId":"a3",{stamp(4)},"message":{{"role":"user","content":"after",'
        '"timestamp":4}}',
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_1100_levels_are_read_as_pi_reads_them(store: SessionStore, tmp_path: Path) -> None:
    path = deep_session(tmp_path / "deep.jsonl", 1_100)
    report = store.import_file(path)
    assert (report.status, report.entries, report.warnings) == ("imported", 4, [])
    assert b"".join(store.iter_export(report.session_id)) == path.read_bytes()
    pi = js_parse(run_describe_raw(path, all_leaves=True).decode())  # too deep for the json module
    ours = describe_session(store, report.session_id, all_leaves=True)
    assert pi["branchIds"] == ["a1", "a2", "a3", "a4"]
    for field in ("leafId", "branchIds", "contextEntryIds", "entries", "sessionContext", "projection",
                  "messageTokenEstimates", "estimateContextTokens", "tree"):
        assert js_stringify(ours[field]) == js_stringify(pi[field]), field


def test_100000_levels_are_read_as_pi_reads_them(store: SessionStore, tmp_path: Path) -> None:
    path = deep_session(tmp_path / "deeper.jsonl", 100_000)
    report = store.import_file(path)
    assert (report.status, report.entries, report.warnings) == ("imported", 4, [])
    assert b"".join(store.iter_export(report.session_id)) == path.read_bytes()
    pi = js_parse(_oracle(str(DEEP_ORACLE), path).decode())
    assert pi["depths"][1:3] == [100_005, 100_001]  # Pi kept both deep entries
    manager = store.open(report.session_id)
    assert [e["id"] for e in manager.get_branch()] == pi["branchIds"]
    assert [m["role"] for m in manager.build_session_context().messages] == pi["contextRoles"]
    assert [hit.entry_id for hit in store.search("after")] == ["a4"]
