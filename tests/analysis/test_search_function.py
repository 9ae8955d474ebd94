"""PostgreSQL's search functions. Migration 0013: ``pi_search_vector`` in PL/pgSQL — the same
vector for every stored text as revision 0003's SQL function, still a call the planner prices
(not inlined), and the GIN index built on the old function answers searches after the upgrade and
the downgrade. Migration 0015: the GIN index on ``pi_search_words`` — every row's words, without
the parser's token types or words too long to index — read by search, and given back to
``pi_search_vector`` by the downgrade."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic import command
from sqlalchemy import text

from store.db.engine import alembic_config, make_engine
from store.session_store import SessionStore
from tests.conftest import scratch_pg_database
from tests.oracle_support import FIXTURES

FILES = [FIXTURES / "sessions" / name for name in ("small-seed1-0.jsonl", "medium-seed2-0.jsonl", "legacy-v1.jsonl")]
# revision 0003's body, written out: what every stored row's vector must equal
SAME_VECTOR = ("SELECT count(*), count(*) FILTER (WHERE pi_search_vector(search_text) IS DISTINCT FROM "
               "to_tsvector('simple', regexp_replace(search_text, '[^[:alnum:]]+', ' ', 'g'))) FROM entries")
LANGUAGE = ("SELECT l.lanname, p.proconfig IS NULL FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
            "WHERE p.proname = 'pi_search_vector'")
SEARCH = "SELECT count(*) FROM entries WHERE pi_search_vector(search_text) @@ to_tsquery('simple', 'the')"


@pytest.fixture
def pg_url() -> Iterator[str]:
    with scratch_pg_database("pi_store_search_fn") as url:
        yield url


def facts(url: str) -> tuple:
    engine = make_engine(url)
    with engine.connect() as conn:
        rows, different = conn.execute(text(SAME_VECTOR)).one()
        language = tuple(conn.execute(text(LANGUAGE)).one())
        plan = "\n".join(conn.execute(text(f"EXPLAIN (VERBOSE) {SEARCH}")).scalars())
        found = conn.execute(text(SEARCH)).scalar_one()
    engine.dispose()
    assert rows > 100 and different == 0
    assert "pi_search_vector(entries.search_text)" in plan  # a priced call, not the inlined body
    return language, found


def test_the_plpgsql_function_gives_every_row_the_vector_of_revision_0003(pg_url: str) -> None:
    with SessionStore.connect(pg_url) as store:
        for path in FILES:
            store.import_file(path)
        searched = [hit.entry_id for hit in store.search("the")]
    language, found = facts(pg_url)
    assert language == ("plpgsql", True)  # no SET clause: every name in its body is qualified
    assert found > 0 and searched

    engine = make_engine(pg_url)
    config = alembic_config(engine)
    command.downgrade(config, "0012")
    assert facts(pg_url) == (("sql", False), found)
    command.upgrade(config, "head")
    engine.dispose()
    assert facts(pg_url) == (language, found)
    with SessionStore.connect(pg_url) as store:
        assert [hit.entry_id for hit in store.search("the")] == searched


# what migration 0015's function is meant to give, written out: the regular expression's words
# (none is longer than 2047 bytes in the fixtures: the function's filter is tested apart)
SAME_WORDS = ("SELECT count(*), count(*) FILTER (WHERE pi_search_words(search_text) IS DISTINCT FROM "
              "array_to_tsvector(array_remove(regexp_split_to_array(lower(search_text), '[^[:alnum:]]+'), ''))) "
              "FROM entries")
INDEXES = "SELECT indexname FROM pg_indexes WHERE tablename = 'entries' AND indexname LIKE 'ix_entries_search%'"


def test_the_index_of_words_serves_search_and_the_downgrade_restores_the_vector_index(pg_url: str) -> None:
    with SessionStore.connect(pg_url) as store:
        for path in FILES:
            store.import_file(path)
        sm = store.create("/work/words")
        long_word = sm.append_message({"role": "user", "content": f"{'é' * 1100} okapi 0e02b2c3 {'x' * 2047} x² ½",
                                       "timestamp": 1})
        # lower() lengthens it (Ⱥ: 2 bytes, ⱥ: 3): one word of 3,069 bytes from a text of 2,046
        grown = sm.append_message({"role": "user", "content": "Ⱥ" * 1023, "timestamp": 2})
        searched = {word: [hit.entry_id for hit in store.search(word)] for word in ("the", "okapi", '"okapi 0e02b2c3"')}
        assert [hit.entry_id for hit in store.search("x" * 2047)] == [long_word]
    assert searched["okapi"] == searched['"okapi 0e02b2c3"'] == [long_word] and searched["the"]
    engine = make_engine(pg_url)
    with engine.connect() as conn:
        rows, different = conn.execute(text(SAME_WORDS + " WHERE session_pk <> (SELECT max(pk) FROM sessions)")).one()
        assert rows > 100 and different == 0
        words = conn.execute(text("SELECT tsvector_to_array(pi_search_words(search_text)) FROM entries "
                                  "WHERE search_text LIKE '%okapi%'")).scalar_one()
        # 1100 × 'é': 2200 bytes, left out; other numbers are word characters (as for SQLite)
        assert sorted(words) == ["0e02b2c3", "okapi", "x" * 2047, "x²", "½"]
        assert conn.execute(text(INDEXES)).scalars().all() == ["ix_entries_search_words"]
        conn.execute(text("ANALYZE entries"))
        plan = "\n".join(conn.execute(text(
            "EXPLAIN SELECT pk FROM entries AS e WHERE pi_search_words(e.search_text) @@ CAST('okapi' AS tsquery)"
        )).scalars())
        assert "ix_entries_search_words" in plan
        assert conn.execute(text("SELECT pi_search_words(search_text) FROM entries WHERE entry_id = :id"),
                            {"id": grown}).scalar_one() == ""  # its one word left out
    config = alembic_config(engine)
    command.downgrade(config, "0014")
    with engine.begin() as conn:
        assert conn.execute(text(INDEXES)).scalars().all() == ["ix_entries_search_vector"]
        assert conn.execute(text("SELECT to_regprocedure('pi_search_words(text)')")).scalar() is None
        assert conn.execute(text(SEARCH)).scalar_one() > 0
        # what a stopped `fts rebuild` (REINDEX CONCURRENTLY) leaves: an invalid copy, kept current
        conn.execute(text("CREATE INDEX ix_entries_search_vector_ccnew ON entries (seq)"))
        conn.execute(text("UPDATE pg_index SET indisvalid = false "
                          "WHERE indexrelid = 'ix_entries_search_vector_ccnew'::regclass"))
    command.upgrade(config, "head")
    with engine.connect() as conn:  # gone with its index: no later cleanup knows its name
        assert conn.execute(text(INDEXES)).scalars().all() == ["ix_entries_search_words"]
    engine.dispose()
    with SessionStore.connect(pg_url) as store:
        assert {word: [hit.entry_id for hit in store.search(word)] for word in searched} == searched
