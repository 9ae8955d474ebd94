"""A session tree as what a viewer shows: the one structure behind ``pi-store tree`` (drawn in the
terminal, ``--json``) and the web viewer's tree pane (``store.web``).

:func:`tree_structure` turns Pi's ``getTree()`` (:func:`store.tree.build_tree`) into
:class:`TreeItem` nodes, children in Pi's order, each with a one-line summary and its marks
(leaf, on the selected path, selected, label, how many children the entry has), long linear
runs folded. It reads no database and writes no HTML; a surface only renders it:
:func:`layout` flattens it into the web pane's rows, :meth:`TreeItem.outline_json` gives the
CLI's nested JSON.

A *fold* replaces a run of at least ``min_fold`` consecutive plain entries: each has exactly one
child and none is a root, a label's target, the leaf, the selected entry or of a type that
changes what the model sees or is set to (:data:`STRUCTURAL`), so folding hides conversation
only. Summaries are computed for the items left visible only (a 5,000-entry linear session
needs three), in one call of the ``summaries`` function, so that a caller reading them from the
database asks once.

:func:`layout` keeps Pi's child order except that at a branch point the child with the biggest
subtree comes last and continues at its parent's indent (the main line), while the others come
first, indented one step: a session that branched a hundred times off one line stays one
column, not a hundred.

Everything is iterative: a 100,000-entry linear session is no deeper than a short one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from store.format import js_stringify
from store.tree import TreeNode
from store.tree_columns import id_key
from store.visible_text import as_text

# Entry types that always get a row of their own (they change what the model sees or is set to).
STRUCTURAL = frozenset({"compaction", "branch_summary", "context_edit", "model_change", "thinking_level_change"})
SUMMARY_CHARS = 100
MIN_FOLD = 6


@dataclass(eq=False, slots=True)
class TreeItem:
    """One node of the structure: an entry (``kind == "entry"``) or a fold of ``folded``
    entries (``fold_key``: its first entry id, which opens it; ``last_id``: its last)."""

    kind: str
    entry_id: str | None
    type: str | None
    role: str | None
    text: str = ""
    label: str | None = None
    branches: int = 0  # children of the entry in the session tree
    on_path: bool = False
    is_leaf: bool = False
    selected: bool = False
    folded: int = 0
    fold_key: str | None = None  # a fold's: open_key of its first entry's id
    last_id: str | None = None
    children: list[TreeItem] = field(default_factory=list)
    entry: Any = None  # the source entry (for summaries)

    def outline_json(self) -> dict:
        """``pi-store tree --json``'s node: id, kind (a message's role, an entry's type, or
        ``folded``), text, label, onPath, leaf, folded and the nested children (iterative)."""
        top = self.outline_node()
        pending = [(self, top)]
        while pending:
            item, doc = pending.pop()
            for child in item.children:
                child_doc = child.outline_node()
                doc["children"].append(child_doc)
                pending.append((child, child_doc))
        return top

    def outline_node(self) -> dict:
        """This node's fields of :meth:`outline_json`, without its children."""
        kind = "folded" if self.kind == "fold" else self.role or self.type or "?"
        return {
            "id": self.entry_id,
            "kind": kind,
            "text": self.text,
            "label": self.label,
            "onPath": self.on_path,
            "leaf": self.is_leaf,
            "folded": self.folded,
            "children": [],
        }


@dataclass(frozen=True, slots=True)
class TreeRow:
    """One row of the web pane (:func:`layout`): an item at an indent."""

    item: TreeItem
    indent: int

    def to_json(self) -> dict:
        item = self.item
        out = {
            "kind": item.kind,
            "indent": self.indent,
            "id": item.entry_id,
            "type": item.type,
            "role": item.role,
            "text": item.text,
            "label": item.label,
            "children": item.branches,
            "onPath": item.on_path,
            "leaf": item.is_leaf,
            "selected": item.selected,
        }
        if item.kind == "fold":
            out.update(folded=item.folded, foldKey=item.fold_key, lastId=item.last_id)
        return out


