"""The derived tree columns of entry rows (see ``store.db.schema``): parent row, depth, runs,
latest compaction / thinking level / model source on the path, superseded duplicates.

``derive_file`` computes them for a whole file at import; ``derive_child`` for one row appended
under a known parent, which is all an append needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from store.format.jsvalue import prop, truthy


@dataclass(slots=True)
class TreeColumns:
    """Derived columns of one entry row."""

    seq: int
    entry_id: str | None
    parent_seq: int | None = None
    depth: int = 0
    run_start: int = 0
    compaction_seq: int | None = None
    thinking_seq: int | None = None
    model_seq: int | None = None
    superseded: bool = False


@dataclass(frozen=True, slots=True)
class PathProblem:
    """A row whose parent walk Pi would not finish the way a tree should (reported as a warning)."""

    seq: int
    reason: str


def setting_kinds(value: Any) -> tuple[bool, bool, bool]:
    """Whether an entry is a compaction, a thinking-level change, a model source."""
    if not isinstance(value, dict):
        return False, False, False
    kind = value.get("type")
    is_model = kind == "model_change" or (kind == "message" and prop(value.get("message"), "role") == "assistant")
    return kind == "compaction", kind == "thinking_level_change", is_model


def derive_child(seq: int, entry_id: str | None, value: Any, parent: TreeColumns | None) -> TreeColumns:
    """Columns of a row appended at ``seq`` whose parent row is ``parent`` (None: a new root)."""
    is_compaction, is_thinking, is_model = setting_kinds(value)
    cols = TreeColumns(seq, entry_id)
    if parent is not None:
        cols.parent_seq = parent.seq
        cols.depth = parent.depth + 1
        cols.run_start = parent.run_start if parent.seq == seq - 1 else seq
        cols.compaction_seq, cols.thinking_seq, cols.model_seq = (
            parent.compaction_seq, parent.thinking_seq, parent.model_seq,
        )
    else:
        cols.run_start = seq
    if is_compaction:
        cols.compaction_seq = seq
    if is_thinking:
        cols.thinking_seq = seq
    if is_model:
        cols.model_seq = seq
    return cols


def derive_file(entries: list[tuple[int, Any]]) -> tuple[dict[int, TreeColumns], list[PathProblem]]:
    """Columns for every entry row of a file, given ``(seq, parsed value)`` in file order.

    Parent lookups follow Pi's ``byId`` (the last row with an id wins, even a later one). A
    parent cycle — on which Pi's walk never ends — is cut at its earliest row in file order,
    which then counts as a root for path queries; the raw ``parentId`` is untouched.
    """
    last_by_id: dict[str, int] = {}
    for seq, value in entries:
        entry_id = prop(value, "id")
        if isinstance(entry_id, str):
            last_by_id[entry_id] = seq
    values = dict(entries)
    parent_of: dict[int, int | None] = {}
    problems: list[PathProblem] = []
    for seq, value in entries:
        parent_id = prop(value, "parentId")
        parent = last_by_id.get(parent_id) if truthy(parent_id) and isinstance(parent_id, str) else None
        if parent is None and truthy(parent_id):
            problems.append(PathProblem(seq, f"parentId {parent_id!r} names no entry: the path stops here"))
        parent_of[seq] = parent
    _cut_cycles(parent_of, problems)

    cols: dict[int, TreeColumns] = {}
    for seq, _value in entries:  # iterative: resolve ancestors first, without recursion
        if seq in cols:
            continue
        chain = [seq]
        while (parent := parent_of[chain[-1]]) is not None and parent not in cols:
            chain.append(parent)
        for member in reversed(chain):
            value = values[member]
            entry_id = prop(value, "id")
            parent = parent_of[member]
            cols[member] = derive_child(
                member, entry_id if isinstance(entry_id, str) else None, value,
                cols[parent] if parent is not None else None,
            )
    for seq, value in entries:
        entry_id = prop(value, "id")
        if isinstance(entry_id, str) and last_by_id[entry_id] != seq:
            cols[seq].superseded = True
            problems.append(PathProblem(seq, f"duplicate id {entry_id!r}: a later line with it wins"))
    return cols, problems


def _cut_cycles(parent_of: dict[int, int | None], problems: list[PathProblem]) -> None:
    state: dict[int, int] = {}  # 1: on the current walk, 2: done
    for start in parent_of:
        walk: list[int] = []
        node: int | None = start
        while node is not None and node not in state:
            state[node] = 1
            walk.append(node)
            node = parent_of[node]
        if node is not None and state[node] == 1:  # closed a cycle: walk[index(node):]
            cycle = walk[walk.index(node):]
            cut = min(cycle)
            parent_of[cut] = None
            problems.append(PathProblem(cut, f"parent cycle through {len(cycle)} entries: cut here"))
        for member in walk:
            state[member] = 2
