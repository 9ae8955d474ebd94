"""Migration 0010: on SQLite a long text is kept once, in ``line``, instead of also in
``search_text``; search, snippets and the text views must not see the difference, and the
full-text index must stay consistent through every path that deletes or rewrites rows."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
from alembic import command
from sqlalchemy import Connection, text

from store.analysis import fts
from store.analysis.backfill import recompute_analysis
from store.analysis.extract import analysis_values
from store.db.engine import alembic_config, is_sqlite, make_engine, read_transaction, write_transaction
from store.format import js_parse
from store.retention import RetentionPolicy
from store.session_store import SessionStore
from tests.oracle_support import FIXTURES

FILES = [FIXTURES / "sessions" / name for name in ("small-seed1-0.jsonl", "medium-seed2-0.jsonl", "legacy-v1.jsonl")]


def words(marker: str, count: int = 60) -> str:
    """A text of ``count`` words (over 256 characters) holding ``marker`` once, in the middle."""
    filler = [f"filler{i % 7} text" for i in range(count)]
    filler[count // 2] = marker
    return " ".join(filler)


def _line(value: dict) -> str:
    """JSON as Pi writes it (non-ASCII as is, a lone surrogate as its escape)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("\ud800", "\\ud800")


def long_session(path: Path, session_id: str = "0f0f0f0f-0000-4000-8000-000000000001") -> Path:
    """A session whose texts are long: each kind that can be kept in ``line`` alone, and some that
    cannot (extra searchable text, a lone surrogate, short), with an abandoned branch."""
    ts = "2026-01-01T00:00:0{}.000Z"
    rows = [_line({"type": "session", "version": 3, "id": session_id, "timestamp": ts.format(0), "cwd": "/w"})]

    def entry(i: int, parent: str | None, kind: str, **fields: object) -> None:
        rows.append(_line({"type": kind, "id": f"e{i}", "parentId": parent, "timestamp": ts.format(i % 10), **fields}))

    usage = {
        "input": 10,
        "output": 5,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": 15,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0.001},
    }
    assistant = {
        "role": "assistant",
        "provider": "p",
        "model": "m",
        "api": "x",
        "usage": usage,
        "stopReason": "stop",
        "timestamp": 1,
    }
    entry(1, None, "message", message={"role": "user", "content": words("alphaone"), "timestamp": 1})
    entry(2, "e1", "message", message={"role": "user", "content": words("lambdaeleven"), "timestamp": 1})  # abandoned
    entry(3, "e1", "message", message={**assistant, "content": [{"type": "text", "text": words("betatwo")}]})
    entry(
        4,
        "e3",
        "message",
        message={
            **assistant,
            "stopReason": "toolUse",
            "content": [
                {"type": "thinking", "thinking": words("gammathree")},
                {"type": "text", "text": words("gammatext")},
                {"type": "toolCall", "id": "call1", "name": "read", "arguments": {"path": "/src/a.py"}},
            ],
        },
    )
    entry(
        5,
        "e4",
        "message",
        message={
            "role": "toolResult",
            "toolCallId": "call1",
            "toolName": "read",
            "content": [{"type": "text", "text": words("deltafour")}],
            "isError": False,
            "timestamp": 1,
        },
    )
    entry(6, "e5", "compaction", summary=words("epsilonfive"), firstKeptEntryId="e5", tokensBefore=100)
    entry(7, "e6", "label", targetId="e5", label=words("zetasix"))
    entry(8, "e7", "session_info", name=words("etaseven"))
    entry(9, "e8", "custom_message", customType="note", content=words("thetaeight"), display=True)
    entry(10, "e9", "message", message={"role": "user", "content": words("iotanine") + " \ud800", "timestamp": 1})
    entry(11, "e10", "message", message={"role": "user", "content": words("kappaten") + " café", "timestamp": 1})
    entry(12, "e11", "message", message={"role": "user", "content": "mutwelve short", "timestamp": 1})
    rows[11] = rows[11].replace("caf\u00e9", "caf\\u00e9")  # an escape SQLite must decode the same
    # a duplicate key: Pi reads the last "content", SQLite's json_extract the first
    entry(13, "e12", "message", message={"role": "user", "content": words("omicronreal"), "timestamp": 1})
    rows[13] = rows[13].replace('"content":', '"content":' + _line(words("xidecoy")) + ',"content":', 1)
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


