"""A session tree laid out for display: one row per entry in Pi's tree order, long linear runs
folded into one row, each row with a one-line summary and its marks (leaf, on the selected path,
labels, compactions, branch summaries, context edits, model and thinking changes).

Built on :func:`store.tree.build_tree` (Pi's ``getTree()`` order), with no database or HTML in
it, so that the web viewer (``store.web``) and a terminal tree command can share it.

Children keep Pi's order, except that at a branch point the child with the biggest subtree comes
last and continues at its parent's indent (the main line), while the others come first, indented
one step: a session that branched a hundred times off one line stays one column, not a hundred.

A *fold* replaces a run of at least ``min_fold`` consecutive
plain entries (see :data:`STRUCTURAL`) each of which has exactly one child: nothing in it is a
branch point, a root, a label, the leaf or the selected entry, so folding it hides only conversation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from store.tree import TreeNode

# Entry types that always get a row of their own (they change what the model sees or is set to).
STRUCTURAL = frozenset({"compaction", "branch_summary", "context_edit", "model_change", "thinking_level_change"})
SUMMARY_CHARS = 100


@dataclass(frozen=True, slots=True)
class TreeRow:
    """One displayed row: an entry (``kind == "entry"``) or a fold of ``folded`` entries."""

    kind: str
    indent: int
    entry_id: str | None
    type: str | None
    role: str | None
    text: str
    label: str | None = None
    children: int = 0
    on_path: bool = False
    is_leaf: bool = False
    selected: bool = False
    folded: int = 0
    fold_key: str | None = None  # a fold's first entry id, to open it (``open_folds``)
    last_id: str | None = None  # a fold's last entry id

    def to_json(self) -> dict:
        out = {"kind": self.kind, "indent": self.indent, "id": self.entry_id, "type": self.type, "role": self.role,
               "text": self.text, "label": self.label, "children": self.children, "onPath": self.on_path,
               "leaf": self.is_leaf, "selected": self.selected}
        if self.kind == "fold":
            out.update(folded=self.folded, foldKey=self.fold_key, lastId=self.last_id)
        return out


def tree_rows(roots: list[TreeNode], *, leaf_id: str | None, path_ids: Iterable[Any] = (),
              selected_id: str | None = None, open_folds: Iterable[str] = (), min_fold: int = 6,
              summary: Callable[[Any], str] | None = None) -> list[TreeRow]:
    """The rows of the tree under ``roots`` in pre-order (Pi's child order), with the path to the
    selected entry (``path_ids``) marked and long plain runs folded, except those whose first
    entry id is in ``open_folds``; ``summary`` gives an entry's text (default
    :func:`entry_summary`). Iterative: a 100,000-entry linear session is no deeper than a short one."""
    path = {i for i in path_ids if isinstance(i, str)}
    sizes = subtree_sizes(roots)
    rows: list[TreeRow] = []
    plain: list[bool] = []  # whether each row may be folded
    seen: set[int] = set()
    stack: list[tuple[TreeNode, int]] = [(root, 0) for root in reversed(roots)]
    root_ids = {id(root) for root in roots}  # a root keeps its row: where the session starts
    while stack:
        node, indent = stack.pop()
        if id(node) in seen:  # a node reachable twice (duplicate ids): show it once
            continue
        seen.add(id(node))
        row = entry_row(node, indent, leaf_id, path, selected_id, summary)
        rows.append(row)
        plain.append(len(node.children) == 1 and row.label is None and row.type not in STRUCTURAL
                     and not row.is_leaf and not row.selected and id(node) not in root_ids)
        if len(node.children) > 1:
            main = max(range(len(node.children)), key=lambda i: (sizes.get(id(node.children[i]), 0), i))
            sides = [c for i, c in enumerate(node.children) if i != main]
            stack.append((node.children[main], indent))  # popped last: the main line, same indent
            stack.extend((child, indent + 1) for child in reversed(sides))
        else:
            stack.extend((child, indent) for child in node.children)
    return _fold(rows, plain, set(open_folds), min_fold)


def subtree_sizes(roots: list[TreeNode]) -> dict[int, int]:
    """Entries under each node, itself included, keyed by ``id(node)`` (iterative post-order;
    a node reachable twice through duplicate ids is counted once)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[TreeNode, bool]] = [(root, False) for root in roots]
    while stack:
        node, done = stack.pop()
        if done:
            sizes[id(node)] = 1 + sum(sizes.get(id(child), 0) for child in node.children)
        elif id(node) not in sizes:
            sizes[id(node)] = 0  # visiting: a cycle back to it adds nothing
            stack.append((node, True))
            stack.extend((child, False) for child in node.children if id(child) not in sizes)
    return sizes


