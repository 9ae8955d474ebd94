"""PostgreSQL: the GIN index on the text's words, without running the text-search parser.

Issue 11, item 5. The GIN index of revision 0003 is on ``pi_search_vector(search_text)``:
``to_tsvector`` with the ``default`` parser over the text with every run of non-alphanumeric
characters made a space. PostgreSQL computes that expression for every row it inserts, and on an
import it is most of the server's work (the corpus: 1.2 of 1.8 s of server CPU; the same import
with no full-text index at all takes 0.6). The index does not need it: a GIN ``tsvector`` index
keeps each lexeme's rows, never their positions (a phrase query rechecks the row), and the
parser's token types only get in the way (it reads ``0e02b2c3`` as the number ``0e02`` and the
word ``b2c3``, where SQLite's ``unicode61`` tokenizer, and a reader, see one word).

``pi_search_words(body)`` is the set of the text's words: ``body`` lower-cased and split at every
run of characters that are neither alphanumeric nor other numbers (``²``, ``½``: see
``OTHER_NUMBERS``) with ``regexp_split_to_array``, as a position-less ``tsvector``
(``array_to_tsvector``); words longer than 2047 bytes are left out, as ``to_tsvector`` leaves them.
Measured on the corpus's 6.5 MB of searchable text: 0.65 s of CPU instead of 0.87 (the regular
expression is 0.37 of it, the same in both), and the import's server CPU 1.52-1.66 s instead of
1.78-1.88 (BENCHMARKS.md).

Search (``store.analysis.search``) asks the new index for the rows holding every word of each
alternative (``pi_search_words(search_text) @@ '...'::tsquery``); a query with a phrase also
checks the phrase, row by row on those candidates, with ``pi_search_vector``, which keeps its
definition (a phrase needs positions): a GIN index on ``tsvector`` rechecked phrases by
recomputing the indexed expression anyway. ``pi_search_vector(search_text) @@ ...`` written in
SQL still gives the same rows, but no index serves it now: docs/sql.md shows the indexed form.

The new index is built in this revision's transaction (writers wait for it), then the old one is
dropped. Downgrade builds the old index again and drops the function. SQLite: nothing (its
full-text index is FTS5).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# Unicode 14's "other number" characters (category No: ², ½, ①, …), as (first, last) code points:
# glibc's [:alnum:] leaves them out, where Python's str.isalnum (the query's words) and SQLite's
# unicode61 tokenizer count them as word characters (``x²`` is one word).
OTHER_NUMBERS = (
    (0xB2, 0xB3), (0xB9, 0xB9), (0xBC, 0xBE), (0x9F4, 0x9F9), (0xB72, 0xB77), (0xBF0, 0xBF2), (0xC78, 0xC7E),
    (0xD58, 0xD5E), (0xD70, 0xD78), (0xF2A, 0xF33), (0x1369, 0x137C), (0x17F0, 0x17F9), (0x19DA, 0x19DA),
    (0x2070, 0x2070), (0x2074, 0x2079), (0x2080, 0x2089), (0x2150, 0x215F), (0x2189, 0x2189), (0x2460, 0x249B),
    (0x24EA, 0x24FF), (0x2776, 0x2793), (0x2CFD, 0x2CFD), (0x3192, 0x3195), (0x3220, 0x3229), (0x3248, 0x324F),
    (0x3251, 0x325F), (0x3280, 0x3289), (0x32B1, 0x32BF), (0xA830, 0xA835), (0x10107, 0x10133), (0x10175, 0x10178),
    (0x1018A, 0x1018B), (0x102E1, 0x102FB), (0x10320, 0x10323), (0x10858, 0x1085F), (0x10879, 0x1087F),
    (0x108A7, 0x108AF), (0x108FB, 0x108FF), (0x10916, 0x1091B), (0x109BC, 0x109BD), (0x109C0, 0x109CF),
    (0x109D2, 0x109FF), (0x10A40, 0x10A48), (0x10A7D, 0x10A7E), (0x10A9D, 0x10A9F), (0x10AEB, 0x10AEF),
    (0x10B58, 0x10B5F), (0x10B78, 0x10B7F), (0x10BA9, 0x10BAF), (0x10CFA, 0x10CFF), (0x10E60, 0x10E7E),
    (0x10F1D, 0x10F26), (0x10F51, 0x10F54), (0x10FC5, 0x10FCB), (0x11052, 0x11065), (0x111E1, 0x111F4),
    (0x1173A, 0x1173B), (0x118EA, 0x118F2), (0x11C5A, 0x11C6C), (0x11FC0, 0x11FD4), (0x16B5B, 0x16B61),
    (0x16E80, 0x16E96), (0x1D2E0, 0x1D2F3), (0x1D360, 0x1D378), (0x1E8C7, 0x1E8CF), (0x1EC71, 0x1ECAB),
    (0x1ECAD, 0x1ECAF), (0x1ECB1, 0x1ECB4), (0x1ED01, 0x1ED2D), (0x1ED2F, 0x1ED3D), (0x1F100, 0x1F10C),
)


def _escaped(code: int) -> str:
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


WORD_CHARACTERS = "[:alnum:]" + "".join(
    _escaped(first) if first == last else f"{_escaped(first)}-{_escaped(last)}" for first, last in OTHER_NUMBERS)

# PL/pgSQL: compiled once per connection, never inlined (so priced as COST says, as the planner
# needs to read the index for rare words: revision 0003's note), every name schema-qualified.
# ``array_to_tsvector`` refuses a word longer than 2047 bytes: only a text longer than that can
# hold one, and only then are the words filtered (measured lower-cased: ``lower`` can lengthen a
# text, Ⱥ's two bytes becoming ⱥ's three).
WORDS_FUNCTION = r"""CREATE OR REPLACE FUNCTION pi_search_words(body text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT COST 5000
AS $$
DECLARE
    lowered text := pg_catalog.lower(body);
    words text[] := pg_catalog.regexp_split_to_array(lowered, '[^WORD_CHARACTERS]+');
BEGIN
    IF pg_catalog.octet_length(lowered) > 2047 THEN
        words := ARRAY(SELECT w FROM pg_catalog.unnest(words) AS w WHERE pg_catalog.octet_length(w) <= 2047);
    END IF;
    RETURN pg_catalog.array_to_tsvector(pg_catalog.array_remove(words, ''));
END $$""".replace("WORD_CHARACTERS", WORD_CHARACTERS)
WORDS_INDEX = "CREATE INDEX ix_entries_search_words ON entries USING gin (pi_search_words(search_text))"
VECTOR_INDEX = "CREATE INDEX ix_entries_search_vector ON entries USING gin (pi_search_vector(search_text))"


# the invalid copies a stopped ``pi-store fts rebuild`` (REINDEX CONCURRENTLY) leaves of an index
_COPIES = r"""SELECT c.relname FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
WHERE i.indrelid = 'entries'::regclass AND NOT i.indisvalid
AND (c.relname LIKE :name || '\_ccnew%' OR c.relname LIKE :name || '\_ccold%')"""


def _drop_with_copies(name: str) -> None:
    """Drop index ``name`` and what a stopped rebuild left of it (kept up to date on every insert
    while it is ready, and named by no later cleanup once its index is gone)."""
    bind = op.get_bind()
    for (copy,) in bind.execute(text(_COPIES), {"name": name.replace("_", "\\_")}).all():
        op.execute(f'DROP INDEX "{copy}"')
    op.execute(f"DROP INDEX {name}")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(WORDS_FUNCTION)
        op.execute(WORDS_INDEX)
        _drop_with_copies("ix_entries_search_vector")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(VECTOR_INDEX)
        _drop_with_copies("ix_entries_search_words")
        op.execute("DROP FUNCTION pi_search_words(text)")
