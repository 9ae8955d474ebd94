"""Building, from our context services, the fields describe.mjs computes with the real Pi.

Each ``*_doc`` function returns JSON values in describe.mjs's shapes, computed only from the
entries of a session and our services, so tests can ``js_diff`` them against committed oracle
outputs. Where Pi throws for a field our code is expected to raise as well: such a field becomes
``{"$error": {"name": "TypeError", ...}}`` here, like describe.mjs's ``safe()``.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

from store.describe import KEEP_RECENT, context_doc, id_of, leaf_context_doc, safe
from store.format.jsjson import JsonLineError, js_parse
from store.format.jsvalue import js_trim, map_key, prop, truthy
from store.format.migrate import MigrationError, migrate_entries
from store.services import js_default_sort, jsonable
from store.services.compaction import CompactionPreparation, compute_file_lists, prepare_compaction
from store.services.context import session_path
from store.services.estimates import CompactionSettings

MAIN_FIELDS = ("contextEntryIds", "projection", "sessionContext", "estimateProjectedContextTokens",
               "estimateContextTokens", "messageTokenEstimates", "shouldCompact", "prepareCompaction")
LEAF_FIELDS = ("contextEntryIds", "projection", "thinkingLevel", "model", "estimateProjectedContextTokens",
               "prepareCompaction500")


def index_by_id(entries: Sequence[Any]) -> dict[tuple, Any]:
    """Pi's ``byId``: id -> entry, the last entry with an id wins."""
    by_id: dict[tuple, Any] = {}
    for entry in entries:
        by_id[map_key(prop(entry, "id"))] = entry
    return by_id


def path_from_ids(ids: Sequence[Any], by_id: dict[tuple, Any]) -> list[Any]:
    """The entries of a describe ``pathIds``/``branchIds`` list (ids are strings on a real path)."""
    return [by_id[map_key(entry_id)] for entry_id in ids]


def get_branch(by_id: dict[tuple, Any], leaf_id: Any) -> list[Any]:
    """Pi's ``getBranch(leafId)``: empty when the leaf id is falsy or unknown."""
    if not truthy(leaf_id) or map_key(leaf_id) not in by_id:
        return []
    return session_path([], leaf_id, by_id)


def summarize_prep(prep: CompactionPreparation | None) -> Any:
    """describe.mjs's ``summarizePrep`` from our preparation (written out here on purpose: it
    cross-checks ``CompactionPreparation.describe_json``)."""
    if prep is None:
        return None
    read_files, modified_files = compute_file_lists(prep.file_ops)

    def roles(messages: Sequence[Any]) -> dict[str, Any]:
        return {"count": len(messages),
                "roles": [m.get("role") if isinstance(m, dict) else None for m in messages]}

    return jsonable({
        "firstKeptEntryId": prep.first_kept_entry_id,
        "isSplitTurn": prep.is_split_turn,
        "tokensBefore": prep.tokens_before,
        "previousSummary": prep.previous_summary,
        "messagesToSummarize": roles(prep.messages_to_summarize),
        "turnPrefixMessages": roles(prep.turn_prefix_messages),
        "fileOps": {"read": js_default_sort(prep.file_ops.read),
                    "edited": js_default_sort(prep.file_ops.edited),
                    "written": js_default_sort(prep.file_ops.written)},
        "readFiles": read_files,
        "modifiedFiles": modified_files,
        "settings": prep.settings.to_json(),
    })


def main_leaf_doc(entries: Sequence[Any], branch: Sequence[Any]) -> dict[str, Any]:
    """The main-leaf fields: ``branch`` is getBranch(); context building uses Pi's
    buildSessionPath from the manager's leaf id (the last entry's id, which may be absent: then
    buildSessionPath falls back to the last entry). Cross-checks the preparation summary."""
    by_id = index_by_id(entries)
    leaf_id = prop(entries[-1], "id") if entries else None
    context_path = safe(lambda: session_path(entries, leaf_id, by_id))
    if isinstance(context_path, dict):
        return {field: context_path for field in MAIN_FIELDS}
    doc = context_doc(context_path, list(branch))
    for keep in KEEP_RECENT:
        prep = safe(lambda keep=keep: prepare_compaction(branch, CompactionSettings(keep_recent_tokens=keep)))
        if not isinstance(prep, dict):
            assert summarize_prep(prep) == doc["prepareCompaction"][str(keep)]
    return doc