def _fold(rows: list[TreeRow], plain: list[bool], open_folds: set[str], min_fold: int) -> list[TreeRow]:
    out: list[TreeRow] = []
    index = 0
    while index < len(rows):
        end = index
        while end < len(rows) and plain[end]:  # each has one child: the next row is that child
            end += 1
        run = rows[index:end]
        if len(run) >= min_fold and run[0].entry_id not in open_folds:
            out.append(_fold_row(run))
        else:
            out.extend(run)
        if end < len(rows):
            out.append(rows[end])
        index = end + 1
    return out


def _fold_row(run: list[TreeRow]) -> TreeRow:
    counts: dict[str, int] = {}
    for row in run:
        key = row.role or row.type or "entry"
        counts[key] = counts.get(key, 0) + 1
    text = ", ".join(f"{n} {key}" for key, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return TreeRow("fold", run[0].indent, None, None, None, text, on_path=run[0].on_path, folded=len(run),
                   fold_key=run[0].entry_id, last_id=run[-1].entry_id)


def entry_row(node: TreeNode, indent: int, leaf_id: str | None, path: set[str], selected_id: str | None,
              summary: Callable[[Any], str] | None = None) -> TreeRow:
    """The row of one tree node (``path``: ids on the selected root→entry path)."""
    entry = node.entry if isinstance(node.entry, dict) else {}
    entry_id = entry.get("id") if isinstance(entry.get("id"), str) else None
    kind = entry.get("type") if isinstance(entry.get("type"), str) else None
    message = entry.get("message") if kind == "message" and isinstance(entry.get("message"), dict) else None
    role = message.get("role") if message is not None and isinstance(message.get("role"), str) else None
    label = node.label if isinstance(node.label, str) else None
    return TreeRow("entry", indent, entry_id, kind, role, one_line((summary or entry_summary)(node.entry)), label,
                   len(node.children), entry_id in path, entry_id is not None and entry_id == leaf_id,
                   entry_id is not None and entry_id == selected_id)


def one_line(text: str, limit: int = SUMMARY_CHARS) -> str:
    """``text`` on one line (whitespace runs become one space), cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


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
    """A short description of an entry, by type (the text of a message, what a change sets)."""
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
        return f"compaction: {entry.get('tokensBefore')} tokens before, keeps from {entry.get('firstKeptEntryId')}"
    if kind == "branch_summary":
        return f"branch summary: {entry.get('summary')}"
    if kind == "context_edit":
        action = "hides" if entry.get("replacement") is None else "replaces"
        return f"context edit: {action} {entry.get('targetId')}"
    if kind == "model_change":
        return f"model: {entry.get('provider')}/{entry.get('modelId')}"
    if kind == "thinking_level_change":
        return f"thinking: {entry.get('thinkingLevel')}"
    if kind == "label":
        return f"label {entry.get('label')!r} on {entry.get('targetId')}"
    if kind == "session_info":
        return f"name: {entry.get('name')}"
    if kind == "custom_message":
        return f"{entry.get('customType')}: {content_summary(entry.get('content'))}"
    if kind == "custom":
        return f"custom: {entry.get('customType')}"
    return str(kind or "")
