"""The derived tree columns of entry rows (see ``store.db.schema``): parent row, depth, runs,
latest compaction / thinking level / model source on the path, superseded duplicates.

``derive_child`` gives them for one row appended under a known parent, which is all an append
needs. :class:`TreeBuilder` gives them for a file streamed in order (an import): it keeps a few
integers per row, not the rows, and settles the rare links that point forward — a ``parentId``
whose entry comes later, a duplicate id that moves Pi's lookup to a later row, a parent cycle —
in a second step that changes only the rows concerned.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from store.format.jsjson import js_number
from store.format.jsvalue import map_key, prop, truthy

IdKey = str | tuple[str, Any]
"""An entry id as Pi's ``byId`` Map tells ids apart (:func:`id_key`)."""


def id_key(value: Any) -> IdKey | None:
    """The key under which a ``parentId`` finds an entry whose id is ``value`` in Pi's ``byId``: a
    string id is its own key; a non-zero number or ``true`` has its ``map_key`` (JSON ``1`` and
    ``1.0`` are one key, the string ``"1"`` another). None for ids that no truthy ``parentId`` can
    equal: missing, null, false, 0, an object or array (each parsed object is a value of its own)."""
    if value.__class__ is str:
        return value
    if value is True or (value.__class__ in (int, float) and value != 0):
        return map_key(value)
    return None


def id_text(key: IdKey) -> str:
    """``key`` for a message: a string id quoted, another id as its JSON."""
    if key.__class__ is str:
        return repr(key)
    return "true" if key[1] is True else js_number(key[1])


@dataclass(slots=True)
class TreeColumns:
    """Derived columns of one entry row (``entry_id``: its :func:`id_key`)."""

    seq: int
    entry_id: IdKey | None
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
    kind: str  # MISSING_PARENT, DUPLICATE_ID or CYCLE
    reason: str


MISSING_PARENT, DUPLICATE_ID, CYCLE = "missing parent", "duplicate id", "cycle"


TREE, COMPACTION, THINKING, MODEL = 1, 2, 4, 8  # row flags


def setting_flags(entry_type: Any, role: Any) -> int:
    """The setting a tree row of this type (and message role) sets: ``COMPACTION``, ``THINKING``,
    ``MODEL`` (a model change or an assistant message), or 0."""
    if entry_type == "compaction":
        return COMPACTION
    if entry_type == "thinking_level_change":
        return THINKING
    if entry_type == "model_change" or (entry_type == "message" and role == "assistant"):
        return MODEL
    return 0


def derive_child(seq: int, entry_id: IdKey | None, value: Any, parent: TreeColumns | None) -> TreeColumns:
    """Columns of a row appended at ``seq`` whose parent row is ``parent`` (None: a new root)."""
    flags = setting_flags(value.get("type"), prop(value.get("message"), "role")) if isinstance(value, dict) else 0
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
    if flags == COMPACTION:
        cols.compaction_seq = seq
    elif flags == THINKING:
        cols.thinking_seq = seq
    elif flags == MODEL:
        cols.model_seq = seq
    return cols


# ---------------------------------------------------------------------------------------------
# streaming a whole file

NONE = -1  # no row
_HEX = "0123456789abcdef"
_GOLDEN = 0x9E3779B97F4A7C15  # Fibonacci hashing: the top bits of key * 2**64 / phi
_MASK64 = 2**64 - 1


