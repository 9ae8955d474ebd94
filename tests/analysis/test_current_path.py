"""``current_path`` reads the runs kept at write time (``path_runs``, ``store.db.current_path``): it
must return exactly what migration 0003's recursive view returned — kept below as the reference —
on the fixtures and the corpus, and after appends, branches, batches, compactions, re-imports,
prunes and deletes; so must the ``on_path`` flag of every view that joins the path."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from store.db.engine import read_transaction
from store.retention import RetentionPolicy, parse_duration
from store.session_store import SessionStore
from tests.analysis.conftest import History
from tests.analysis.test_tool_call_pairs import _assistant, _branched_file, _result
from tests.oracle_support import CORPUS_DIR

# migration 0003's current_path view, as a query
_WALK = """
WITH RECURSIVE walk(session_pk, first_seq, last_seq) AS (
    SELECT e.session_pk, e.run_start, e.seq
    FROM sessions AS s
    CROSS JOIN entries AS e
    WHERE e.session_pk = s.pk AND e.seq = s.leaf_seq AND e.run_start IS NOT NULL
  UNION ALL
    SELECT w.session_pk, p.run_start, p.seq
    FROM walk AS w
    CROSS JOIN entries AS h
    CROSS JOIN entries AS p
    WHERE h.session_pk = w.session_pk AND h.seq = w.first_seq
      AND p.session_pk = w.session_pk AND p.seq = h.parent_seq
      AND p.depth < h.depth
)
"""
_REFERENCE = _WALK + "SELECT session_pk, first_seq, last_seq FROM walk"
# the views with on_path, and the columns that tell their rows apart
_ON_PATH_VIEWS = {
    "messages": "seq",
    "usage_ledger": "seq",
    "tool_calls": "seq, call_index",
    "compactions": "seq",
    "branches": "seq",
}
_REFERENCE_FLAG = (
    "CASE WHEN EXISTS (SELECT 1 FROM walk AS w WHERE w.session_pk = v.session_pk "
    "AND v.seq BETWEEN w.first_seq AND w.last_seq) THEN 1 ELSE 0 END"
)


def assert_same_as_reference(store: SessionStore) -> int:
    """``current_path`` and every view's ``on_path`` equal what the recursive walk gives; returns
    the number of runs."""
    with read_transaction(store.engine) as conn:
        expected = sorted(conn.execute(text(_REFERENCE)).all())
        assert sorted(conn.execute(text("SELECT session_pk, first_seq, last_seq FROM current_path")).all()) == expected
        for view, key in _ON_PATH_VIEWS.items():
            flags = sorted(conn.execute(text(f"{_WALK} SELECT session_pk, {key}, {_REFERENCE_FLAG} FROM {view} AS v")))
            assert sorted(conn.execute(text(f"SELECT session_pk, {key}, on_path FROM {view}"))) == flags, view
    return len(expected)


def _path_rows(store: SessionStore) -> list[tuple]:
    with read_transaction(store.engine) as conn:
        return sorted(conn.execute(text("SELECT session_pk, first_seq, last_seq FROM path_runs")).all())


def test_current_path_equals_the_walk_on_fixtures_and_corpus(history: History) -> None:
    runs = assert_same_as_reference(history.store)
    assert runs > len(history.files)  # every session that Pi opens has a path, some several runs


def test_the_corpus_is_among_them(history: History) -> None:
    corpus = sorted(CORPUS_DIR.glob("*.jsonl"))
    if not corpus:
        pytest.skip(f"no corpus at {CORPUS_DIR}: the differential ran on the committed fixtures only")
    assert set(corpus) & set(history.files.values())


def _user(text_: str) -> dict:
    return {"role": "user", "content": text_, "timestamp": 1}


def test_appends_branches_batches_and_compactions(store: SessionStore) -> None:
    manager = store.create("/w")
    first = manager.append_message(_user("go"))
    manager.append_message(_assistant(("c1", "read")))
    manager.append_message(_result("c1", False))
    assert assert_same_as_reference(store) == 1
    linear = _path_rows(store)
    assert [row[2] for row in linear] == [None]  # the leaf's run stays open: appends need not touch it
    manager.branch(first)
    middle = manager.append_message(_user("again"))  # a new run: the path now leaves two rows behind
    assert assert_same_as_reference(store) == 2
    with manager.batch():
        manager.append_message(_assistant(("c2", "bash")))
        manager.branch(middle)
        manager.append_message(_user("third"))  # a branch inside the batch
        manager.append_message(_result("c2", True))
    assert assert_same_as_reference(store) == 3
    manager.append_compaction("summary", first, 100)
    manager.branch_with_summary(first, "left it")
    manager.append_message(_user("after the summary"))
    assert assert_same_as_reference(store) == 2
    manager.reset_leaf()
    manager.append_message(_user("a new root"))
    assert assert_same_as_reference(store) == 1
    with manager.batch():  # a batch that branches and then comes back to the leaf's run
        leaf = manager.get_leaf_id()
        manager.branch(first)
        manager.branch(leaf)
        manager.append_message(_user("linear after all"))
    assert assert_same_as_reference(store) == 1


def test_a_linear_append_writes_no_path_row(tmp_path: Path) -> None:
    """Counted by triggers on ``path_runs`` (SQLite): linear appends and batches leave the table
    alone, a branch rewrites the session's rows."""
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        manager = store.create("/w")
        first = manager.append_message(_user("go"))
        with store.engine.begin() as conn:
            conn.execute(text("CREATE TABLE path_writes (n INTEGER NOT NULL)"))
            conn.execute(text("INSERT INTO path_writes VALUES (0)"))
            for event in ("INSERT", "DELETE", "UPDATE"):
                conn.execute(
                    text(
                        f"CREATE TRIGGER count_{event.lower()} AFTER {event} ON path_runs "
                        "BEGIN UPDATE path_writes SET n = n + 1; END"
                    )
                )

        def writes() -> int:
            with read_transaction(store.engine) as conn:
                return conn.execute(text("SELECT n FROM path_writes")).scalar_one()

        for index in range(5):
            manager.append_message(_user(f"linear {index}"))
        with manager.batch():
            manager.append_message(_assistant(("c1", "read")))
            manager.append_message(_result("c1", False))
        assert writes() == 0
        manager.branch(first)
        manager.append_message(_user("branch"))
        assert writes() == 3  # the open run deleted; the closed run and the new open run inserted
        assert assert_same_as_reference(store) == 2


