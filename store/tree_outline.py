"""A session tree as an outline: Pi's ``getTree()`` (:func:`store.tree.build_tree`) turned into
plain nodes with what a viewer shows (kind, a one-line text, label, leaf and current-path marks),
long linear runs folded. Used by ``pi-store tree``; renderer-independent (JSON-ready)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from store.format.jsvalue import prop
from store.tree import TreeNode

FOLD_AFTER = 3  # a linear run longer than 2 * FOLD_AFTER keeps FOLD_AFTER nodes at each end


@dataclass
class OutlineNode:
    """One entry of the outline (``folded``: a run of that many hidden entries, no entry)."""

    id: str | None
    kind: str
    text: str
    label: str | None = None
    on_path: bool = False
    leaf: bool = False
    folded: int = 0
    children: list[OutlineNode] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"id": self.id, "kind": self.kind, "text": self.text, "label": self.label, "onPath": self.on_path,
                "leaf": self.leaf, "folded": self.folded, "children": [c.to_json() for c in self.children]}


def _one_line(text: Any) -> str:
    """``text`` on one line, lone surrogates (JSON allows them) replaced so that it prints."""
    return " ".join(str(text or "").encode("utf-8", "replace").decode("utf-8").split())


def _text(entry: Any) -> tuple[str, str]:
    """(kind, one-line text) of an entry."""
    kind = prop(entry, "type") or "?"
    if kind == "message":
        message = prop(entry, "message") or {}
        role = prop(message, "role") or "?"
        content = prop(message, "content")
        if isinstance(content, list):
            content = " ".join(str(prop(part, "text") or "") for part in content if isinstance(part, dict))
        return role, _one_line(content)
    if kind in ("compaction", "branch_summary"):
        return kind, _one_line(prop(entry, "summary"))
    return kind, ""


def outline(roots: list[TreeNode], leaf_id: str | None, path_ids: set[str], *, fold: bool = True) -> list[OutlineNode]:
    """The outline of ``roots`` (``build_tree``'s result); ``fold``: linear runs folded."""
    def convert(node: TreeNode) -> OutlineNode:
        entry_id = prop(node.entry, "id")
        kind, text = _text(node.entry)
        return OutlineNode(entry_id, kind, text, node.label, entry_id in path_ids, entry_id == leaf_id,
                           children=[convert(child) for child in node.children])

    nodes = [convert(root) for root in roots]
    return [_fold(n) for n in nodes] if fold else nodes


def _fold(node: OutlineNode) -> OutlineNode:
    """Fold the middle of each linear run (single-child chains) of unlabelled, unmarked entries."""
    run = [node]
    while len(run[-1].children) == 1:
        run.append(run[-1].children[0])
    if len(run) > 2 * FOLD_AFTER + 1:
        middle = run[FOLD_AFTER:-FOLD_AFTER]
        if not any(n.label or n.leaf or n.kind in ("compaction", "branch_summary") for n in middle):
            hidden = OutlineNode(None, "folded", f"{len(middle)} entries", folded=len(middle),
                                 on_path=all(n.on_path for n in middle), children=[run[-FOLD_AFTER]])
            run[FOLD_AFTER - 1].children = [hidden]
    for n in run:
        if len(n.children) != 1:
            n.children = [_fold(child) for child in n.children]
    return node