class IdIndex:
    """Entry id → row, in 8 bytes a slot for Pi's 8-hex-digit ids (an open-addressing table of
    two arrays, the id packed into its 32-bit value; at most 3/4 full); other ids go to a dict."""

    __slots__ = ("_keys", "_other", "_rows", "_shift", "_used")

    def __init__(self) -> None:
        self._shift = 64 - 10
        self._keys = array("I", [0]) * 1024
        self._rows = array("i", [NONE]) * 1024  # NONE: the slot is free
        self._used = 0
        self._other: dict[IdKey, int] = {}

    def __len__(self) -> int:
        return self._used + len(self._other)

    def _slot(self, key: int) -> int:
        keys, rows = self._keys, self._rows
        mask = len(keys) - 1
        slot = ((key * _GOLDEN) & _MASK64) >> self._shift
        while rows[slot] != NONE and keys[slot] != key:
            slot = (slot + 1) & mask
        return slot

    def get(self, entry_id: IdKey) -> int:
        """The row stored for ``entry_id``, or ``NONE``."""
        if len(entry_id) != 8 or entry_id.strip(_HEX):  # (a map_key tuple has 2 items: the dict)
            return self._other.get(entry_id, NONE)
        key = int(entry_id, 16)
        keys, rows = self._keys, self._rows
        slot = ((key * _GOLDEN) & _MASK64) >> self._shift
        while (row := rows[slot]) != NONE and keys[slot] != key:
            slot = (slot + 1) & (len(keys) - 1)
        return row

    def put(self, entry_id: IdKey, row: int) -> int:
        """Store ``row`` (≥ 0) for ``entry_id``; returns the row it replaces, or ``NONE``."""
        if len(entry_id) != 8 or entry_id.strip(_HEX):  # (a map_key tuple has 2 items: the dict)
            previous = self._other.get(entry_id, NONE)
            self._other[entry_id] = row
            return previous
        key = int(entry_id, 16)
        slot = self._slot(key)
        previous = self._rows[slot]
        self._rows[slot] = row
        if previous == NONE:
            self._keys[slot] = key
            self._used += 1
            if self._used * 4 > len(self._keys) * 3:
                self._grow()
        return previous

    def _grow(self) -> None:
        keys, rows = self._keys, self._rows
        self._shift -= 1
        self._keys = array("I", [0]) * (2 * len(keys))
        self._rows = array("i", [NONE]) * (2 * len(keys))
        new_keys, new_rows, shift = self._keys, self._rows, self._shift
        mask = len(new_keys) - 1
        for key, row in zip(keys, rows, strict=True):
            if row != NONE:
                slot = ((key * _GOLDEN) & _MASK64) >> shift
                while new_rows[slot] != NONE:
                    slot = (slot + 1) & mask
                new_keys[slot] = key
                new_rows[slot] = row


@dataclass(slots=True)
class StoredRows:
    """Rows of the session stored before this import that its new rows name (appends): filled
    by the writer, a chunk of rows at a time, before the rows are added to the builder."""

    ids: dict[IdKey, int] = field(default_factory=dict)  # entry id → its last stored row (NONE: none)
    columns: dict[int, TreeColumns] = field(default_factory=dict)


