"""store.tree_view on the viewer's generated sessions: folding, the main line, marks; and the
CLI's ``pi-store tree`` and the web pane drawing that one structure."""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from store.tree import build_tree
from store.tree_view import tree_rows
from tests.web import sessions
from tests.web.conftest import Served, pi_store


def entries_of(path: Path) -> list:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()[1:]]


def test_long_linear_session_folds_to_three_rows(tmp_path: Path) -> None:
    entries = entries_of(sessions.long_linear(tmp_path / "long.jsonl"))
    rows = tree_rows(build_tree(entries), leaf_id="L04999")
    assert [(r.item.kind, r.item.entry_id) for r in rows] == [("entry", "L00000"), ("fold", None), ("entry", "L04999")]
    fold = rows[1].item
    assert fold.folded == 4998 and fold.fold_key == "L00001" and fold.last_id == "L04998"
    assert fold.text == "1666 assistant, 1666 toolResult, 1666 user"
    assert rows[2].item.is_leaf
    opened = tree_rows(build_tree(entries), leaf_id="L04999", open_folds={"L00001"})
    assert [r.item.entry_id for r in opened] == [e["id"] for e in entries]


def test_selected_entry_splits_a_fold(tmp_path: Path) -> None:
    entries = entries_of(sessions.long_linear(tmp_path / "long.jsonl", count=40))
    ids = [e["id"] for e in entries]
    rows = tree_rows(build_tree(entries), leaf_id=ids[-1], selected_id=ids[20], path_ids=ids[:21])
    items = [r.item for r in rows]
    assert [i.kind for i in items] == ["entry", "fold", "entry", "fold", "entry"]
    assert items[2].selected and items[2].on_path and items[1].on_path and not items[3].on_path


def test_a_fold_whose_first_id_is_not_a_string_opens_and_is_on_the_path(tmp_path: Path) -> None:
    """Its key was None: the page linked ``?open=None``, which never opened it, and the fold (and
    every entry with such an id) was never on the path."""
    entries = entries_of(sessions.long_linear(tmp_path / "long.jsonl", count=12))
    for n in range(1, 11):  # ids 1..10, numbers (Pi keeps them), each the parent of the next
        entries[n] = {**entries[n], "id": n, "parentId": entries[0]["id"] if n == 1 else n - 1}
    entries[11] = {**entries[11], "parentId": 10}
    path = [entries[0]["id"], *range(1, 11), entries[11]["id"]]
    rows = tree_rows(build_tree(entries), leaf_id=entries[11]["id"], path_ids=path)
    fold = rows[1].item
    assert fold.kind == "fold" and fold.fold_key == "1" and fold.on_path
    opened = tree_rows(build_tree(entries), leaf_id=entries[11]["id"], path_ids=path, open_folds={fold.fold_key})
    assert [r.item.kind for r in opened] == ["entry"] * 12 and all(r.item.on_path for r in opened)


def test_the_id_1_and_the_id_one_as_text_are_two_entries_on_the_path(tmp_path: Path) -> None:
    entries = entries_of(sessions.long_linear(tmp_path / "long.jsonl", count=3))
    entries[1] = {**entries[1], "id": 1, "parentId": entries[0]["id"]}
    entries[2] = {**entries[2], "id": "1", "parentId": entries[0]["id"]}
    rows = tree_rows(build_tree(entries), leaf_id="1", path_ids=[entries[0]["id"], 1])
    assert {(r.item.entry_id, r.item.on_path) for r in rows} == {("L00000", True), (None, True), ("1", False)}


def test_branches_hang_off_one_main_line(tmp_path: Path) -> None:
    entries = entries_of(sessions.branchy(tmp_path / "branchy.jsonl", branches=100))
    rows = tree_rows(build_tree(entries), leaf_id="T099a5", min_fold=10**9)
    by_id = {r.item.entry_id: r for r in rows}
    assert {by_id[f"T{b:03d}"].indent for b in range(100)} == {0}  # the trunk stays in one column
    assert {by_id[f"T{b:03d}b{d}"].indent for b in range(99) for d in range(6)} == {1}
    assert {by_id["T099a0"].indent, by_id["T099b0"].indent} == {0, 1}  # two equal subtrees: one continues
    order = [r.item.entry_id for r in rows]
    assert order.index("T007b0") == order.index("T007") + 1  # a side branch right under its branch point
    assert sum(r.item.branches > 1 for r in rows) == 100 and len(rows) == len(entries)


