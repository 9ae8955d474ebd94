"""Search on PostgreSQL finds words whatever the database's locale (migration 0018): the words
of the index are the query's words (``store.analysis.fts``: letters and digits, as Python reads
them), as on SQLite. In a database created with ``LC_CTYPE 'C'`` no word with a letter outside
ASCII was found (``café`` was indexed as ``caf``, ``мир`` as nothing); under ``C.UTF-8``, words
with Indic vowel signs were split differently from the query's."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import text

from store.db.engine import alembic_config, make_engine
from store.session_store import SessionStore
from tests.conftest import scratch_pg_database

C_LOCALE = "LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
TEXTS = ["café au lait", "МИР труд май", "请修复这个问题", "ＦＵＬＬ width", "हिन्दी भाषा बोलते हैं", "plain ascii words"]
QUERIES = ["café", "CAFÉ", "caf", '"café au"', "мир", "Мир", '"мир труд"', "请修复这个问题", "ｆｕｌｌ", "भाषा",
           "हिन्दी", "ascii", "lait"]


def _found(url: str) -> dict[str, list[str]]:
    """What each query finds (the texts of its hits, sorted) in a store of ``TEXTS``."""
    with SessionStore.connect(url) as store:
        sm = store.create("/w")
        texts = {sm.append_message({"role": "user", "content": body, "timestamp": i}): body
                 for i, body in enumerate(TEXTS)}
        return {query: sorted(texts[hit.entry_id] for hit in store.search(query)) for query in QUERIES}


@pytest.mark.parametrize("locale", ["C", "the server's default"])
def test_postgresql_finds_what_sqlite_finds(tmp_path: Path, locale: str) -> None:
    expected = _found(f"sqlite:///{tmp_path / 's.db'}")
    assert expected["café"] == expected["CAFÉ"] == expected['"café au"'] == ["café au lait"] and expected["caf"] == []
    assert expected["мир"] == expected['"мир труд"'] == ["МИР труд май"]
    with scratch_pg_database("pi_store_locale", C_LOCALE if locale == "C" else "") as url:
        assert _found(url) == expected


def test_the_downgrade_gives_back_the_old_words_and_the_upgrade_reindexes() -> None:
    words = "SELECT count(*) FROM entries WHERE pi_search_words(search_text) @@ 'café'::tsquery"
    with scratch_pg_database("pi_store_locale_up", C_LOCALE) as url:
        with SessionStore.connect(url) as store:
            entry = store.create("/w").append_message({"role": "user", "content": "café au lait", "timestamp": 1})
        engine = make_engine(url)
        config = alembic_config(engine)
        command.downgrade(config, "0017")
        with engine.connect() as conn:
            assert conn.execute(text(words)).scalar_one() == 0  # revision 0015's words: "caf", "au", "lait"
            assert "COLLATE" not in conn.execute(text("SELECT prosrc FROM pg_proc WHERE proname = "
                                                      "'pi_search_words'")).scalar_one()
        command.upgrade(config, "head")
        with engine.connect() as conn:
            conn.execute(text("SET enable_seqscan = off"))  # the index's own rows, rebuilt by the upgrade
            assert conn.execute(text(words)).scalar_one() == 1
        engine.dispose()
        with SessionStore.connect(url) as store:
            assert [hit.entry_id for hit in store.search("café")] == [entry]
