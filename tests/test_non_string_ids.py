"""Entry ids that are not strings (numbers, ``true``, ...): no Pi writes them, but Pi reads such a
file with a ``Map`` keyed by the parsed values, so ``parentId: 1`` finds the entry with ``"id": 1``
(or ``1.0``) and never the one with ``"id": "1"``. The store derives its tree the same way on
import, on appends of a grown file and after prune, and its API appends under such a leaf as Pi
does (the fixture's expectations: tests/fixtures/oracle/crafted/non-string-ids.jsonl and its
golden describe; tests/test_live_oracle.py checks the appends against the live Pi)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from store.interchange.verifying import verify_session
from store.retention import RetentionPolicy, parse_duration
from store.session_store import SessionStore
from tests.oracle_support import FIXTURES, js_diff, read_gz_json

pytestmark = pytest.mark.both_apis

CRAFTED = FIXTURES / "crafted" / "non-string-ids.jsonl"
SESSION_ID = "c0ffee00-0000-4000-8000-000000000001"


def _golden() -> dict:
    return read_gz_json(FIXTURES / "describe" / "non-string-ids.json.gz")


def _assert_as_pi(store: SessionStore, session_id: str, golden: dict) -> None:
    manager = store.open(session_id)
    assert js_diff(golden["leafId"], manager.get_leaf_id(), "leafId") is None
    assert js_diff(golden["branchIds"], manager.get_branch_ids(), "branchIds") is None
    context = manager.build_session_context().to_json()
    assert js_diff(golden["sessionContext"], context, "sessionContext") is None
    health = verify_session(store, session_id)
    assert health.tree_ok and health.tree_mismatches == 0


def test_the_fixture_links_through_numbers_true_and_a_later_definition(store: SessionStore) -> None:
    """What Pi made of the fixture (its golden describe), and what the store makes of it."""
    expected = [1, 7, 3, True, 8, 2, 11, 1000, 13, 12]  # 1.0 → 1, 1e3 → 1000, 7 defined later
    assert js_diff(expected, _golden()["branchIds"], "branchIds") is None  # (js_diff: true is not 1)
    session_id = store.import_file(CRAFTED).session_id
    assert js_diff(expected, store.open(session_id).get_branch_ids(), "branchIds") is None


@pytest.mark.parametrize("grown_from", [2, 4, 5, 6, 9, 11, 13])
def test_a_grown_file_with_non_string_ids_links_as_a_whole_import(store: SessionStore, tmp_path: Path,
                                                                  grown_from: int) -> None:
    """The first lines imported, then the whole file (an append): stored rows found by a number
    id, stored rows naming a number id that the appended lines define (their parent moves)."""
    lines = CRAFTED.read_bytes().splitlines(keepends=True)
    path = tmp_path / "grown.jsonl"
    path.write_bytes(b"".join(lines[:grown_from]))
    store.import_file(path)
    path.write_bytes(b"".join(lines))
    assert store.import_file(path).status == "appended"
    _assert_as_pi(store, SESSION_ID, _golden())


def test_prune_keeps_pis_path_through_non_string_ids(store: SessionStore, clock) -> None:
    store.import_file(CRAFTED)
    clock.now += 90 * 86_400_000  # every line is older than the policy's 30 days
    report = store.prune(RetentionPolicy(parse_duration("30d")), apply=True)
    assert [item.removed.rows for item in report.trimmed] == [3]  # "1", and the object-parented 9 and 10
    kept = [json.loads(line) for line in b"".join(store.iter_export(SESSION_ID)).splitlines()[1:]]
    assert [entry["id"] for entry in kept] == [1, 2, 3, 7, True, 8, 2, 11, 1000, 13, 12]  # both 2s (a duplicate)
    _assert_as_pi(store, SESSION_ID, _golden())


LEAVES = {"empty string": '""', "zero": "0", "false": "false", "number": "5", "true": "true", "null": "null",
          "missing": None}


def leaf_file(folder: Path, leaf: str | None) -> Path:
    """Three entries; the last one's id is ``leaf`` (JSON; None: no id at all)."""
    last = "" if leaf is None else f'"id":{leaf},'
    path = folder / "leaf.jsonl"
    path.write_text(
        '{"type":"session","version":3,"id":"leafy","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/tmp"}\n'
        '{"type":"message","id":"a1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z",'
        '"message":{"role":"user","content":"hello","timestamp":1}}\n'
        '{"type":"message","id":"a2","parentId":"a1","timestamp":"2026-01-01T00:00:02.000Z",'
        '"message":{"role":"user","content":"again","timestamp":2}}\n'
        f'{{"type":"message",{last}"parentId":"a2","timestamp":"2026-01-01T00:00:03.000Z",'
        '"message":{"role":"user","content":"last","timestamp":3}}\n')
    return path