def test_structural_entries_and_labels_are_never_folded(tmp_path: Path) -> None:
    entries = entries_of(sessions.long_linear(tmp_path / "long.jsonl", count=30))
    entries[10] = {**entries[10], "type": "model_change", "provider": "p", "modelId": "m"}
    entries.append({"type": "label", "id": "lab", "parentId": entries[-1]["id"], "timestamp": entries[-1]["timestamp"],
                    "targetId": entries[20]["id"], "label": "here"})
    rows = tree_rows(build_tree(entries), leaf_id="lab")
    shown = {r.item.entry_id: r.item for r in rows if r.item.kind == "entry"}
    assert shown[entries[10]["id"]].text == "p/m"
    assert shown[entries[20]["id"]].label == "here"


def _cli_nodes(roots: list) -> list[tuple]:
    out, stack = [], list(roots)
    while stack:
        node = stack.pop()
        out.append(tuple(node[k] for k in ("id", "kind", "text", "label", "onPath", "leaf", "folded")))
        stack.extend(node["children"])
    return out


def _web_nodes(rows: list) -> list[tuple]:
    return [(r["id"], "folded" if r["kind"] == "fold" else r["role"] or r["type"] or "?", r["text"], r["label"],
             r["onPath"], r["leaf"], r.get("folded", 0)) for r in rows]


def test_cli_and_web_draw_one_structure(served_sqlite: Served) -> None:
    """``pi-store tree --json`` and the web pane (``/api/sessions/ID``) show the same nodes with
    the same folds, texts, labels and marks (only the web's main-line order differs)."""
    listed = served_sqlite.get("/api/sessions").json()
    compacted = max((s for s in listed if s["id"].startswith("0")), key=lambda s: s["messageCount"])
    for session_id in (sessions.LONG_ID, sessions.BRANCHY_ID, sessions.HOSTILE_ID, compacted["id"]):
        cli = json.loads(pi_store(served_sqlite.db_url, "tree", session_id, "--json").stdout)
        web = served_sqlite.get(f"/api/sessions/{session_id}").json()["tree"]
        assert sorted(_cli_nodes(cli), key=repr) == sorted(_web_nodes(web), key=repr), session_id
    hostile = {n[0]: n for n in _cli_nodes(json.loads(pi_store(served_sqlite.db_url, "tree", sessions.HOSTILE_ID,
                                                                "--json").stdout))}
    assert hostile["h2"][3] == sessions.HOSTILE_TEXT  # the label, as stored (escaping is the page's job)


def test_cli_tree_of_a_long_session(served_sqlite: Served) -> None:
    """5,000 entries in one line: folded to three nodes, and drawn in full without recursion."""
    folded = json.loads(pi_store(served_sqlite.db_url, "tree", sessions.LONG_ID, "--json").stdout)
    assert [n[6] for n in _cli_nodes(folded)] == [0, 4998, 0]
    drawn = pi_store(served_sqlite.db_url, "tree", sessions.LONG_ID, "--full").stdout.splitlines()
    assert len(drawn) == 5000 and drawn[-1] == "* L04999 assistant: reading src/mod52.py → read()"


def test_context_links_reach_their_entry_on_the_page_they_open(served_sqlite: Served) -> None:
    """The context pane lists the last 300 messages, the conversation the last 200 entries: a
    link to an older message's entry pointed at an anchor that was not on the page."""
    import html as html_lib
    import re

    page = served_sqlite.get(f"/sessions/{sessions.LONG_ID}").text
    shown = set(re.findall(r'<article id="e-([^"]+)"', page))
    links = re.findall(r'<a class="meta id" href="([^"]+)">L\d+</a>', page.split('aria-label="what the model sees"')[1])
    assert len(links) >= 250 and len(shown) == 200
    for link in map(html_lib.unescape, links):
        anchor = link.rsplit("#e-", 1)[1]
        assert ("all=1" in link) == (anchor not in shown), link
    opened = served_sqlite.get(html_lib.unescape(links[0])).text  # the oldest: on the whole conversation
    assert f'<article id="e-{links[0].rsplit("#e-", 1)[1]}"' in opened
