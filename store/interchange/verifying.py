"""``verify``: a health report of stored sessions.

* **bytes** — the session is exported again and its sha256 and size compared with those of the
  imported file (sessions created through the API have none: their lines must instead be exactly
  what ``JSON.stringify`` writes for their values, ``\\n``-ended, as Pi writes them);
* **tree** — the derived columns (parent row, depth, runs, latest compaction / thinking level /
  model, superseded) are derived again from the stored lines and compared with the stored ones;
* **findings** — what Pi's reading of the tree runs into: parent ids naming no entry, duplicate
  ids, parent cycles (reported, not failures: they were in the file).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Row, select

from store.bulk import rows_naming
from store.db import queries
from store.db.engine import read_transaction
from store.db.schema import entries, sessions
from store.format import js_parse, js_stringify
from store.interchange.exporting import session_sha256
from store.loading import ENTRY, SKIPPED, VALUE
from store.tree_columns import CYCLE, DUPLICATE_ID, MISSING_PARENT, NONE, StoredTree, TreeBuilder

if TYPE_CHECKING:
    from store.session_store import SessionStore

MAX_LISTED = 20  # rows and findings listed per session (all are counted)


@dataclass(slots=True)
class Health:
    """The verification of one session (``None``: that check does not apply)."""

    session_id: str
    rows: int = 0
    entries: int = 0
    skipped: int = 0
    size: int = 0
    sha256: str = ""
    bytes_ok: bool | None = None  # export == imported file
    canonical_ok: bool | None = None  # API session: every line is Pi's JSON.stringify form
    tree_ok: bool | None = None
    tree_mismatches: int = 0
    missing_parents: int = 0
    duplicate_ids: int = 0
    cycles: int = 0
    details: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.bytes_ok is not False and self.canonical_ok is not False and self.tree_ok is not False

    def to_json(self) -> dict:
        return {
            "sessionId": self.session_id, "ok": self.ok, "rows": self.rows, "entries": self.entries,
            "skippedLines": self.skipped, "bytes": self.size, "sha256": self.sha256, "bytesMatch": self.bytes_ok,
            "canonical": self.canonical_ok, "treeMatch": self.tree_ok, "treeMismatches": self.tree_mismatches,
            "missingParents": self.missing_parents, "duplicateIds": self.duplicate_ids, "cycles": self.cycles,
            "details": self.details,
        }


def verify_session(store: SessionStore, session_id: str) -> Health:
    with read_transaction(store.engine) as conn:
        return _verify(conn, queries.stored_session(conn, session_id))


def verify_all(store: SessionStore) -> Iterator[Health]:
    with read_transaction(store.engine) as conn:
        ids = list(conn.execute(select(sessions.c.session_id).order_by(sessions.c.pk)).scalars())
    for session_id in ids:
        yield verify_session(store, session_id)


def _verify(conn: Connection, session: Row) -> Health:
    health = Health(session.session_id)
    hasher, health.size = session_sha256(conn, session.pk)  # the bytes export writes, re-read on purpose
    health.sha256 = hasher.hexdigest()
    if session.source_sha256 is not None:
        health.bytes_ok = health.sha256 == session.source_sha256 and health.size == session.source_bytes
        if not health.bytes_ok:
            health.details.append(f"export: {health.size} bytes, sha256 {health.sha256}; imported: "
                                  f"{session.source_bytes} bytes, sha256 {session.source_sha256}")
    else:
        health.canonical_ok = True
    tree = TreeBuilder() if session.pi_valid else None
    stored = [array("i") for _ in range(6)]
    superseded = bytearray()
    c = entries.c
    stmt = (select(c.seq, c.kind, c.line, c.raw, c.eol, c.parent_seq, c.depth, c.run_start, c.compaction_seq,
                   c.thinking_seq, c.model_seq, c.superseded)
            .where(c.session_pk == session.pk).order_by(c.seq))
    for seq, kind, line, raw, eol, *columns, is_superseded in conn.execute(stmt):
        health.rows += 1
        for column, cell in zip(stored, columns, strict=True):
            column.append(NONE if cell is None else cell)
        superseded.append(bool(is_superseded))
        if kind == SKIPPED:
            health.skipped += 1
        value = js_parse(line) if kind != SKIPPED else None
        if health.canonical_ok and kind != SKIPPED and (js_stringify(value) != line or raw is not None or eol != "\n"):
            health.canonical_ok = False
            health.details.append(f"line {seq + 1}: not what JSON.stringify writes for its value")
        if kind in (ENTRY, VALUE):
            health.entries += 1
            if tree is not None:
                tree.add(seq, value)
        elif tree is not None:
            tree.skip()
    if tree is not None:
        _check_tree(conn, session.pk, tree, stored, superseded, health)
    return health


def _check_tree(conn: Connection, session_pk: int, tree: TreeBuilder, stored: list[array], superseded: bytearray,
                health: Health) -> None:
    ids = tree.ids
    outcome = tree.outcome()
    derived = StoredTree(zip(tree.flags, tree.parent, tree.depth, tree.run, tree.compaction, tree.thinking,
                             tree.model, strict=True))
    if outcome.late_ids:
        derived.relink({seq: ids.get(parent_id) for seq, parent_id, _ in rows_naming(conn, session_pk,
                                                                                      outcome.late_ids)})
    expected_superseded = set(outcome.superseded)
    mismatched = []
    for seq in range(len(derived.flags)):
        mine = (derived.parent[seq], derived.depth[seq], derived.run[seq], derived.compaction[seq],
                derived.thinking[seq], derived.model[seq])
        theirs = tuple(column[seq] for column in stored)
        if (derived.flags[seq] and mine != theirs) or superseded[seq] != (seq in expected_superseded):
            mismatched.append(seq)
    health.tree_ok = not mismatched
    health.tree_mismatches = len(mismatched)
    if mismatched:
        health.details.append("stored tree columns differ from the lines at line(s) "
                              + ", ".join(str(seq + 1) for seq in mismatched[:MAX_LISTED]))
    problems = sorted(outcome.problems + derived.problems, key=lambda p: p.seq)
    health.missing_parents = sum(p.kind == MISSING_PARENT for p in problems)
    health.duplicate_ids = sum(p.kind == DUPLICATE_ID for p in problems)
    health.cycles = sum(p.kind == CYCLE for p in problems)
    health.details += [f"line {p.seq + 1}: {p.reason}" for p in problems[:MAX_LISTED]]