KEPT_ONCE = {"e1", "e2", "e3", "e5", "e6", "e7", "e8", "e9", "e11"}  # all of their text is one string of the line
MARKERS = (
    "omicronreal",
    "alphaone",
    "lambdaeleven",
    "betatwo",
    "gammathree",
    "gammatext",
    "deltafour",
    "epsilonfive",
    "zetasix",
    "etaseven",
    "thetaeight",
    "iotanine",
    "kappaten",
    "mutwelve",
    "café",
    "read",
)
QUERIES = (*MARKERS, "filler3", '"filler3 text"', "fill*", "alphaone OR betatwo", "filler1 -alphaone", "the", "a")
ROLES = (None, "user", "assistant", "toolResult", "compaction", "label", "custom_message")
VIEWS = (
    "SELECT session_id, entry_id, seq, role, text, text_chars, on_path FROM messages ORDER BY session_id, seq",
    "SELECT session_id, entry_id, summary, summary_chars FROM compactions ORDER BY session_id, seq",
    "SELECT session_id, entry_id, label, is_current FROM labels ORDER BY session_id, seq",
    "SELECT session_id, entry_id, call_index, name, result_chars FROM tool_calls ORDER BY session_id, seq, call_index",
)


def searches(store: SessionStore) -> list:
    """Every query with every role filter: the hits with their snippets and provenance."""
    return [[hit.to_json() for hit in store.search(q, role=role, limit=500)] for q in QUERIES for role in ROLES]


def views(conn: Connection) -> list:
    return [[tuple(row) for row in conn.execute(text(sql))] for sql in VIEWS]


def index_hits(conn: Connection) -> list:
    """What the index itself answers (SQLite), as another tool reading it would see it."""
    match = "SELECT rowid FROM entries_fts WHERE entries_fts MATCH :q ORDER BY rowid"
    return [[r[0] for r in conn.execute(text(match), {"q": fts.parse_query(q).fts5()})] for q in QUERIES]


def check_index(conn: Connection) -> None:
    """FTS5's own check of the index against its content (``entries_search``): raises if they differ."""
    conn.execute(text("INSERT INTO entries_fts (entries_fts, rank) VALUES ('integrity-check', 1)"))


def stored(conn: Connection) -> list:
    """Each row's searchable text and facts, wherever the text is kept (``textAt`` and its
    ``textChars`` left out of the facts)."""
    source = (
        "entries_search"
        if conn.execute(
            text("SELECT 1 FROM sqlite_master WHERE name = 'entries_search'" if is_sqlite(conn) else "SELECT NULL")
        ).scalar()
        else "entries"
    )
    rows = conn.execute(
        text(f"SELECT e.pk, s.search_text, e.facts FROM entries AS e JOIN {source} AS s ON s.pk = e.pk ORDER BY e.pk")
    )
    result = []
    for pk, body, facts in rows:
        values = orjson.loads(facts) if isinstance(facts, str) else facts
        if values.pop("textAt", None) is not None:
            del values["textChars"]
        result.append((pk, body, values))
    return result


def kept_once(conn: Connection) -> set[str]:
    return {
        r[0]
        for r in conn.execute(
            text("SELECT entry_id FROM entries WHERE facts ->> 'textAt' IS NOT NULL AND search_text = ''")
        )
    }


def test_long_texts_are_stored_once_and_read_as_before(tmp_path: Path) -> None:
    with SessionStore.connect(f"sqlite:///{tmp_path / 'once.db'}") as store:
        store.import_file(long_session(tmp_path / "long.jsonl"))
        fts.sync(store.engine)
        with read_transaction(store.engine) as conn:
            assert kept_once(conn) == KEPT_ONCE
            rows = conn.execute(text("SELECT entry_id, line, search_text, facts FROM entries WHERE kind = 'entry'"))
            for entry_id, line, search_text, facts in rows:
                expected_text, expected_facts = analysis_values(js_parse(line))[:2]
                got = orjson.loads(facts)
                if entry_id in KEPT_ONCE | {"e13"}:
                    assert got.pop("textAt").startswith("$.")
                    assert got.pop("textChars") == len(expected_text)
                if entry_id not in KEPT_ONCE:  # e13: SQLite read another string there, the text stays
                    assert search_text == expected_text
                assert got == orjson.loads(expected_facts)
            shown = dict(conn.execute(text("SELECT entry_id, text FROM messages")).all())
            assert shown["e1"] == words("alphaone") and shown["e11"] == words("kappaten") + " café"
            check_index(conn)
        for marker in MARKERS:
            hits = store.search(marker)
            assert hits and all("<mark>" in hit.snippet for hit in hits), marker
        assert store.search("xidecoy") == []