def leaf_doc(entries: Sequence[Any], leaf_id: str, branch: Sequence[Any], *,
             with_projection: bool = True) -> dict[str, Any]:
    """One ``allLeaves`` item's fields for a known id: ``branch`` is getBranch(id); context
    building walks Pi's buildSessionPath from the id (the last entry for the falsy id ``""``)."""
    context_path = session_path(entries, leaf_id, index_by_id(entries))
    return leaf_context_doc(context_path, list(branch), with_projection=with_projection)


# ---------------------------------------------------------------------------------------------
# reading a session file as Pi does (for corpus cases, whose describe docs hold no entries)


def _describe_ids() -> Callable[[], str]:
    """describe.mjs's randomUUID: the k-th call gives "%08x" % k (Pi keeps the first 8 chars)."""
    counter = 0

    def new_id() -> str:
        nonlocal counter
        counter += 1
        return f"{counter:08x}"

    return new_id


class NotASession(ValueError):
    pass


def load_pi_entries(data: bytes) -> list[Any]:
    """getEntries() after SessionManager.open under describe.mjs: lines split on "\\n", blank,
    unparseable and falsy lines skipped, the first value must be a header with a string id,
    migrated to v3 with describe's ids, "session" values dropped."""
    text = data.decode("utf-8", "replace")
    values = []
    for line in text.split("\n"):
        if not js_trim(line):
            continue
        try:
            value = js_parse(line)
        except JsonLineError:
            continue
        if truthy(value):
            values.append(value)
    if not values:
        return []
    header = values[0]
    is_header = isinstance(header, dict) and header.get("type") == "session"
    if not (is_header and isinstance(header.get("id"), str)):
        raise NotASession("the first parsed line is not a session header")
    try:
        migrate_entries(values, _describe_ids())
    except MigrationError as error:
        raise NotASession(f"Pi's migration throws: {error}") from error
    return [value for value in values if prop(value, "type") != "session"]


def corpus_doc(entries: Sequence[Any], all_leaves: bool) -> dict[str, Any]:
    """The describe fields that survive ``reduce_for_corpus`` and that our services compute."""
    by_id = index_by_id(entries)
    branch = get_branch(by_id, prop(entries[-1], "id") if entries else None)
    doc = main_leaf_doc(entries, branch)
    doc["branchIds"] = [id_of(e) for e in branch]
    doc["entries"] = list(entries)
    if all_leaves:
        seen: set[str] = set()
        doc["allLeaves"] = []
        for entry in entries:
            entry_id = id_of(entry)
            if not isinstance(entry_id, str) or entry_id in seen:
                continue
            seen.add(entry_id)
            path = get_branch(by_id, entry_id)
            item = {"leafId": entry_id, "pathIds": [id_of(e) for e in path]}
            item.update(leaf_doc(entries, entry_id, path, with_projection=False))
            doc["allLeaves"].append(item)
    return doc


class Agreement:
    """Agreement counts per field: ``record(field, diff)``; ``table()`` for the report."""

    def __init__(self) -> None:
        self.agree: collections.Counter[str] = collections.Counter()
        self.total: collections.Counter[str] = collections.Counter()
        self.skipped: collections.Counter[str] = collections.Counter()
        self.failures: dict[str, list[str]] = collections.defaultdict(list)

    def record(self, field: str, diff: str | None, where: str) -> None:
        self.total[field] += 1
        if diff is None:
            self.agree[field] += 1
        else:
            self.failures[field].append(f"{where}: {diff}")

    def skip(self, field: str) -> None:
        self.skipped[field] += 1

    def table(self) -> str:
        lines = []
        for field in sorted(set(self.total) | set(self.skipped)):
            lines.append(f"  {field:48s} {self.agree[field]:6d}/{self.total[field]:<6d}"
                         + (f"  ({self.skipped[field]} OracleGuard skipped)" if self.skipped[field] else ""))
        return "\n".join(lines)
