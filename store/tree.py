"""Pi's ``getTree()`` over a session's entries, with its exact node and child order.

Nodes are keyed by entry id the way Pi's ``Map`` keys them (a later duplicate id replaces the
node, and the replaced node is pushed once per entry carrying the id); children are sorted by
``new Date(timestamp)`` with V8's sort, whose result on invalid dates (NaN comparisons) we follow.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from store.format.jsdate import parse_js_date
from store.format.jssort import v8_sort
from store.format.jsvalue import UNDEFINED, map_key, prop, truthy


@dataclass(eq=False, slots=True)
class TreeNode:
    """One node of :func:`build_tree`'s result."""

    entry: Any
    children: list[TreeNode] = field(default_factory=list)
    label: str | None = None
    label_timestamp: Any = None


def resolve_labels(entries: Iterable[Any]) -> tuple[dict[tuple, Any], dict[tuple, Any]]:
    """Labels per target (file order, latest wins, a falsy label clears) and their timestamps."""
    labels: dict[tuple, Any] = {}
    stamps: dict[tuple, Any] = {}
    for entry in entries:
        if prop(entry, "type") != "label":
            continue
        key = map_key(prop(entry, "targetId"))
        label = prop(entry, "label")
        if truthy(label):
            labels[key] = label
            stamps[key] = prop(entry, "timestamp")
        else:
            labels.pop(key, None)
            stamps.pop(key, None)
    return labels, stamps


def build_tree(entries: list[Any]) -> list[TreeNode]:
    """Roots of the session tree, children in Pi's order (see module docstring)."""
    labels, stamps = resolve_labels(entries)
    nodes: dict[tuple, TreeNode] = {}
    keys: list[tuple] = []
    for entry in entries:
        key = _key(prop(entry, "id"))
        keys.append(key)
        if labels and key in labels:
            stamp = stamps[key]
            nodes[key] = TreeNode(entry, label=labels[key], label_timestamp=None if stamp is UNDEFINED else stamp)
        else:
            nodes[key] = TreeNode(entry)
    roots: list[TreeNode] = []
    for entry, key in zip(entries, keys, strict=True):
        node = nodes[key]
        parent_id = prop(entry, "parentId")
        if parent_id is None:
            roots.append(node)
            continue
        parent_key = _key(parent_id)
        if parent_key == key:
            roots.append(node)
            continue
        parent = nodes.get(parent_key)
        (parent.children if parent is not None else roots).append(node)
    stack = list(roots)
    sorted_nodes: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in sorted_nodes:  # a node reachable twice (duplicate ids): sort once
            continue
        sorted_nodes.add(id(node))
        if len(node.children) > 1:
            node.children = _by_timestamp(node.children)
        stack.extend(node.children)
    return roots


def _key(value: Any) -> tuple:
    """``map_key`` with its common case (a string id) first."""
    return ("string", value) if type(value) is str else map_key(value)


def _by_timestamp(children: list[TreeNode]) -> list[TreeNode]:
    """Pi's ``children.sort((a, b) => new Date(a.timestamp) - new Date(b.timestamp))``, each
    timestamp read once (a comparison with a date that is no date is NaN)."""
    times = [parse_js_date(prop(child.entry, "timestamp")) for child in children]

    def compare(a: int, b: int) -> float | None:
        time_a, time_b = times[a], times[b]
        return None if time_a is None or time_b is None else time_a - time_b

    return [children[index] for index in v8_sort(list(range(len(children))), compare)]


def flatten_tree(roots: list[TreeNode]) -> list[dict]:
    """Pre-order list of nodes in the oracle's ``tree`` shape (``cycle: true`` marks a node met
    again below itself, which only duplicate ids can cause)."""
    out: list[dict] = []
    on_path: set[int] = set()
    stack: list[tuple] = [(root, 0, None) for root in reversed(roots)]
    while stack:
        item = stack.pop()
        if item[0] == "exit":
            on_path.discard(item[1])
            continue
        node, depth, parent = item
        node_id = _id_or_none(node.entry)
        record = {
            "id": node_id,
            "treeParentId": parent,
            "depth": depth,
            "type": _type_or_none(node.entry),
            "label": node.label,
            "labelTimestamp": node.label_timestamp,
            "children": [_id_or_none(child.entry) for child in node.children],
        }
        out.append(record)
        if id(node) in on_path:
            record["cycle"] = True
            continue
        on_path.add(id(node))
        stack.append(("exit", id(node)))
        stack.extend((child, depth + 1, node_id) for child in reversed(node.children))
    return out


def _id_or_none(entry: Any) -> Any:
    value = prop(entry, "id")
    return None if value is UNDEFINED else value


def _type_or_none(entry: Any) -> Any:
    value = prop(entry, "type")
    return None if value is UNDEFINED else value
