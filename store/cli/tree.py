"""``pi-store tree SESSION``: the session tree in the terminal, like Pi's ``/tree``. The structure
(folds, labels, marks, summaries) is ``store.tree_view``'s, the one the web viewer draws."""

from __future__ import annotations

from collections.abc import Iterator

import click

from store.cli.app import current_store, main
from store.cli.output import Column, format_options, resolve, write_json_list, write_rows
from store.visible_text import one_line

TREE_COLUMNS = (
    Column("id", "id"),
    Column("parentId", "parent"),
    Column("depth", "depth"),
    Column("kind", "kind"),
    Column("label", "label"),
    Column("onPath", "onPath"),
    Column("leaf", "leaf"),
    Column("folded", "folded"),
    Column("text", "text"),
)
DRAWN_CHARS = 70


@main.command("tree")
@click.argument("session")
@click.option("--full", is_flag=True, help="Show every entry (default: long linear runs folded).")
@format_options("Print the tree as a JSON list of root nodes, each with its children.")
def tree_command(session: str, full: bool, fmt: str | None) -> None:
    """Draw a session's tree: branches, labels, compactions, summaries, the leaf.

    The current leaf is marked ``*``, entries on its path ``│``-linked in bold on a terminal.
    --nl, --csv and --tsv print one row per node (id, parentId, depth, ...), depth-first.
    """
    from store.tree_view import tree_structure

    manager = current_store().open(session)
    leaf = manager.get_leaf_id()
    path_ids = manager.get_branch_ids(leaf) if leaf else []
    roots = tree_structure(manager.get_tree(), leaf_id=leaf, path_ids=path_ids, min_fold=None if full else 6)
    shown = resolve(fmt)
    if shown == "json":
        write_json_list(root.outline_json() for root in roots)
    elif shown in ("nl", "csv", "tsv"):
        write_rows(shown, TREE_COLUMNS, _rows(roots), str)
    else:
        for line in _draw(roots):
            click.echo(line, color=shown == "table")


def _rows(roots: list) -> Iterator[dict]:
    """One row per node, depth-first, with its parent's id and its depth (text made printable)."""
    stack = [(root, None, 0) for root in reversed(roots)]
    while stack:
        item, parent, depth = stack.pop()
        doc = item.outline_node()
        doc.pop("children")
        row = {**doc, "parentId": parent, "depth": depth}
        yield {key: _printable(value) if isinstance(value, str) else value for key, value in row.items()}
        stack.extend((child, item.entry_id, depth + 1) for child in reversed(item.children))


def _draw(roots: list) -> Iterator[str]:
    """Lines of the tree: siblings get ├─/└─, a single child continues its parent's column."""
    stack: list[tuple[list, int, str]] = [(roots, 0, "")]
    while stack:
        items, index, prefix = stack.pop()
        if index >= len(items):
            continue
        stack.append((items, index + 1, prefix))
        item, many, last = items[index], len(items) > 1, index == len(items) - 1
        connector = ("└─ " if last else "├─ ") if many else ""
        mark = "* " if item.is_leaf else ""
        if item.kind == "fold":
            head = f"⋮ {item.folded} entries: {item.text} (--full shows them)"
        else:
            kind = item.role or item.type or "?"
            label = f" [{_printable(item.label)}]" if item.label else ""
            text = item.text if len(item.text) <= DRAWN_CHARS else item.text[: DRAWN_CHARS - 1] + "…"
            head = f"{_printable(item.entry_id)} {kind}{label}: {_printable(text)}"
        line = one_line(f"{prefix}{connector}{mark}{head}")
        yield click.style(line, bold=True) if item.on_path else line
        stack.append((item.children, 0, prefix + (("   " if last else "│  ") if many else "")))


def _printable(text: object) -> str:
    """``text`` with lone surrogates (JSON allows them) replaced, so that it prints."""
    return str(text).encode("utf-8", "replace").decode("utf-8")
