"""Compaction entries written by the real Pi's ``appendCompaction`` (in the committed gen.mjs
sessions) rebuilt byte for byte with ``build_compaction_entry``: the ``systemMessage`` checkpoint
is ``get_current_system_message`` of the projection at that moment (sections in JavaScript key
order, tools resolved, content joined), stamped with the compaction time."""

from __future__ import annotations

import pytest

from store.format.jsjson import js_stringify
from store.format.jsvalue import UNDEFINED
from store.services import build_compaction_entry, build_session_projection
from tests.oracle_support import FixtureCase, load_fixture_cases
from tests.services.oracle_compare import get_branch, index_by_id

CASES = load_fixture_cases(("gen-small", "gen-medium"))


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_compaction_entries_rebuild_byte_identical(case: FixtureCase) -> None:
    entries = case.describe["entries"]
    by_id = index_by_id(entries)
    compactions = [e for e in entries if isinstance(e, dict) and e.get("type") == "compaction"]
    for entry in compactions:
        # When Pi appended it, the leaf was its parent: the checkpoint replays that projection.
        projection = build_session_projection(get_branch(by_id, entry["parentId"]))
        ours = build_compaction_entry(
            entry["summary"], entry["firstKeptEntryId"], entry["tokensBefore"],
            entry_id=entry["id"], parent_id=entry["parentId"], timestamp=entry["timestamp"],
            projection_messages=projection.messages, details=entry.get("details", UNDEFINED),
            from_hook=entry.get("fromHook", UNDEFINED), usage=entry.get("usage", UNDEFINED))
        assert js_stringify(ours) == js_stringify(entry), entry["id"]


def test_the_fixtures_hold_system_checkpoints() -> None:
    with_system = sum(1 for case in CASES for e in case.describe["entries"]
                      if isinstance(e, dict) and e.get("type") == "compaction" and "systemMessage" in e)
    assert with_system >= 20
