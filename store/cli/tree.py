"""``pi-store tree SESSION``: the session tree in the terminal, like Pi's ``/tree`` (structure:
``store.tree_outline``)."""

from __future__ import annotations

import click

from store.cli.app import current_store, main
from store.cli.output import Column, format_options, resolve, write_json_list, write_rows

TREE_COLUMNS = (Column("id", "id"), Column("parentId", "parent"), Column("depth", "depth"), Column("kind", "kind"),
                Column("label", "label"), Column("onPath", "onPath"), Column("leaf", "leaf"),
                Column("folded", "folded"), Column("text", "text"))


@main.command("tree")
@click.argument("session")
@click.option("--full", is_flag=True, help="Show every entry (default: long linear runs folded).")
@format_options("Print the tree as a JSON list of root nodes, each with its children.")
def tree_command(session: str, full: bool, fmt: str | None) -> None:
    """Draw a session's tree: branches, labels, compactions, summaries, the leaf.

    The current leaf is marked ``*``, entries on its path ``│``-linked in bold on a terminal.
    --nl, --csv and --tsv print one row per node (id, parentId, depth, ...), depth-first.
    """
    from store.tree_outline import outline

    manager = current_store().open(session)
    leaf = manager.get_leaf_id()
    path_ids = set(manager.get_branch_ids(leaf)) if leaf else set()
    roots = outline(manager.get_tree(), leaf, path_ids, fold=not full)
    shown = resolve(fmt)
    if shown == "json":
        write_json_list(root.to_json() for root in roots)
    elif shown in ("nl", "csv", "tsv"):
        write_rows(shown, TREE_COLUMNS, _rows(roots, None, 0), str)
    else:
        for line in _draw(roots, ""):
            click.echo(line, color=shown == "table")


def _rows(nodes: list, parent: str | None, depth: int):
    for node in nodes:
        doc = node.to_json()
        doc.pop("children")
        yield {**doc, "parentId": parent, "depth": depth}
        yield from _rows(node.children, node.id, depth + 1)


def _draw(nodes: list, prefix: str):
    """Lines of ``nodes`` under ``prefix``: siblings get ├─/└─, a single child continues the line's column."""
    many = len(nodes) > 1
    for i, node in enumerate(nodes):
        last = i == len(nodes) - 1
        connector = ("└─ " if last else "├─ ") if many else ""
        mark = "* " if node.leaf else ""
        label = f" [{node.label}]" if node.label else ""
        text = node.text if len(node.text) <= 70 else node.text[:69] + "…"
        head = f"⋮ {node.text} (--full shows them)" if node.folded else f"{node.id} {node.kind}{label}: {text}"
        line = f"{prefix}{connector}{mark}{head}"
        yield click.style(line, bold=True) if node.on_path else line
        yield from _draw(node.children, prefix + (("   " if last else "│  ") if many else ""))
