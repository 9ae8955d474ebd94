"""The part of a root→leaf path that the model's context depends on, read without loading the
whole path.

Pi's context is: the latest compaction on the path, the path entries from its
``firstKeptEntryId`` on, everything after it — plus the thinking level and model, which are the
last ones on the *whole* path. The leaf row already knows the latest compaction, thinking-level
change and model source on its path (``compaction_seq`` / ``thinking_seq`` / ``model_seq``), so
only the window from the first kept entry to the leaf is read, with those two setting entries
put in front of it when they lie before the window. The context services then see a path that
gives exactly the answers the full path would: everything before the window is dropped by the
compaction anyway, and the setting entries only feed the settings. Pi also reads the role of
every message on the path for those settings, and fails where a message is null or missing: such
rows before the window (a partial index finds them) are put in front of it as well.

Without a compaction the context *is* the whole path, which is then read in full.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from typing import Any

from sqlalchemy import Connection, select, text

from store.db import queries
from store.db.schema import entries
from store.format import js_parse
from store.format.jsvalue import map_key, prop


class PathIndex:
    """Positions of rows on a path given as runs ``(first_seq, last_seq)``, root first."""

    def __init__(self, runs: list[tuple[int, int]]) -> None:
        self.runs = runs
        self.offsets = [0, *accumulate(last - first + 1 for first, last in runs)]

    def __len__(self) -> int:
        return self.offsets[-1]

    def position(self, seq: int) -> int | None:
        """Index of row ``seq`` on the path, or None when it is not on it."""
        for index, (first, last) in enumerate(self.runs):
            if first <= seq <= last:
                return self.offsets[index] + seq - first
        return None

    def seqs_from(self, position: int) -> list[int]:
        """Row keys of the path from ``position`` to the leaf."""
        index = bisect_right(self.offsets, position) - 1
        out: list[int] = []
        for run_index in range(max(index, 0), len(self.runs)):
            first, last = self.runs[run_index]
            start = first + max(position - self.offsets[run_index], 0)
            out.extend(range(start, last + 1))
        return out


def context_path(conn: Connection, session_pk: int, leaf_seq: int | None) -> list:
    """Entries (parsed) sufficient to build the context of the path ending at ``leaf_seq``."""
    return context_rows(conn, session_pk, leaf_seq)[1]


def context_rows(conn: Connection, session_pk: int, leaf_seq: int | None) -> tuple[list[int], list]:
    """:func:`context_path`, and the row key (``seq``) of each of its entries."""
    if leaf_seq is None:
        return [], []
    leaf = queries.tree_columns_of(conn, session_pk, leaf_seq)
    if leaf is None or leaf.depth is None:
        return [], []
    if leaf.compaction_seq is None:
        rows = queries.path_rows(conn, session_pk, leaf_seq, "seq", "line")
        return [row.seq for row in rows], [js_parse(row.line) for row in rows]
    path = PathIndex(queries.path_runs(conn, session_pk, leaf_seq))
    compaction_at = path.position(leaf.compaction_seq)
    compaction = js_parse(queries.lines_at(conn, session_pk, [leaf.compaction_seq])[leaf.compaction_seq])
    start = compaction_at
    positions = [p for p in map(path.position, _rows_with_id(conn, session_pk, prop(compaction, "firstKeptEntryId")))
                 if p is not None and p < compaction_at]
    if positions:
        start = min(positions)
    window = path.seqs_from(start)
    settings = sorted(
        (position, seq) for seq in {leaf.thinking_seq, leaf.model_seq} - {None} | _without_role(conn, session_pk)
        if (position := path.position(seq)) is not None and position < start
    )
    wanted = [seq for _, seq in settings] + window
    lines = queries.lines_at(conn, session_pk, wanted)
    return wanted, [js_parse(lines[seq]) for seq in wanted]


# the session's message rows with no role (ix_entries_messages_without_role, migration 0016: the
# predicate written as the index's, so that both engines' planners use it)
_WITHOUT_ROLE = text("SELECT seq FROM entries WHERE session_pk = :spk AND type = 'message' AND role IS NULL")


def _without_role(conn: Connection, session_pk: int) -> set[int]:
    """The session's message rows whose ``message`` may be null or missing (none, unless a file
    was damaged or edited): Pi reads every path message's role for the settings, and fails on
    them, so the window is preceded by those on the path before it as by the setting entries."""
    return set(conn.execute(_WITHOUT_ROLE, {"spk": session_pk}).scalars())


def _rows_with_id(conn: Connection, session_pk: int, wanted: Any) -> list[int]:
    """The rows whose entry id is ``wanted`` (Pi compares with ``===``): a string through the
    ``entry_id`` column (``queries.seqs_with_id``); any other value on the lines of the rows
    without a string id (files no Pi wrote)."""
    if isinstance(wanted, str):
        return queries.seqs_with_id(conn, session_pk, wanted)
    c = entries.c
    if isinstance(wanted, (dict, list)):  # a parsed object is === itself alone
        return []
    key = map_key(wanted)  # === for the other JSON values (and undefined)
    rows = conn.execute(select(c.seq, c.line).where(c.session_pk == session_pk, c.kind.in_(("entry", "value")),
                                                    c.entry_id.is_(None)))
    return [seq for seq, line in rows if map_key(prop(js_parse(line), "id")) == key]