def test_a_file_that_grew_along_its_path_writes_no_path_row(tmp_path: Path) -> None:
    """A synced file whose new lines only lengthen the path adds to its turns and leaves
    ``path_runs`` alone (triggers count the writes, SQLite); new lines that branch, name an id
    defined later, or define an id again, and a non-object line (the new leaf), make the import walk
    the path again. After each, the runs, the turns and the off-path totals are what the walk and
    the views give."""
    from tests.analysis.test_kept_totals import assert_kept
    from tests.analysis.test_tool_call_pairs import _message

    now = 1_800_000_000_000
    source = _branched_file(tmp_path / "tp.jsonl", now)
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.import_file(source)
        with store.engine.begin() as conn:
            conn.execute(text("CREATE TABLE path_writes (n INTEGER NOT NULL)"))
            conn.execute(text("INSERT INTO path_writes VALUES (0)"))
            for event in ("INSERT", "DELETE", "UPDATE"):
                conn.execute(text(f"CREATE TRIGGER count_{event.lower()} AFTER {event} ON path_runs "
                                  "BEGIN UPDATE path_writes SET n = n + 1; END"))

        def grow(*lines: str) -> int:
            with source.open("a", encoding="utf-8") as file:
                file.write("".join(line + "\n" for line in lines))
            assert store.import_file(source).status == "appended"
            assert_same_as_reference(store)
            assert_kept(store)
            with read_transaction(store.engine) as conn:
                return conn.execute(text("SELECT n FROM path_writes")).scalar_one()

        assert grow(_message("g1", "u2", now + 1, _user("more")),
                    _message("g2", "g1", now + 2, _assistant(("k1", "read"))),
                    _message("g3", "g2", now + 3, _result("k1", True))) == 0
        assert grow(_message("g4", "g3", now + 4, _user("and more"))) == 0
        assert grow(_message("h1", "u1", now + 5, _user("a branch from the start"))) > 0  # a new run
        grow(_message("o1", "z1", now + 6, _user("names an id no line has yet")))
        written = grow(_message("p1", "h1", now + 7, _user("back below h1")))
        assert grow(_message("z1", "p1", now + 8, _user("defines z1: o1 moves below it"))) > written  # a late id
        written = grow(_message("q1", "z1", now + 9, _user("linear")))
        assert grow(_message("q2", "q1", now + 10, _user("linear"))) == written
        duplicated = grow(_message("o1", "q2", now + 11, _user("o1 again")))
        assert duplicated > written  # a superseded duplicate
        valued = grow("[1]")  # a line Pi keeps as an entry with no id: the new leaf, a path of its own
        assert valued > duplicated
        assert grow(_message("r1", "o1", now + 12, _user("after the value"))) > valued  # back below o1


def test_reimport_replacement_prune_and_delete(store: SessionStore, tmp_path: Path, clock) -> None:
    now = clock.now  # (the clock moves with every append: the file's lines must not)
    source = _branched_file(tmp_path / "tp.jsonl", now)
    store.import_file(source)
    assert assert_same_as_reference(store) == 2  # the current path leaves the abandoned branch
    other = store.create("/w")
    other.append_message(_user("go"))
    _branched_file(source, now, extra=3)  # the file grew: the import appends its new lines
    store.import_file(source)
    assert assert_same_as_reference(store) == 3
    lines = source.read_text("utf-8").splitlines()
    lines.append(lines[4].replace('"x2"', '"x3"').replace("old branch", "back on it"))  # back to the old branch
    source.write_text("".join(line + "\n" for line in lines), "utf-8")
    store.import_file(source)
    assert assert_same_as_reference(store) == 3
    source.write_text(source.read_text("utf-8").replace("worked", "replaced"), "utf-8")  # rewritten
    assert store.import_path(source, replace=True)[0].imported
    assert assert_same_as_reference(store) == 3
    _branched_file(source, now, extra=2)  # rewritten again, a path of one run below the fork
    assert store.import_path(source, replace=True)[0].imported
    before = _path_rows(store)
    report = store.prune(RetentionPolicy(parse_duration("30d")), apply=True)
    assert report.trimmed  # the abandoned branch went; the kept rows were renumbered, the runs merged
    assert assert_same_as_reference(store) == 2
    assert _path_rows(store) != before
    store.delete("tp")
    assert assert_same_as_reference(store) == 1
    store.delete(other.get_session_id())
    assert _path_rows(store) == []