class TreeBuilder:
    """The derived columns of rows streamed in file order, starting at row ``first_seq``.

    :meth:`add` resolves a row's parent the way Pi's ``byId`` would *so far* (the last earlier
    row with that id); that is final unless the id is (re)defined later. Such ids are collected
    in ``late_ids``; once the rows are stored, the rows naming them are looked up in the
    database and relinked (:class:`StoredTree`). Per row it keeps 25 bytes, plus about 16 per
    id (:class:`IdIndex`).
    """

    def __init__(self, first_seq: int = 0, stored: StoredRows | None = None) -> None:
        self.first_seq = first_seq
        self.stored = stored
        self.ids = IdIndex()
        self.parent = array("i")
        self.depth = array("i")
        self.run = array("i")
        self.compaction = array("i")
        self.thinking = array("i")
        self.model = array("i")
        self.flags = bytearray()
        self.problems: list[PathProblem] = []
        self.superseded: list[int] = []  # rows that a later row with their id superseded
        self.late_ids: set[IdKey] = set()  # ids defined at or after a row that names them
        self.unresolved: dict[IdKey, list[int]] = {}  # parent ids not defined (yet) → rows naming them
        self._last_id: IdKey | None = None  # the id defined last, at row _last_seq
        self._last_seq = NONE

    def skip(self) -> None:
        """The next row is no tree row (header, skipped line, second header)."""
        for column in (self.parent, self.depth, self.run, self.compaction, self.thinking, self.model):
            column.append(NONE)
        self.flags.append(0)

    def row_of(self, entry_id: IdKey) -> int:
        """The last row so far with ``entry_id`` (new rows first, then stored ones), or ``NONE``."""
        row = self.ids.get(entry_id)
        if row == NONE and self.stored is not None:
            row = self.stored.ids.get(entry_id, NONE)
        return row

    def add(self, seq: int, value: Any) -> TreeColumns:
        """Columns of the tree row ``seq`` (an entry or a non-object value), provisionally final."""
        entry_id = parent_id = kind = None
        if value.__class__ is dict:
            entry_id = value.get("id")
            parent_id = value.get("parentId")
            kind = value.get("type")
            if entry_id.__class__ is not str:
                entry_id = id_key(entry_id)
            if parent_id.__class__ is not str and parent_id is not None:
                key = id_key(parent_id)
                if key is None and truthy(parent_id):  # an object or array: never an entry's id
                    self.problems.append(PathProblem(seq, MISSING_PARENT, "parentId names no entry (it is an "
                                                     "object or array): the path stops here"))
                parent_id = key
        parent = NONE
        if parent_id:
            if parent_id == self._last_id and parent_id != entry_id:
                parent = self._last_seq  # a linear history: the row just added, no lookup
            else:
                parent = self.row_of(parent_id)
                if parent == NONE:
                    self.unresolved.setdefault(parent_id, []).append(seq)
                if parent_id == entry_id:  # names itself: Pi's lookup may end at this very row
                    self.late_ids.add(parent_id)
        if parent == NONE:
            depth, run, compaction, thinking, model = 0, seq, NONE, NONE, NONE
        elif parent >= self.first_seq:
            at = parent - self.first_seq
            depth = self.depth[at] + 1
            run = self.run[at] if parent == seq - 1 else seq
            compaction, thinking, model = self.compaction[at], self.thinking[at], self.model[at]
        else:
            above = self.stored.columns[parent]  # type: ignore[union-attr]
            depth = above.depth + 1
            run = above.run_start if parent == seq - 1 else seq
            compaction, thinking, model = (_row(above.compaction_seq), _row(above.thinking_seq),
                                           _row(above.model_seq))
        flags = TREE
        if kind == "message":  # setting_flags, inlined: this runs once per row of every import
            message = value.get("message")
            if message.__class__ is dict and message.get("role") == "assistant":
                model, flags = seq, TREE | MODEL
        elif kind == "compaction":
            compaction, flags = seq, TREE | COMPACTION
        elif kind == "thinking_level_change":
            thinking, flags = seq, TREE | THINKING
        elif kind == "model_change":
            model, flags = seq, TREE | MODEL
        self.parent.append(parent)
        self.depth.append(depth)
        self.run.append(run)
        self.compaction.append(compaction)
        self.thinking.append(thinking)
        self.model.append(model)
        self.flags.append(flags)
        if entry_id is not None:
            self._last_id, self._last_seq = entry_id, seq
            previous = self.ids.put(entry_id, seq)
            if previous == NONE and self.stored is not None:
                previous = self.stored.ids.get(entry_id, NONE)
            if previous != NONE:
                self.superseded.append(previous)
                self.problems.append(PathProblem(previous, DUPLICATE_ID,
                                                 f"duplicate id {id_text(entry_id)}: a later line with it wins"))
                self.late_ids.add(entry_id)
            elif entry_id in self.unresolved:
                self.late_ids.add(entry_id)
        return TreeColumns(seq, entry_id, None if parent == NONE else parent, depth, run,
                           None if compaction == NONE else compaction, None if thinking == NONE else thinking,
                           None if model == NONE else model)

    def _missing_parents(self) -> None:
        """Report the rows whose parent id no row carries (once every row is added)."""
        unresolved, self.unresolved = self.unresolved, {}
        for parent_id, rows in unresolved.items():
            if self.row_of(parent_id) == NONE:
                self.problems.extend(
                    PathProblem(seq, MISSING_PARENT,
                            f"parentId {id_text(parent_id)} names no entry: the path stops here")
                    for seq in rows
                )

    def outcome(self) -> TreeOutcome:
        """What the database side needs once every row is added (the per-row arrays stay here)."""
        self._missing_parents()
        return TreeOutcome(self.problems, self.superseded, self.late_ids)


