"""``SessionManager``: Pi's session API (snake_case) over one session's rows.

A manager holds only the session's identity and its leaf; every answer comes from the database.
Until a persistent session holds a user or assistant message it lives in a private in-memory
SQLite database (Pi writes no file until then); the first such message copies it, together with
that message, into the store in one transaction. ``SessionStore.in_memory`` sessions never leave
the private database. All writes go through :class:`_Pending`: appended entries are buffered,
then committed in one write transaction that allocates their rows; when anything fails nothing
is stored and the manager keeps its previous leaf.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, bindparam, select

from store import new_entries
from store.db import queries
from store.db.engine import read_transaction, write_transaction
from store.db.schema import entries as entries_table
from store.db.writes import advance_session, entry_row, insert_rows, insert_session
from store.errors import EntryNotFound, InvalidEntry, NotEditable, NotOnActiveBranch, SessionExists, StoreError
from store.format import js_parse, js_stringify
from store.format.jsvalue import prop
from store.listing import ListingState, trimmed_session_name
from store.tree import TreeNode, build_tree, resolve_labels
from store.tree_columns import TreeColumns, derive_child

if TYPE_CHECKING:
    from store.session_store import SessionStore

EDITABLE_ROLES = ("user", "assistant", "toolResult")


@dataclass(slots=True)
class _PendingEntry:
    entry: dict
    line: str
    parent: TreeColumns | int | None  # a stored row, an earlier pending entry (index), or a root


@dataclass(slots=True)
class _Pending:
    base_leaf: TreeColumns | None
    base_leaf_id: str | None
    leaf_ref: TreeColumns | int | None  # the leaf: a stored row or a pending entry (index)
    items: list[_PendingEntry] = field(default_factory=list)

    def ids(self) -> set[str]:
        return {item.entry["id"] for item in self.items}


def _is_conversation(entry: dict) -> bool:
    return entry.get("type") == "message" and prop(entry.get("message"), "role") in ("user", "assistant")


class SessionManager:
    """One session: append entries, move the leaf, read the tree (Pi's ``SessionManager``)."""

    def __init__(self, store: SessionStore, engine: Engine, session_pk: int, *, persist: bool,
                 flushed: bool) -> None:
        self._store = store
        self._engine = engine
        self._spk = session_pk
        self._persist = persist
        self._flushed = flushed
        self._pending: _Pending | None = None
        self._load_identity()

    def _load_identity(self) -> None:
        with read_transaction(self._engine) as conn:
            row = queries.session_by_pk(conn, self._spk)
            self.session_id: str = row.session_id
            self.cwd: str = row.cwd
            self._header_seq: int | None = row.header_seq
            self._leaf_id: str | None = None
            self._leaf: TreeColumns | None = None
            if row.leaf_seq is not None:
                self._set_leaf_from_seq(conn, row.leaf_seq)

    def _set_leaf_from_seq(self, conn, seq: int) -> None:
        cols = queries.tree_columns_of(conn, self._spk, seq)
        if cols is None or cols.depth is None or cols.entry_id is None:
            self._leaf, self._leaf_id = None, None
            return
        self._leaf = TreeColumns(
            cols.seq, cols.entry_id, cols.parent_seq, cols.depth, cols.run_start,
            cols.compaction_seq, cols.thinking_seq, cols.model_seq,
        )
        self._leaf_id = cols.entry_id

    def close(self) -> None:
        """Release a private (not yet stored or in-memory) session's database."""
        if self._engine is not self._store.engine:
            self._engine.dispose()

    # ------------------------------------------------------------------ identity
    def is_persisted(self) -> bool:
        return self._persist

    def get_session_id(self) -> str:
        return self.session_id

    def get_cwd(self) -> str:
        return self.cwd

    # ------------------------------------------------------------------ writing
    @contextmanager
    def batch(self) -> Iterator[SessionManager]:
        """Buffer the appends made inside the block and commit them in one transaction.

        Inside the block only ``append_*``, ``branch_with_summary`` and ``get_leaf_id`` see the
        buffered entries; if the block raises, nothing of it is stored and the leaf is restored.
        """
        if self._pending is not None:
            yield self
            return
        self._pending = _Pending(self._leaf, self._leaf_id, self._leaf)
        try:
            yield self
        except BaseException:
            pending, self._pending = self._pending, None
            self._leaf, self._leaf_id = pending.base_leaf, pending.base_leaf_id
            raise
        pending, self._pending = self._pending, None
        try:
            self._commit(pending)
        except BaseException:
            self._leaf, self._leaf_id = pending.base_leaf, pending.base_leaf_id
            raise

    def _append(self, build: Callable[[str, str | None, str], dict], parent: str | None | bool = False) -> dict:
        """Create an entry under the leaf (or under ``parent`` when given) and make it the leaf."""
        with self.batch():
            pending = self._pending
            assert pending is not None
            if parent is False:
                parent_ref, parent_id = pending.leaf_ref, self._leaf_id
            else:
                parent_id = parent  # type: ignore[assignment]
                parent_ref = self._resolve_parent(parent_id)
            entry = build(self._new_id(), parent_id, self._now())
            pending.items.append(_PendingEntry(entry, js_stringify(entry), parent_ref))
            pending.leaf_ref = len(pending.items) - 1
            self._leaf_id = entry["id"]
        return entry

    def _resolve_parent(self, entry_id: str | None) -> TreeColumns | int | None:
        if entry_id is None:
            return None
        pending = self._pending
        if pending is not None:
            for index in range(len(pending.items) - 1, -1, -1):
                if pending.items[index].entry["id"] == entry_id:
                    return index
        with read_transaction(self._engine) as conn:
            seq = queries.seq_of(conn, self._spk, entry_id)
            cols = queries.tree_columns_of(conn, self._spk, seq) if seq is not None else None
        if cols is None:
            raise EntryNotFound(f"Entry {entry_id} not found")
        return TreeColumns(cols.seq, cols.entry_id, cols.parent_seq, cols.depth, cols.run_start,
                           cols.compaction_seq, cols.thinking_seq, cols.model_seq)

    def _new_id(self) -> str:
        taken = self._pending.ids() if self._pending is not None else set()
        with read_transaction(self._engine) as conn:
            for _ in range(100):
                candidate = new_entries.short_id()
                if candidate not in taken and not queries.id_exists(conn, self._spk, candidate):
                    return candidate
        return new_entries.long_id()

    def _now(self) -> str:
        return new_entries.now_iso(self._store.clock())

    def _commit(self, pending: _Pending) -> None:
        if not pending.items:
            return
        flush = (
            self._persist and not self._flushed
            and any(_is_conversation(item.entry) for item in pending.items)
        )
        engine = self._store.engine if flush else self._engine
        with write_transaction(engine) as conn:
            spk = self._copy_out(conn) if flush else self._spk
            clash = self._existing_ids(conn, spk, pending.ids())
            if clash:
                raise StoreError(f"entry id {sorted(clash)[0]} was taken by a concurrent writer; retry")
            listing = ListingState(texts=None)
            for item in pending.items:
                listing.add(item.entry)
            names = [item.entry for item in pending.items if item.entry.get("type") == "session_info"]
            last = advance_session(
                conn, spk, len(pending.items), len(pending.items), leaf=True,
                messages=listing.message_count, activity_ms=listing.last_activity_ms,
                first_message=listing.first_message or None,
                name=(trimmed_session_name(names[-1]),) if names else None,
                conversation=any(_is_conversation(item.entry) for item in pending.items),
                listable=listing.pi_listable,
            )
            first_seq = last - len(pending.items) + 1
            rows, cols_of = [], []
            for offset, item in enumerate(pending.items):
                parent = cols_of[item.parent] if isinstance(item.parent, int) else item.parent
                cols = derive_child(first_seq + offset, item.entry["id"], item.entry, parent)
                cols_of.append(cols)
                rows.append(entry_row(spk, cols.seq, "entry", item.entry, item.line, cols))
            insert_rows(conn, rows)
        if flush:
            self._engine.dispose()
            self._engine, self._spk, self._flushed = self._store.engine, spk, True
        self._leaf = cols_of[pending.leaf_ref] if isinstance(pending.leaf_ref, int) else pending.leaf_ref

    @staticmethod
    def _existing_ids(conn, spk: int, ids: set[str]) -> set[str]:
        stmt = select(entries_table.c.entry_id).where(
            entries_table.c.session_pk == spk, entries_table.c.entry_id.in_(bindparam("ids", expanding=True))
        )
        return set(conn.execute(stmt, {"ids": sorted(ids)}).scalars())

    def _copy_out(self, conn) -> int:
        """Copy this (so far private) session into the store inside ``conn``'s transaction."""
        with read_transaction(self._engine) as private:
            session = queries.session_by_pk(private, self._spk)._asdict()
            rows = [row._asdict() for row in private.execute(
                select(entries_table).where(entries_table.c.session_pk == self._spk).order_by(entries_table.c.seq)
            )]
        if queries.session_by_id(conn, session["session_id"]) is not None:
            raise SessionExists(f"session {session['session_id']} already exists in the store")
        session.pop("pk")
        spk = insert_session(conn, **session)
        for row in rows:
            row.pop("pk")
            row["session_pk"] = spk
        insert_rows(conn, rows)
        return spk

    # ------------------------------------------------------------------ append_*
    def append_message(self, message: Any) -> str:
        """Append a message (a dict or a ``store.format.models`` message) under the leaf."""
        msg = _as_dict(message)
        if not isinstance(msg.get("role"), str):
            raise InvalidEntry("a message needs a string 'role'")
        return self._append(lambda i, p, t: new_entries.message(i, p, t, msg))["id"]

    def append_thinking_level_change(self, thinking_level: str) -> str:
        return self._append(lambda i, p, t: new_entries.thinking_level_change(i, p, t, thinking_level))["id"]

    def append_model_change(self, provider: str, model_id: str) -> str:
        return self._append(lambda i, p, t: new_entries.model_change(i, p, t, provider, model_id))["id"]

    def append_usage(self, kind: str, provider: str, model: str, usage: dict, note: str | None = None) -> dict:
        """Append model-attributed usage outside the LLM context; returns the entry (as Pi does)."""
        return self._append(lambda i, p, t: new_entries.usage(i, p, t, kind, provider, model, usage, note))

    def append_compaction(self, summary: str, first_kept_entry_id: str | None, tokens_before: int,
                          details: Any = None, from_hook: bool | None = None, usage: Any = None,
                          system_message: dict | None = None) -> str:
        """Append a compaction; ``first_kept_entry_id=None`` keeps nothing (stores the entry's own id).

        ``system_message`` is the replayed system checkpoint to store with it (the context
        services compute it from the current projection).
        """
        return self._append(lambda i, p, t: new_entries.compaction(
            i, p, t, summary, first_kept_entry_id, tokens_before, details, from_hook, usage, system_message,
        ))["id"]

    def append_custom_entry(self, custom_type: str, data: Any = None) -> str:
        return self._append(lambda i, p, t: new_entries.custom(i, p, t, custom_type, data))["id"]

    def append_session_info(self, name: str) -> str:
        return self._append(lambda i, p, t: new_entries.session_info(i, p, t, name))["id"]

    def append_custom_message_entry(self, custom_type: str, content: Any, display: bool,
                                    details: Any = None) -> str:
        return self._append(lambda i, p, t: new_entries.custom_message(
            i, p, t, custom_type, content, display, details))["id"]

    def append_label_change(self, target_id: str, label: str | None) -> str:
        """Set (or, with None / "", clear) the label of an existing entry."""
        self._require_entry(target_id)
        return self._append(lambda i, p, t: new_entries.label(i, p, t, target_id, label))["id"]

    def append_context_edit(self, target_id: str, replacement: dict | None) -> str:
        """Replace (``{"content": ...}``) or hide (None) an earlier entry's model-visible content."""
        new_entries.check_replacement(replacement)
        target = self._require_entry(target_id)
        if target_id not in self._active_branch_ids():
            raise NotOnActiveBranch(f"Entry {target_id} is not on the active branch")
        role = prop(target.get("message"), "role") if target.get("type") == "message" else None
        if not (target.get("type") == "custom_message" or role in EDITABLE_ROLES):
            raise NotEditable(f"Entry {target_id} does not contribute editable model content")
        if replacement is not None and role in ("assistant", "toolResult") and isinstance(replacement["content"], str):
            replacement = {"content": [{"type": "text", "text": replacement["content"]}]}
        return self._append(lambda i, p, t: new_entries.context_edit(i, p, t, target_id, replacement))["id"]

    def _require_entry(self, entry_id: str) -> dict:
        if self._pending is not None:
            for item in reversed(self._pending.items):
                if item.entry["id"] == entry_id:
                    return item.entry
        entry = self.get_entry(entry_id)
        if entry is None:
            raise EntryNotFound(f"Entry {entry_id} not found")
        return entry

    def _active_branch_ids(self) -> set:
        ids: set = set()
        leaf_id = self._leaf_id
        pending = self._pending
        if pending is not None and pending.items:
            # walk the pending chain back to the stored row it hangs from
            index: int | None = next(
                (i for i in range(len(pending.items) - 1, -1, -1) if pending.items[i].entry["id"] == leaf_id), None
            )
            stored: TreeColumns | None = None
            while index is not None:
                item = pending.items[index]
                ids.add(item.entry["id"])
                if isinstance(item.parent, int):
                    index = item.parent
                else:
                    stored, index = item.parent, None
            leaf_seq = stored.seq if stored is not None else None
        else:
            leaf_seq = self._leaf.seq if self._leaf is not None else None
        with read_transaction(self._engine) as conn:
            ids.update(row.entry_id for row in queries.path_rows(conn, self._spk, leaf_seq, "entry_id"))
        return ids

    # ------------------------------------------------------------------ leaf movement
    def branch(self, branch_from_id: str) -> None:
        """Move the leaf to an existing entry (writes nothing)."""
        self._no_pending("branch")
        with read_transaction(self._engine) as conn:
            seq = queries.seq_of(conn, self._spk, branch_from_id)
            if seq is None:
                raise EntryNotFound(f"Entry {branch_from_id} not found")
            self._set_leaf_from_seq(conn, seq)

    def reset_leaf(self) -> None:
        """Set the leaf to none: the next append starts a new root."""
        self._no_pending("reset_leaf")
        self._leaf, self._leaf_id = None, None

    def branch_with_summary(self, branch_from_id: str | None, summary: str, details: Any = None,
                            from_hook: bool | None = None, usage: Any = None) -> str:
        """Move the leaf to ``branch_from_id`` and append a branch summary of the path left behind."""
        from_id = self._leaf_id if self._leaf_id is not None else "root"
        if branch_from_id is not None:
            self._resolve_parent(branch_from_id)  # raises EntryNotFound
        return self._append(
            lambda i, p, t: new_entries.branch_summary(i, p, t, from_id, summary, details, usage, from_hook),
            parent=branch_from_id,
        )["id"]

    def _no_pending(self, what: str) -> None:
        if self._pending is not None:
            raise StoreError(f"{what}() is not available inside batch(): commit the batch first")

    # ------------------------------------------------------------------ reading
    def get_leaf_id(self) -> str | None:
        return self._leaf_id

    def _leaf_seq(self) -> int | None:
        self._no_pending("reading the path")
        return self._leaf.seq if self._leaf is not None else None

    def get_leaf_entry(self) -> dict | None:
        return self.get_entry(self._leaf_id) if self._leaf_id is not None else None

    def get_entry(self, entry_id: str) -> dict | None:
        with read_transaction(self._engine) as conn:
            seq = queries.seq_of(conn, self._spk, entry_id)
            lines = queries.lines_at(conn, self._spk, [seq]) if seq is not None else {}
        return js_parse(lines[seq]) if lines else None

    def get_branch(self, from_id: str | None = None) -> list:
        """Entries from the root to ``from_id`` (default: the leaf), root first."""
        with read_transaction(self._engine) as conn:
            if from_id is None:
                seq = self._leaf_seq()
            else:
                seq = queries.seq_of(conn, self._spk, from_id)
            return [js_parse(row.line) for row in queries.path_rows(conn, self._spk, seq, "line")]

    def get_branch_ids(self, from_id: str | None = None) -> list[str | None]:
        """Ids of :meth:`get_branch` without parsing any payload."""
        with read_transaction(self._engine) as conn:
            seq = self._leaf_seq() if from_id is None else queries.seq_of(conn, self._spk, from_id)
            return [row.entry_id for row in queries.path_rows(conn, self._spk, seq, "entry_id")]

    def get_children(self, parent_id: str) -> list[dict]:
        with read_transaction(self._engine) as conn:
            return [js_parse(line) for line in queries.child_lines(conn, self._spk, parent_id)]

    def get_label(self, entry_id: str) -> str | None:
        with read_transaction(self._engine) as conn:
            line = queries.last_label_line(conn, self._spk, entry_id)
        if line is None:
            return None
        label = prop(js_parse(line), "label")
        return label if isinstance(label, str) and label else None

    def get_session_name(self) -> str | None:
        """The latest ``session_info`` name in file order, trimmed (blank clears it)."""
        with read_transaction(self._engine) as conn:
            line = queries.last_line_of_type(conn, self._spk, "session_info")
        return trimmed_session_name(js_parse(line)) if line is not None else None

    def get_header(self) -> dict | None:
        if self._header_seq is None:
            return None
        with read_transaction(self._engine) as conn:
            return js_parse(queries.lines_at(conn, self._spk, [self._header_seq])[self._header_seq])

    def get_entries(self) -> list:
        """All entries in file order (everything Pi keeps after the header, duplicates included)."""
        with read_transaction(self._engine) as conn:
            return [js_parse(row.line) for row in conn.execute(
                select(entries_table.c.line)
                .where(entries_table.c.session_pk == self._spk, entries_table.c.kind.in_(("entry", "value")))
                .order_by(entries_table.c.seq)
            )]

    def get_tree(self) -> list[TreeNode]:
        return build_tree(self.get_entries())

    # ------------------------------------------------------------------ new sessions from this one
    def create_branched_session(self, leaf_id: str) -> str:
        """Make this manager a new session holding only root→``leaf_id`` (labels re-emitted at the
        end); returns the new session id. Its parent session is this one."""
        path = self.get_branch(leaf_id)
        if not path:
            raise EntryNotFound(f"Entry {leaf_id} not found")
        kept: list[dict] = []
        replaced_label: dict[str, str] = {}
        waiting_labels: list[str] = []
        parent_id = None
        for entry in path:
            if entry.get("type") == "label":
                waiting_labels.append(entry["id"])
                continue
            for label_id in waiting_labels:
                replaced_label[label_id] = entry["id"]
            waiting_labels.clear()
            copy = dict(entry)
            copy["parentId"] = parent_id
            if entry.get("type") == "compaction":
                first_kept = entry.get("firstKeptEntryId")
                copy["firstKeptEntryId"] = (
                    first_kept if first_kept == entry["id"] else replaced_label.get(first_kept, first_kept)
                )
            kept.append(copy)
            parent_id = entry["id"]
        labels, stamps = resolve_labels(self.get_entries())
        kept_ids = {entry["id"] for entry in kept}
        tail = kept[-1]["id"] if kept else None
        label_entries = []
        for key, text in labels.items():
            target = key[1] if key[0] == "string" else None
            if target not in kept_ids:
                continue
            label_id = _fresh_id(kept_ids)
            kept_ids.add(label_id)
            label_entries.append(new_entries.label(label_id, tail, stamps[key], target, text))
            tail = label_id
        timestamp = self._now()
        new_id = new_entries.uuid7(self._store.clock())
        head = new_entries.header(new_id, timestamp, self.cwd, self.session_id if self._persist else None)
        manager = self._store.session_from_entries(head, kept + label_entries, persist=self._persist)
        self._become(manager)
        return new_id

    def _become(self, other: SessionManager) -> None:
        self.close()
        self._engine, self._spk = other._engine, other._spk
        self._persist, self._flushed = other._persist, other._flushed
        self._load_identity()


def _fresh_id(taken: set[str]) -> str:
    for _ in range(100):
        candidate = new_entries.short_id()
        if candidate not in taken:
            return candidate
    return new_entries.long_id()


def _as_dict(message: Any) -> dict:
    if isinstance(message, dict):
        return message
    if hasattr(message, "model_dump"):
        return message.model_dump(mode="python", exclude_unset=True)
    raise InvalidEntry(f"a message must be a dict or a pydantic model, not {type(message).__name__}")