def tree_structure(
    roots: list[TreeNode],
    *,
    leaf_id: str | None,
    path_ids: Iterable[Any] = (),
    selected_id: str | None = None,
    open_folds: Iterable[str] = (),
    min_fold: int | None = MIN_FOLD,
    summaries: Callable[[Sequence[Any]], Sequence[str]] | None = None,
    opened_runs: set[str] | None = None,
) -> list[TreeItem]:
    """The items of the tree under ``roots`` (``build_tree``'s result), children in Pi's order;
    ``path_ids``: the root→selected path, marked; runs of ``min_fold`` or more plain entries
    folded (None: none), except those whose first entry id is in ``open_folds`` (the keys that
    opened a run are added to ``opened_runs``, when given); ``summaries``: the texts of a list
    of entries (default: :func:`entry_summary` of each)."""
    path = {key for i in path_ids if (key := id_key(i)) is not None}  # "1" and 1 are two ids, as in Pi
    opened = set(open_folds)
    root_ids = {id(root) for root in roots}
    seen: set[int] = set()
    shown: list[TreeItem] = []

    def make(node: TreeNode) -> TreeItem:
        item = _item(node, leaf_id, path, selected_id)
        shown.append(item)
        return item

    def plain(node: TreeNode) -> bool:
        if len(node.children) != 1 or node.label is not None or id(node) in root_ids:
            return False
        entry = node.entry if isinstance(node.entry, dict) else {}
        entry_id = entry.get("id")
        return entry.get("type") not in STRUCTURAL and (entry_id is None or entry_id not in (leaf_id, selected_id))

    top: list[TreeItem] = []
    stack: list[tuple[TreeNode, list[TreeItem]]] = [(root, top) for root in reversed(roots)]
    while stack:
        node, siblings = stack.pop()
        if id(node) in seen:  # a node reachable twice (duplicate ids): shown once
            continue
        run: list[TreeNode] = []
        if min_fold is not None:
            while plain(node) and id(node) not in seen:
                seen.add(id(node))
                run.append(node)
                node = node.children[0]
        if run and len(run) >= min_fold and open_key(_id(run[0])) not in opened:
            fold = _fold_item(run, path)
            siblings.append(fold)
            siblings = fold.children
        else:
            if run and len(run) >= min_fold and opened_runs is not None:
                opened_runs.add(open_key(_id(run[0])))
            for member in run:
                item = make(member)
                siblings.append(item)
                siblings = item.children
        if id(node) in seen:
            continue
        seen.add(id(node))
        item = make(node)
        siblings.append(item)
        stack.extend((child, item.children) for child in reversed(node.children))
    texts = summaries([item.entry for item in shown]) if summaries is not None else None
    for n, item in enumerate(shown):
        item.text = one_line(texts[n] if texts is not None else entry_summary(item.entry))
    return top


def _id(node: TreeNode) -> Any:
    return node.entry.get("id") if isinstance(node.entry, dict) else None


def open_key(entry_id: Any) -> str:
    """An entry id as text that a URL can carry (a fold's ``?open=`` key): a string as it is, an
    id of another JSON type (Pi keeps them) as its JSON, a missing one as ``null`` (a string id
    spelled the same opens that fold too: harmless)."""
    return entry_id if isinstance(entry_id, str) else js_stringify(entry_id)


def _on(entry_id: Any, path: set) -> bool:
    """Whether the entry with ``entry_id`` is on the path (ids compared as Pi's ``byId`` does)."""
    key = id_key(entry_id)
    return key is not None and key in path


def _item(node: TreeNode, leaf_id: str | None, path: set, selected_id: str | None) -> TreeItem:
    entry = node.entry if isinstance(node.entry, dict) else {}
    entry_id = entry.get("id") if isinstance(entry.get("id"), str) else None
    kind = entry.get("type") if isinstance(entry.get("type"), str) else None
    message = entry.get("message") if kind == "message" and isinstance(entry.get("message"), dict) else None
    role = message.get("role") if message is not None and isinstance(message.get("role"), str) else None
    label = node.label if isinstance(node.label, str) else None
    return TreeItem(
        "entry",
        entry_id,
        kind,
        role,
        label=label,
        branches=len(node.children),
        on_path=_on(entry.get("id"), path),
        is_leaf=entry_id is not None and entry_id == leaf_id,
        selected=entry_id is not None and entry_id == selected_id,
        entry=node.entry,
    )


