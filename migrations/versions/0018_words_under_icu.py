"""PostgreSQL: the text's words found the same way whatever the database's locale.

``pi_search_words`` (revision 0015) and ``pi_search_vector`` (0013) lower-case the text and split
it at ``[^[:alnum:]]`` with the database's default collation. Which characters are letters then
depends on the database's ``LC_CTYPE``: in a database created with ``C`` (a common choice, and
what docs/sql.md suggests for sorting) only ASCII letters are, so ``café`` was indexed as ``caf``
and ``мир`` or ``请修复`` as nothing at all — no search found a word with a letter outside ASCII,
where SQLite found them all. Under ``C.UTF-8`` glibc counts some combining marks as letters and
not others (``हिन्दी`` became ``हिन`` and ``दी``), where the query's words (Python's ``str.isalnum``,
``store.analysis.fts``) are split at every mark, so such words were found on SQLite and not here.

Both functions now read the text under ICU's root collation, ``und-x-icu``: ``lower`` is Unicode's
and ``[:alnum:]`` is Unicode's letters and decimal digits (``u_isalnum``), exactly the query's word
characters (with 0015's other numbers, ``x²``). Where the server has no ICU (a build without it) or
the database's encoding is not UTF8, the libc collation ``C.utf8`` is used if the server has it,
else nothing changes. The index on ``pi_search_words`` is rebuilt in this revision's transaction
(writers wait; the corpus's 5,000 rows: about a second). The downgrade restores both functions and
rebuilds the index again. SQLite: nothing (FTS5's ``unicode61`` does not depend on a locale).

An ICU library upgrade on the server can change what ``lower`` gives for a few characters, as for
any index on a collation: PostgreSQL then warns of a collation version mismatch, and
``pi-store fts rebuild`` rebuilds the index.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import Connection, text

revision = "0018"
down_revision = "0017"
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

# revision 0015's and 0013's bodies, with every text the functions read given ``COLLATION``
WORDS_FUNCTION = r"""CREATE OR REPLACE FUNCTION pi_search_words(body text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT COST 5000
AS $$
DECLARE
    lowered text := pg_catalog.lower(body COLLATION);
    words text[] := pg_catalog.regexp_split_to_array(lowered COLLATION, '[^WORD_CHARACTERS]+');
BEGIN
    IF pg_catalog.octet_length(lowered) > 2047 THEN
        words := ARRAY(SELECT w FROM pg_catalog.unnest(words) AS w WHERE pg_catalog.octet_length(w) <= 2047);
    END IF;
    RETURN pg_catalog.array_to_tsvector(pg_catalog.array_remove(words, ''));
END $$""".replace("WORD_CHARACTERS", WORD_CHARACTERS)
VECTOR_FUNCTION = r"""CREATE OR REPLACE FUNCTION pi_search_vector(body text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE RETURNS NULL ON NULL INPUT COST 5000
AS $$ BEGIN
    RETURN pg_catalog.to_tsvector('pg_catalog.simple'::pg_catalog.regconfig,
                                  pg_catalog.regexp_replace(LOWERED, '[^[:alnum:]]+', ' ', 'g'));
END $$"""
REINDEX = "REINDEX INDEX ix_entries_search_words"

_COLLATIONS = """SELECT c.collname FROM pg_catalog.pg_collation AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.collnamespace AND n.nspname = 'pg_catalog'
WHERE (c.collname = 'und-x-icu' AND c.collprovider = 'i'
       AND pg_catalog.getdatabaseencoding() = 'UTF8')
   OR (c.collname IN ('C.utf8', 'C.UTF-8') AND c.collprovider = 'c'
       AND c.collencoding IN (-1, pg_catalog.pg_char_to_encoding(pg_catalog.getdatabaseencoding())))
ORDER BY c.collprovider = 'i' DESC, c.collname LIMIT 1"""


def word_collation(bind: Connection) -> str | None:
    """``und-x-icu`` where the server can use it here, else ``C.utf8`` (libc), else None."""
    return bind.execute(text(_COLLATIONS)).scalar()


def _functions(collation: str | None) -> tuple[str, str]:
    clause = "" if collation is None else f' COLLATE pg_catalog."{collation}"'
    words = WORDS_FUNCTION.replace(" COLLATION", clause)
    # 0013 let the parser's ``simple`` dictionary lower-case the words: in a ``C`` database it
    # lowers ASCII only (CAFÉ stayed cafÉ), so the text is lowered first here, as the words are
    vector = VECTOR_FUNCTION.replace("LOWERED", "body" if collation is None else f"pg_catalog.lower(body{clause})")
    return words, vector


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    collation = word_collation(bind)
    if collation is None:
        return
    for function in _functions(collation):
        op.execute(function)
    op.execute(REINDEX)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or word_collation(bind) is None:
        return
    for function in _functions(None):
        op.execute(function)
    op.execute(REINDEX)