def test_migration_0010_down_and_up_with_data(db_url: str, tmp_path: Path) -> None:
    with SessionStore.connect(db_url) as store:
        for path in [*FILES, long_session(tmp_path / "long.jsonl")]:
            store.import_file(path)
        found = searches(store)
        with read_transaction(store.engine) as conn:
            shown = views(conn)
            indexed = index_hits(conn) if is_sqlite(conn) else None
            assert not is_sqlite(conn) or kept_once(conn) >= KEPT_ONCE
            texts = stored(conn)
    assert any(found) and all(shown)
    engine = make_engine(db_url)
    config = alembic_config(engine)
    command.downgrade(config, "0008")
    with write_transaction(engine) as conn:  # revision 0008: every text back in search_text
        assert views(conn) == shown
        assert stored(conn) == texts
        if is_sqlite(conn):
            assert conn.execute(text("SELECT count(*) FROM sqlite_master WHERE name = 'entries_search'")).scalar() == 0
            assert index_hits(conn) == indexed
            check_index(conn)
    command.upgrade(config, "head")
    engine.dispose()
    with SessionStore.connect(db_url) as store:
        assert searches(store) == found
        with read_transaction(store.engine) as conn:
            assert views(conn) == shown
            if is_sqlite(conn):
                assert kept_once(conn) >= KEPT_ONCE
                assert index_hits(conn) == indexed
                check_index(conn)


def test_deletes_prunes_reimports_and_recomputes_keep_the_index_consistent(tmp_path: Path) -> None:
    source = long_session(tmp_path / "long.jsonl")
    other = long_session(tmp_path / "other.jsonl", "0f0f0f0f-0000-4000-8000-000000000002")
    with SessionStore.connect(f"sqlite:///{tmp_path / 'life.db'}") as store:
        for path in [*FILES, source, other]:
            store.import_file(path)
        fts.sync(store.engine)
        store.delete("0f0f0f0f-0000-4000-8000-000000000002")  # rows kept in line alone, deleted
        with write_transaction(store.engine) as conn:
            check_index(conn)
        assert len(store.search("alphaone")) == 1
        store.import_path(source, replace=True)  # the same file again
        store.import_file(other)
        sm = store.open("0f0f0f0f-0000-4000-8000-000000000002")
        sm.append_message({"role": "user", "content": words("nuthirteen"), "timestamp": 2})
        assert len(store.search("alphaone")) == 2 and len(store.search("nuthirteen")) == 1
        # the abandoned branch of both long sessions, older than a day, goes
        report = store.prune(RetentionPolicy(older_than_ms=86_400_000), apply=True, vacuum=False)
        assert report.trimmed and store.search("lambdaeleven") == []
        with write_transaction(store.engine) as conn:
            check_index(conn)
        after = unordered(searches(store))
        exported = []
        for info in store.list_all():
            exported.append(tmp_path / f"export-{info.id}.jsonl")
            store.export_jsonl(info.id, exported[-1])
        with write_transaction(store.engine) as conn:
            conn.execute(text("UPDATE entries SET search_text = '', facts = '{}'"))  # the update trigger
            check_index(conn)
            assert (
                conn.execute(text("SELECT count(*) FROM entries_fts WHERE entries_fts MATCH 'alphaone'")).scalar() == 0
            )
        assert fts.rebuild(store.engine) == 0
        with write_transaction(store.engine) as conn:
            recompute_analysis(conn)
            check_index(conn)
            assert kept_once(conn) >= KEPT_ONCE - {"e2"}
    with SessionStore.connect(f"sqlite:///{tmp_path / 'fresh.db'}") as fresh:  # the same history imported anew
        for path in exported:
            fresh.import_file(path)
        assert unordered(searches(fresh)) == after


def unordered(results: list) -> list:
    """Search results without their order (newest first: by row key, which differs between stores)."""
    return [sorted(hits, key=lambda hit: (hit["sessionId"], hit["seq"])) for hits in results]


def test_a_session_moved_from_its_private_database_keeps_its_texts(store: SessionStore) -> None:
    """A new session lives in a private SQLite database until its first message; copied into the
    store, a text that database kept in ``line`` alone is searchable on either engine."""
    manager = store.create("/w")
    note = manager.append_custom_message_entry("note", words("rhofirst"), True)  # (still private)
    first = manager.append_message({"role": "user", "content": words("sigmafirst"), "timestamp": 1})
    assert [hit.entry_id for hit in store.search("rhofirst")] == [note]
    assert [hit.entry_id for hit in store.search("sigmafirst")] == [first]
    with read_transaction(store.engine) as conn:
        stored = dict(
            conn.execute(
                text("SELECT entry_id, search_text FROM entries WHERE entry_id IN (:a, :b)"), {"a": note, "b": first}
            ).all()
        )
        if is_sqlite(conn):
            assert stored == {note: "", first: ""}
            check_index(conn)
        else:
            assert stored == {note: words("rhofirst"), first: words("sigmafirst")}
