"""The analysis surface: SQL views, full-text search, usage statistics, session listing.

The schema objects live in migrations 0003, 0006, 0007 and 0009–0012 (SQLite: long texts kept
once; totals kept as rows are written; ``docs/sql.md`` documents them); this package holds what
runs against them: ``extract`` (the analysis columns of a row, computed on write), ``fts`` /
``search`` (full-text search with provenance), ``stats`` (``/session`` totals), ``breakdown``
(``stats --by``), ``readonly`` (``pi-store sql``), ``listing`` (``pi-store list``), ``pairs`` /
``activity_days`` (what is kept as rows are written) and ``backfill`` (recomputing).
"""
# The documented views (docs/sql.md), in the order the documentation lists them.
VIEWS = ("sessions_overview", "messages", "tool_calls", "usage_ledger", "compactions", "branches", "labels",
         "current_path", "activity", "usage_days")

# Objects of migrations 0003 and 0015 that the ORM models do not describe (an FTS5 table and its shadow
# tables, a watermark table, an expression index): schema comparisons against the models skip them.
HAND_WRITTEN = frozenset({
    "entries_fts", "entries_fts_data", "entries_fts_idx", "entries_fts_docsize", "entries_fts_config",
    "entries_fts_content", "fts_watermark", "ix_entries_search_words",
    "ix_entries_pk",  # PostgreSQL only (migration 0008): search's newest-first order
})


def include_name(name: str | None, type_: str, parent_names: dict) -> bool:
    """Alembic ``include_name`` hook: leave :data:`HAND_WRITTEN` objects out of comparisons."""
    return name not in HAND_WRITTEN