UNFINDABLE = {"object": "{}", "array": "[1]", "past a double": "1e400"}


@pytest.mark.parametrize("leaf", UNFINDABLE.values(), ids=UNFINDABLE.keys())
def test_an_append_under_a_leaf_no_reread_can_find_starts_a_root(store: SessionStore, tmp_path: Path,
                                                                 leaf: str) -> None:
    """Pi links the new entry in memory (its leaf id is the very value its ``byId`` holds), but
    a read of the file cannot: an object or array is a new value when parsed again, and a number
    past a double is written as null. The store is the file: the appended row is a root, as
    ``verify`` re-derives it (it was linked under the leaf, and verify reported the tree wrong)."""
    store.import_file(leaf_file(tmp_path, leaf))
    manager = store.open("leafy")
    new_id = manager.append_message({"role": "user", "content": "appended", "timestamp": 9})
    written = json.loads(b"".join(store.iter_export("leafy")).splitlines()[-1])
    assert js_diff(json.loads(leaf.replace("1e400", "null")), written["parentId"], "parentId") is None
    assert store.open("leafy").get_branch_ids() == [new_id]
    assert verify_session(store, "leafy").tree_ok


@pytest.mark.parametrize("leaf", LEAVES.values(), ids=LEAVES.keys())
def test_an_append_under_a_leaf_whose_id_is_not_a_string_is_what_pi_writes(store: SessionStore, tmp_path: Path,
                                                                           leaf: str | None) -> None:
    """Pi's ``parentId`` is its leaf id as it is (left out when there is none); its lookup of a
    falsy id finds nothing, so ``getBranch()`` is empty and the new entry starts a new root."""
    store.import_file(leaf_file(tmp_path, leaf))
    manager = store.open("leafy")
    value = None if leaf is None else json.loads(leaf)
    linked = bool(value)  # JavaScript truthiness of these JSON values
    assert js_diff(value, manager.get_leaf_id(), "leafId") is None
    assert manager.get_branch_ids() == (["a1", "a2", value] if linked else [])
    new_id = manager.append_message({"role": "user", "content": "appended", "timestamp": 9})
    written = json.loads(b"".join(store.iter_export("leafy")).splitlines()[-1])
    if leaf is None:
        assert "parentId" not in written
    else:
        assert js_diff(value, written["parentId"], "parentId") is None
    reopened = store.open("leafy")
    assert reopened.get_branch_ids() == (["a1", "a2", value, new_id] if linked else [new_id])
    assert verify_session(store, "leafy").tree_ok


def test_a_context_edit_of_an_entry_whose_id_holds_a_lone_surrogate(store: SessionStore, tmp_path: Path) -> None:
    """The active-branch check compared the id with the escaped form the column holds:
    ``get_branch_ids()`` listed the entry and ``append_context_edit`` refused it as off the branch."""
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"type":"session","version":3,"id":"sur-edit","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/tmp"}\n'
        '{"type":"message","id":"a\\ud800","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z",'
        '"message":{"role":"user","content":"hello","timestamp":1}}\n', "utf-8")
    store.import_file(path)
    manager = store.open("sur-edit")
    assert manager.get_branch_ids() == ["a\ud800"]
    manager.append_context_edit("a\ud800", None)
    assert manager.build_session_context().messages == []

