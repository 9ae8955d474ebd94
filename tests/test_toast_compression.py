"""Migration 0014: on PostgreSQL the large ``entries`` columns are compressed with LZ4 (where the
server has it), long rows still read back byte for byte, and downgrade gives the columns back to
the server's default."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic import command
from sqlalchemy import text

from store.db.engine import alembic_config, make_engine
from store.session_store import SessionStore
from tests.conftest import scratch_pg_database
from tests.oracle_support import FIXTURES

SETTINGS = ("SELECT attname, attcompression FROM pg_attribute WHERE attrelid = 'entries'::regclass "
            "AND attname IN ('line', 'raw', 'search_text', 'facts') ORDER BY attname")
# a message of 40 KB of text: stored compressed, out of line
LONG_LINE = (b'{"type":"message","id":"longtext","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z",'
             b'"message":{"role":"user","content":"' + b"the same words again " * 2000 + b'","timestamp":1}}\n')
STORED = "SELECT DISTINCT pg_column_compression(line) FROM entries WHERE pg_column_compression(line) IS NOT NULL"


@pytest.fixture
def pg_url() -> Iterator[str]:
    with scratch_pg_database("pi_store_lz4") as url:
        yield url


def test_long_rows_are_compressed_with_lz4_and_read_back_unchanged(pg_url: str, tmp_path) -> None:
    engine = make_engine(pg_url)
    with SessionStore.connect(pg_url) as store, engine.connect() as conn:
        if not conn.execute(text("SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                                 "WHERE name = 'default_toast_compression'")).scalar():
            pytest.skip("this PostgreSQL server was built without LZ4: the migration keeps pglz")
        assert conn.execute(text(SETTINGS)).all() == [("facts", "l"), ("line", "l"), ("raw", "l"),
                                                      ("search_text", "l")]
        body = FIXTURES.joinpath("sessions", "medium-seed2-0.jsonl").read_bytes() + LONG_LINE
        path = tmp_path / "long.jsonl"
        path.write_bytes(body)
        report = store.import_file(path)
        assert conn.execute(text(STORED)).scalars().all() == ["lz4"]
        assert b"".join(store.iter_export(report.session_id)) == body
    command.downgrade(alembic_config(engine), "0013")
    with engine.connect() as conn:
        assert {value for _, value in conn.execute(text(SETTINGS))} == {""}
    command.upgrade(alembic_config(engine), "head")
    engine.dispose()