def _fold_item(run: list[TreeNode], path: set) -> TreeItem:
    counts: dict[str, int] = {}
    for node in run:
        entry = node.entry if isinstance(node.entry, dict) else {}
        message = entry.get("message") if entry.get("type") == "message" else None
        role = message.get("role") if isinstance(message, dict) else None
        key = role if isinstance(role, str) else entry.get("type") if isinstance(entry.get("type"), str) else "entry"
        counts[key] = counts.get(key, 0) + 1
    text = ", ".join(f"{n} {key}" for key, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    first, last = _id(run[0]), _id(run[-1])
    return TreeItem("fold", None, None, None, text, on_path=_on(first, path),
                    folded=len(run), fold_key=open_key(first), last_id=last if isinstance(last, str) else None)


def layout(items: list[TreeItem]) -> list[TreeRow]:
    """The web pane's rows: pre-order, the biggest child of a branch point last at its parent's
    indent (the main line), the other children before it, one step in."""
    sizes = _sizes(items)
    rows: list[TreeRow] = []
    stack: list[tuple[TreeItem, int]] = [(item, 0) for item in reversed(items)]
    while stack:
        item, indent = stack.pop()
        rows.append(TreeRow(item, indent))
        children = item.children
        if len(children) > 1:
            main = max(range(len(children)), key=lambda i: (sizes[id(children[i])], i))
            stack.append((children[main], indent))  # popped last: the main line, same indent
            stack.extend((child, indent + 1) for i, child in reversed(list(enumerate(children))) if i != main)
        else:
            stack.extend((child, indent) for child in children)
    return rows


def _sizes(items: list[TreeItem]) -> dict[int, int]:
    """Entries under each item, itself (or all its folded entries) included, keyed by ``id()``."""
    order: list[TreeItem] = []
    stack = list(items)
    while stack:
        item = stack.pop()
        order.append(item)
        stack.extend(item.children)
    sizes: dict[int, int] = {}
    for item in reversed(order):  # children before their parents
        sizes[id(item)] = (item.folded or 1) + sum(sizes[id(child)] for child in item.children)
    return sizes


def tree_rows(roots: list[TreeNode], **options: Any) -> list[TreeRow]:
    """:func:`layout` of :func:`tree_structure` (same options)."""
    return layout(tree_structure(roots, **options))


def one_line(text: Any, limit: int = SUMMARY_CHARS) -> str:
    """``text`` (:func:`store.visible_text.as_text`) on one line (whitespace runs become one
    space), cut to ``limit`` characters."""
    flat = " ".join(as_text(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def content_summary(content: Any) -> str:
    """The readable text of a message's content: text blocks, tool calls by name, images as a mark
    (thinking is left out)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "toolCall":
            parts.append(f"→ {block.get('name')}()")
        elif kind == "image":
            parts.append("[image]")
    return " ".join(parts)


def entry_summary(entry: Any) -> str:
    """A short description of an entry, shown after its kind: the text of a message, what a change sets."""
    if not isinstance(entry, dict):
        return ""
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message")
        if not isinstance(message, dict):
            return ""
        role = message.get("role")
        if role == "toolResult":
            return f"{message.get('toolName')}: {content_summary(message.get('content'))}"
        if role == "bashExecution":
            return f"$ {message.get('command')}"
        text = content_summary(message.get("content"))
        return text or ("(thinking)" if role == "assistant" else "")
    if kind == "compaction":
        return f"{entry.get('tokensBefore')} tokens before, keeps from {entry.get('firstKeptEntryId')}"
    if kind == "branch_summary":
        return str(entry.get("summary"))
    if kind == "context_edit":
        action = "hides" if entry.get("replacement") is None else "replaces"
        return f"{action} {entry.get('targetId')}"
    if kind == "model_change":
        return f"{entry.get('provider')}/{entry.get('modelId')}"
    if kind == "thinking_level_change":
        return str(entry.get("thinkingLevel"))
    if kind == "label":
        return f"{entry.get('label')!r} on {entry.get('targetId')}"
    if kind == "session_info":
        return str(entry.get("name"))
    if kind == "custom_message":
        return f"{entry.get('customType')}: {content_summary(entry.get('content'))}"
    if kind == "custom":
        return str(entry.get("customType"))
    return str(kind or "")
