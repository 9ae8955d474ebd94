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
run of non-alphanumeric characters (``regexp_split_to_array``), as a position-less ``tsvector``
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

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# PL/pgSQL: compiled once per connection, never inlined (so priced as COST says, as the planner
# needs to read the index for rare words: revision 0003's note), every name schema-qualified.
# ``array_to_tsvector`` refuses a word longer than 2047 bytes: only a text longer than that can
# hold one, and only then are the words filtered.
WORDS_FUNCTION = r"""CREATE OR REPLACE FUNCTION pi_search_words(body text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT COST 5000
AS $$
DECLARE
    words text[] := pg_catalog.regexp_split_to_array(pg_catalog.lower(body), '[^[:alnum:]]+');
BEGIN
    IF pg_catalog.octet_length(body) > 2047 THEN
        words := ARRAY(SELECT w FROM pg_catalog.unnest(words) AS w WHERE pg_catalog.octet_length(w) <= 2047);
    END IF;
    RETURN pg_catalog.array_to_tsvector(pg_catalog.array_remove(words, ''));
END $$"""
WORDS_INDEX = "CREATE INDEX ix_entries_search_words ON entries USING gin (pi_search_words(search_text))"
VECTOR_INDEX = "CREATE INDEX ix_entries_search_vector ON entries USING gin (pi_search_vector(search_text))"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(WORDS_FUNCTION)
        op.execute(WORDS_INDEX)
        op.execute("DROP INDEX ix_entries_search_vector")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(VECTOR_INDEX)
        op.execute("DROP INDEX ix_entries_search_words")
        op.execute("DROP FUNCTION pi_search_words(text)")
