"""SQLite: a long text kept once, in ``line``, instead of also in ``search_text``.

Issue 11, item 4 (storage). ``search_text`` held a second copy of each entry's text (18 % of a
database: ``tools/bench_storage.py``). Where a row's whole searchable text is one string of its
line (a user or tool-result text, a single-block assistant answer, a summary, a label) and at
least ``extract.KEEP_ONCE_MIN_CHARS`` (128) characters long, ``search_text`` is now empty and
``facts`` records where the text is (``textAt``, a JSON path) and its length (``textChars``) —
decided by SQLite itself, which compares the string at that path with the text character for
character, so the index, the views and the snippets read exactly the text they read before:

* the view ``entries_search`` (``pk``, ``search_text``) gives every row's searchable text, from
  ``search_text`` or from ``line``; the FTS5 table ``entries_fts`` now takes its content from it
  (external content: still no copy of its own), and its triggers unindex the text the view gives;
* ``messages.text``, ``compactions.summary`` and ``labels.label`` read it too (same columns, same
  values).

New rows are written so by the insert statement (``store.db.writes.insert_sql``, on the path
``extract.text_path`` proposes): they are small from the start, nothing is rewritten. The stored
rows are converted here (``fts.keep_once``) and the index rebuilt in one pass; their pages keep
the freed space until the file is vacuumed (``VACUUM`` in ``sqlite3``). PostgreSQL is unchanged
(its GIN index is an expression over ``search_text``): nothing to do.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import context, op

from store.analysis import fts

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

ENTRIES_SEARCH = (
    f"CREATE VIEW entries_search AS SELECT e.pk, {fts.ROW_TEXT.format(r='e')} AS search_text FROM entries AS e"
)
# content="entries_search" in double quotes: the spelling Datasette looks for
FTS_TABLE = """CREATE VIRTUAL TABLE entries_fts USING fts5(
    search_text, content="entries_search", content_rowid="pk", columnsize=0,
    tokenize="unicode61 remove_diacritics 0"
)"""
# as in 0003: unindex a deleted row if it was indexed, then keep the watermark at or below the
# highest remaining row; the text unindexed is the one the view gave when the row was indexed
_OLD_TEXT = fts.ROW_TEXT.format(r="OLD")
_NEW_TEXT = fts.ROW_TEXT.format(r="NEW")
TRIGGERS = [
    f"""CREATE TRIGGER entries_fts_delete AFTER DELETE ON entries
BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, search_text)
        SELECT 'delete', OLD.pk, {_OLD_TEXT}
        WHERE (OLD.search_text <> '' OR OLD.facts ->> 'textAt' IS NOT NULL)
          AND OLD.pk <= (SELECT indexed_pk FROM fts_watermark);
    UPDATE fts_watermark SET indexed_pk = (SELECT coalesce(max(pk), 0) FROM entries)
    WHERE indexed_pk > (SELECT coalesce(max(pk), 0) FROM entries);
END""",
    f"""CREATE TRIGGER entries_fts_update AFTER UPDATE OF search_text, facts, line ON entries
WHEN OLD.pk <= (SELECT indexed_pk FROM fts_watermark)
BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, search_text)
        SELECT 'delete', OLD.pk, {_OLD_TEXT} WHERE OLD.search_text <> '' OR OLD.facts ->> 'textAt' IS NOT NULL;
    INSERT INTO entries_fts (rowid, search_text)
        SELECT NEW.pk, {_NEW_TEXT} WHERE NEW.search_text <> '' OR NEW.facts ->> 'textAt' IS NOT NULL;
END""",
]
TEXT_VIEWS = ("messages", "compactions", "labels")  # the views that show a row's plain text
_SEARCH_DROPS = ["DROP TRIGGER entries_fts_update", "DROP TRIGGER entries_fts_delete", "DROP TABLE entries_fts"]
_UNDO = """UPDATE entries
SET search_text = CASE WHEN search_text = '' THEN json_extract(line, facts ->> 'textAt') ELSE search_text END,
    facts = json_remove(facts, '$.textAt', '$.textChars')
WHERE facts ->> 'textAt' IS NOT NULL"""


def _revision_0003():
    """Migration 0003's module: its index and triggers."""
    return context.script.get_revision("0003").module


def _views_before() -> list[str]:
    """The three text views as this revision finds them (0003's, as 0009 rewrote them: the path
    join and the partial-index filters), in ``TEXT_VIEWS`` order."""
    views = context.script.get_revision("0009").module._new_views(True)
    return [views[name] for name in TEXT_VIEWS]


def _text_views(views: list[str]) -> list[str]:
    """The text views, reading the text where this revision keeps it."""
    chars = _revision_0003()._CHARS.format(r="e")
    plain = f"substr(e.search_text, 1, {chars})"
    if not all(plain in view for view in views):
        raise RuntimeError("the text views do not read substr(search_text, ...) any more: update 0010")
    return [view.replace(plain, f"substr({fts.ROW_TEXT.format(r='e')}, 1, {chars})") for view in views]


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "sqlite":
        return
    for statement in [*_SEARCH_DROPS, *(f"DROP VIEW {view}" for view in TEXT_VIEWS)]:
        op.execute(statement)
    for statement in [ENTRIES_SEARCH, FTS_TABLE, *TRIGGERS, *_text_views(_views_before())]:
        op.execute(statement)
    op.execute("UPDATE fts_watermark SET indexed_pk = 0")  # (the update trigger leaves the rows alone)
    fts.keep_once(conn)
    fts.catch_up(conn)


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != "sqlite":
        return
    old = _revision_0003()
    for statement in [*_SEARCH_DROPS, *(f"DROP VIEW {view}" for view in TEXT_VIEWS), "DROP VIEW entries_search"]:
        op.execute(statement)
    op.execute(_UNDO)
    for statement in [old.SQLITE_SEARCH[0], *old.SQLITE_SEARCH[3:], *_views_before()]:
        op.execute(statement)
    op.execute("UPDATE fts_watermark SET indexed_pk = 0")
    fts.catch_up(conn)  # (no entries_search view: reads search_text, as before this revision)
