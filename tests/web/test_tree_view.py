"""store.tree_view on the viewer's generated sessions: folding, the main line, marks."""

from __future__ import annotations

from pathlib import Path

import orjson

from store.tree import build_tree
from store.tree_view import tree_rows
from tests.web import sessions


def entries_of(path: Path) -> list:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()[1:]]


def test_long_linear_session_folds_to_three_rows(tmp_path: Path) -> None:
    entries = entries_of(sessions.long_linear(tmp_path / "long.jsonl"))
    rows = tree_rows(build_tree(entries), leaf_id="L04999")
    assert [(r.kind, r.entry_id) for r in rows] == [("entry", "L00000"), ("fold", None), ("entry", "L04999")]
    assert rows[1].folded == 4998 and rows[1].fold_key == "L00001" and rows[1].last_id == "L04998"
    assert rows[2].is_leaf
    opened = tree_rows(build_tree(entries), leaf_id="L04999", open_folds={"L00001"})
    assert [r.entry_id for r in opened] == [e["id"] for e in entries]


def test_selected_entry_splits_a_fold(tmp_path: Path) -> None:
    entries = entries_of(sessions.long_linear(tmp_path / "long.jsonl", count=40))
    ids = [e["id"] for e in entries]
    rows = tree_rows(build_tree(entries), leaf_id=ids[-1], selected_id=ids[20], path_ids=ids[:21])
    assert [r.kind for r in rows] == ["entry", "fold", "entry", "fold", "entry"]
    assert rows[2].selected and rows[2].on_path and rows[1].on_path and not rows[3].on_path


def test_branches_hang_off_one_main_line(tmp_path: Path) -> None:
    entries = entries_of(sessions.branchy(tmp_path / "branchy.jsonl", branches=100))
    rows = tree_rows(build_tree(entries), leaf_id="T099a5", min_fold=10**9)
    by_id = {r.entry_id: r for r in rows}
    assert {by_id[f"T{b:03d}"].indent for b in range(100)} == {0}  # the trunk stays in one column
    assert {by_id[f"T{b:03d}b{d}"].indent for b in range(99) for d in range(6)} == {1}
    assert {by_id["T099a0"].indent, by_id["T099b0"].indent} == {0, 1}  # two equal subtrees: one continues
    order = [r.entry_id for r in rows]
    assert order.index("T007b0") == order.index("T007") + 1  # a side branch right under its branch point
    assert sum(r.children > 1 for r in rows) == 100 and len(rows) == len(entries)


def test_structural_entries_and_labels_are_never_folded(tmp_path: Path) -> None:
    entries = entries_of(sessions.long_linear(tmp_path / "long.jsonl", count=30))
    entries[10] = {**entries[10], "type": "model_change", "provider": "p", "modelId": "m"}
    entries.append({"type": "label", "id": "lab", "parentId": entries[-1]["id"], "timestamp": entries[-1]["timestamp"],
                    "targetId": entries[20]["id"], "label": "here"})
    rows = tree_rows(build_tree(entries), leaf_id="lab")
    shown = {r.entry_id: r for r in rows if r.kind == "entry"}
    assert shown[entries[10]["id"]].text == "model: p/m"
    assert shown[entries[20]["id"]].label == "here"