@dataclass(slots=True)
class TreeOutcome:
    """The end of a :class:`TreeBuilder` run: problems to report, rows to mark superseded, and
    the ids whose namers must be relinked (see :class:`StoredTree`)."""

    problems: list[PathProblem]
    superseded: list[int]
    late_ids: set[IdKey]


class StoredTree:
    """The tree columns of a whole stored session, loaded to settle late links (rare: a
    ``parentId`` naming a later line, or a duplicate id moving Pi's lookup to a later row).

    ``rows``: ``(flags, parent, depth, run, compaction, thinking, model)`` of every row from row 0,
    in order (``NONE`` for no value).
    """

    def __init__(self, rows: Iterable[tuple[int, int, int, int, int, int, int]]) -> None:
        self.flags = bytearray()
        self.parent, self.depth, self.run = array("i"), array("i"), array("i")
        self.compaction, self.thinking, self.model = array("i"), array("i"), array("i")
        columns = (self.parent, self.depth, self.run, self.compaction, self.thinking, self.model)
        for row in rows:
            self.flags.append(row[0])
            for column, cell in zip(columns, row[1:], strict=True):
                column.append(cell)
        self.problems: list[PathProblem] = []

    def relink(self, parents: dict[int, int]) -> list[TreeColumns]:
        """Give rows their final parents (``parents``: row → parent row or ``NONE``), cut the
        parent cycles this closes (at their earliest row, whose path then starts there) and
        re-derive all columns; returns the columns of every row that changed."""
        relinked = {seq for seq, parent in parents.items() if self.parent[seq] != parent}
        for seq, parent in parents.items():
            self.parent[seq] = parent
        relinked |= self._cut_cycles(sorted(parents))
        changed = self._rederive() | relinked
        return [self.columns(seq) for seq in sorted(changed)]

    def columns(self, seq: int) -> TreeColumns:
        return TreeColumns(seq, None, _opt(self.parent[seq]), self.depth[seq], self.run[seq],
                           _opt(self.compaction[seq]), _opt(self.thinking[seq]), _opt(self.model[seq]))

    def _cut_cycles(self, starts: list[int]) -> set[int]:
        """Only links in ``starts`` can close a cycle (every other row's parent comes before it)."""
        parent = self.parent
        state = bytearray(len(parent))  # 1: on the current walk, 2: done
        cut_rows: set[int] = set()
        for start in starts:
            walk = array("i")
            node = start
            while node != NONE and not state[node]:
                state[node] = 1
                walk.append(node)
                node = parent[node]
            if node != NONE and state[node] == 1:
                cycle = walk[walk.index(node):]
                cut = min(cycle)
                parent[cut] = NONE
                cut_rows.add(cut)
                self.problems.append(PathProblem(cut, CYCLE, f"parent cycle through {len(cycle)} entries: cut here"))
            for member in walk:
                state[member] = 2
        return cut_rows

    def _rederive(self) -> set[int]:
        parent, depth, run, flags = self.parent, self.depth, self.run, self.flags
        compaction, thinking, model = self.compaction, self.thinking, self.model
        done = bytearray(len(flags))
        changed: set[int] = set()
        for seq in range(len(flags)):
            if done[seq] or not flags[seq] & TREE:
                continue
            chain = [seq]
            above = parent[seq]
            while above != NONE and not done[above]:
                chain.append(above)
                above = parent[above]
            for row in reversed(chain):
                above = parent[row]
                if above == NONE:
                    new = [0, row, NONE, NONE, NONE]
                else:
                    new = [depth[above] + 1, run[above] if above == row - 1 else row,
                           compaction[above], thinking[above], model[above]]
                bits = flags[row]
                if bits & COMPACTION:
                    new[2] = row
                if bits & THINKING:
                    new[3] = row
                if bits & MODEL:
                    new[4] = row
                if new != [depth[row], run[row], compaction[row], thinking[row], model[row]]:
                    depth[row], run[row], compaction[row], thinking[row], model[row] = new
                    changed.add(row)
                done[row] = 1
        return changed


def _opt(row: int) -> int | None:
    return None if row == NONE else row


def _row(seq: int | None) -> int:
    return NONE if seq is None else seq
