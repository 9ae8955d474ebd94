"""The SessionManager API on both engines: Pi's rules for appends, branches, labels, names,
context edits, compactions, deferred persistence, and failures that leave nothing behind."""

from __future__ import annotations

import pytest

from store.errors import (
    EntryNotFound,
    InvalidEntry,
    InvalidReplacement,
    InvalidSessionId,
    NotEditable,
    NotOnActiveBranch,
    NotPiSession,
    SessionExists,
)
from store.session_store import SessionStore
from tests.conftest import Clock
from tests.oracle_support import FIXTURES

pytestmark = pytest.mark.both_apis  # every test on the `store` fixture: on the sync API, then the async one


def user(text: str) -> dict:
    return {"role": "user", "content": text, "timestamp": 1}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": text}], "provider": "p", "model": "m",
            "api": "x", "stopReason": "stop", "timestamp": 2}


def ids(entries: list[dict]) -> list[str]:
    return [e["id"] for e in entries]


def test_seed_exercise_branches_survive_and_reopen_follows_the_last_branch(store: SessionStore) -> None:
    sm = store.create("/work/project")
    root = sm.append_message(user("root question"))
    a = sm.append_message(assistant("answer on branch A"))
    sm.branch(root)
    b = sm.append_message(assistant("answer on branch B"))
    assert ids(sm.get_branch()) == [root, b]
    assert sm.get_entry(a)["message"]["content"][0]["text"] == "answer on branch A"  # A is still stored
    reopened = store.open(sm.get_session_id())
    assert reopened.get_leaf_id() == b
    assert ids(reopened.get_branch()) == [root, b]
    assert {c["id"] for c in reopened.get_children(root)} == {a, b}
    custom = reopened.append_custom_entry("ext.state", {"k": 1})
    shown = reopened.append_custom_message_entry("ext.note", "visible to the model", True)
    assert ids(reopened.get_branch())[-2:] == [custom, shown]
    projection = store.open(sm.get_session_id()).build_session_projection()
    sources = [item.source_entry["id"] for item in projection.entries if item.messages]
    assert shown in sources and custom not in sources  # a custom message reaches the model, state does not
    assert projection.messages[-1] == {"role": "custom", "customType": "ext.note", "content": "visible to the model",
                                       "display": True, "timestamp": projection.messages[-1]["timestamp"]}
    assert [m["role"] for m in projection.messages] == ["user", "assistant", "custom"]  # branch A is not in it


def test_nothing_is_stored_before_the_first_user_or_assistant_message(store: SessionStore) -> None:
    sm = store.create("/w")
    sm.append_model_change("anthropic", "claude")
    sm.append_thinking_level_change("high")
    assert store.list_all() == []
    assert store.find_by_id(sm.get_session_id()) is None
    first = sm.append_message(user("hello"))
    infos = store.list_all()
    assert [i.id for i in infos] == [sm.get_session_id()]
    assert infos[0].first_message == "hello" and infos[0].message_count == 1
    assert [e["type"] for e in store.open(sm.get_session_id()).get_branch()] == [
        "model_change", "thinking_level_change", "message"]
    assert sm.get_leaf_id() == first


def test_in_memory_sessions_are_never_stored(store: SessionStore) -> None:
    sm = store.in_memory("/w")
    sm.append_message(user("hi"))
    sm.append_message(assistant("yo"))
    assert len(sm.get_branch()) == 2
    assert store.list_all() == []


def test_failed_flush_leaves_the_manager_unchanged(store: SessionStore) -> None:
    first = store.create("/w", session_id="fixed-id")
    first.append_message(user("one"))
    twin = store.create("/w", session_id="fixed-id")
    setup = twin.append_model_change("p", "m")
    with pytest.raises(SessionExists):
        twin.append_message(user("two"))
    assert twin.get_leaf_id() == setup
    assert ids(twin.get_branch()) == [setup]
    assert [e["message"]["content"] for e in store.open("fixed-id").get_branch()] == ["one"]


def test_an_id_stored_by_another_writer_after_the_look_is_session_exists(store: SessionStore,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """On PostgreSQL two writers storing one chosen id can both look, find nothing, and insert:
    the second got the driver's IntegrityError (its SQL and parameters), not SessionExists. The
    look is made to miss here, as it does when the other writer commits just after it."""
    from store.db import queries

    first = store.create("/w", session_id="fixed-id")
    first.append_message(user("one"))
    twin = store.create("/w", session_id="fixed-id")
    monkeypatch.setattr(queries, "session_by_id", lambda *args, **kwargs: None)
    with pytest.raises(SessionExists, match="fixed-id"):
        twin.append_message(user("two"))
    monkeypatch.undo()
    assert [e["message"]["content"] for e in store.open("fixed-id").get_branch()] == ["one"]


def test_failed_batch_stores_nothing(store: SessionStore) -> None:
    sm = store.create("/w")
    keep = sm.append_message(user("kept"))
    with pytest.raises(RuntimeError), sm.batch():
        sm.append_message(assistant("lost"))
        raise RuntimeError("boom")
    assert sm.get_leaf_id() == keep
    assert ids(store.open(sm.get_session_id()).get_branch()) == [keep]


def test_failed_single_append_stores_nothing_and_the_next_one_works(store: SessionStore) -> None:
    """The single-append fast path rolls back on the driver's connection and hands it back clean."""
    sm = store.create("/w")
    keep = sm.append_message(user("kept"))
    with pytest.raises(InvalidEntry, match="custom entry cannot be written as JSON"):
        sm.append_custom_entry("bad", {"not json": object()})  # fails inside the open transaction
    assert sm.get_leaf_id() == keep
    after = sm.append_message(user("after"))
    reopened = store.open(sm.get_session_id())
    assert ids(reopened.get_branch()) == [keep, after]
    assert store.find_by_id(sm.get_session_id()).message_count == 2


def test_batched_appends_chain_and_commit_together(store: SessionStore) -> None:
    sm = store.create("/w")
    with sm.batch():
        made = [sm.append_message(user(f"q{i}")) for i in range(50)]
    assert ids(store.open(sm.get_session_id()).get_branch()) == made


def test_branch_and_label_validation(store: SessionStore) -> None:
    sm = store.create("/w")
    m = sm.append_message(user("x"))
    with pytest.raises(EntryNotFound):
        sm.branch("nope")
    with pytest.raises(EntryNotFound):
        sm.append_label_change("nope", "tag")
    sm.append_label_change(m, "tag")
    assert sm.get_label(m) == "tag"
    sm.append_label_change(m, "")
    assert sm.get_label(m) is None


def test_session_names_are_sanitised_and_latest_wins(store: SessionStore) -> None:
    sm = store.create("/w")
    sm.append_message(user("x"))
    sm.append_session_info("  first\r\n\nname  ")
    assert sm.get_session_name() == "first name"
    sm.append_session_info("   ")
    assert sm.get_session_name() is None
    sm.append_session_info("second")
    assert store.find_by_id(sm.get_session_id()).name == "second"
    sm.append_session_info("\ufeff\x1cthird\u2028")  # JavaScript's trim: BOM and U+2028 go, U+001C stays
    assert sm.get_session_name() == "\x1cthird"
    with pytest.raises(InvalidEntry, match="session name must be a string"):
        sm.append_session_info(None)  # type: ignore[arg-type]
    cyclic: dict = {}
    cyclic["self"] = cyclic
    with pytest.raises(InvalidEntry, match="custom entry cannot be written as JSON"):
        sm.append_custom_entry("loop", cyclic)
    assert sm.get_session_name() == "\x1cthird"


def test_context_edit_rules(store: SessionStore) -> None:
    sm = store.create("/w")
    q = sm.append_message(user("question"))
    a = sm.append_message(assistant("answer"))
    model = sm.append_model_change("p", "m")
    with pytest.raises(InvalidReplacement):
        sm.append_context_edit(q, {"text": "no content key"})
    with pytest.raises(NotEditable):
        sm.append_context_edit(model, None)
    with pytest.raises(EntryNotFound):
        sm.append_context_edit("missing", None)
    edit = sm.append_context_edit(a, {"content": "shorter"})
    assert sm.get_entry(edit)["replacement"] == {"content": [{"type": "text", "text": "shorter"}]}
    user_edit = sm.append_context_edit(q, {"content": "plain stays a string"})
    assert sm.get_entry(user_edit)["replacement"] == {"content": "plain stays a string"}
    sm.branch(q)
    with pytest.raises(NotOnActiveBranch):
        sm.append_context_edit(a, None)


def test_retain_none_compaction_keeps_its_own_id(store: SessionStore) -> None:
    sm = store.create("/w")
    sm.append_message(user("x"))
    c = sm.append_compaction("summary", None, 123)
    assert sm.get_entry(c)["firstKeptEntryId"] == c
    assert list(sm.get_entry(c)) == ["type", "id", "parentId", "timestamp", "summary", "firstKeptEntryId",
                                     "tokensBefore"]


def test_branch_with_summary_records_the_left_leaf(store: SessionStore) -> None:
    sm = store.create("/w")
    q = sm.append_message(user("x"))
    a = sm.append_message(assistant("y"))
    s = sm.branch_with_summary(q, "tried y")
    entry = sm.get_entry(s)
    assert (entry["parentId"], entry["fromId"]) == (q, a)
    sm.reset_leaf()
    root_summary = sm.branch_with_summary(None, "from nothing")
    assert sm.get_entry(root_summary)["fromId"] == "root"
    assert sm.get_entry(root_summary)["parentId"] is None
    with pytest.raises(EntryNotFound):
        sm.branch_with_summary("missing", "x")


def test_reset_leaf_starts_a_new_root(store: SessionStore) -> None:
    sm = store.create("/w")
    sm.append_message(user("x"))
    sm.reset_leaf()
    assert sm.get_branch() == []
    root2 = sm.append_message(user("again"))
    assert ids(sm.get_branch()) == [root2]
    assert len(sm.get_tree()) == 2


def test_create_branched_session_keeps_the_path_and_reemits_labels(store: SessionStore) -> None:
    sm = store.create("/w")
    q = sm.append_message(user("q"))
    label = sm.append_label_change(q, "start")
    a = sm.append_message(assistant("a"))
    sm.branch(q)
    sm.append_message(assistant("other branch"))
    old_id = sm.get_session_id()
    new_id = sm.create_branched_session(a)
    assert sm.get_session_id() == new_id != old_id
    entries = sm.get_entries()
    assert [e["type"] for e in entries] == ["message", "message", "label"]
    assert entries[1]["parentId"] == q  # re-chained over the dropped label entry
    assert entries[2]["targetId"] == q and entries[2]["label"] == "start" and entries[2]["id"] != label
    assert sm.get_header()["parentSession"] == old_id
    assert store.find_by_id(new_id) is not None


def test_create_branched_session_inside_a_batch_is_refused(store: SessionStore) -> None:
    """It turns the manager into another session while the batch's transaction writes this one:
    the batch's row update once went to the new session (PostgreSQL: the old one then held a row
    past its last line and refused every later append; SQLite: the second transaction waited for
    the batch's own write lock until the lock timeout)."""
    sm = store.create("/w")
    q = sm.append_message(user("q"))
    old_id = sm.get_session_id()
    with sm.batch():
        a = sm.append_message(assistant("a"))
        with pytest.raises(RuntimeError, match=r"create_branched_session\(\) inside batch\(\)"):
            sm.create_branched_session(a)
        b = sm.append_message(user("b"))  # the batch goes on, as this session's
    assert sm.get_session_id() == old_id and len(store.list_all()) == 1
    reopened = store.open(old_id)
    assert ids(reopened.get_branch()) == [q, a, b] and reopened.get_version() == sm.get_version()
    new_id = sm.create_branched_session(a)  # after the block
    assert sm.get_session_id() == new_id and ids(sm.get_branch()) == [q, a]
    sm.append_message(user("c"))
    assert ids(store.open(old_id).get_branch()) == [q, a, b]


def test_a_batch_that_times_out_on_the_lock_raises_what_an_append_raises(db_url: str, monkeypatch) -> None:
    """Another writer holds the session (PostgreSQL: its row lock; SQLite: the write lock): a
    batch, like a single append, fails with SQLAlchemy's ``OperationalError`` "database is
    locked" once the lock timeout passes (the batch's statements go straight to the driver: its
    ``LockNotAvailable`` once surfaced as it was), and the manager can write once the lock is free."""
    from sqlalchemy.exc import OperationalError

    monkeypatch.setenv("PI_STORE_LOCK_TIMEOUT", "1")
    with SessionStore.connect(db_url) as store:
        sm = store.create("/w")
        q = sm.append_message(user("q"))
        writer = store.open(sm.get_session_id())
        with sm.batch():
            sm.append_message(assistant("a"))
            with pytest.raises(OperationalError, match=r"^database is locked"), writer.batch():
                writer.append_message(user("never stored"))
            with pytest.raises(OperationalError, match=r"^database is locked"):
                writer.branch_with_summary(q, "a summary")
            assert writer.get_leaf_id() == q
        writer.refresh()
        writer.append_message(user("after"))
        branch = store.open(sm.get_session_id()).get_branch()
        assert branch[0]["id"] == q and [e["message"]["role"] for e in branch] == ["user", "assistant", "user"]


def test_fork_from_copies_every_branch(store: SessionStore) -> None:
    sm = store.create("/w")
    q = sm.append_message(user("q"))
    sm.append_message(assistant("a"))
    sm.branch(q)
    sm.append_message(assistant("b"))
    fork = store.fork_from(sm.get_session_id(), "/elsewhere")
    assert fork.get_cwd() == "/elsewhere"
    assert ids(fork.get_entries()) == ids(sm.get_entries())
    assert fork.get_header()["parentSession"] == sm.get_session_id()


def test_listing_and_continue_recent(store: SessionStore) -> None:
    one = store.create("/a")
    one.append_message(user("first a"))
    two = store.create("/a")
    two.append_message(user("second a"))
    other = store.create("/b")
    other.append_message(user("b"))
    assert [i.id for i in store.list("/a")] == [two.get_session_id(), one.get_session_id()]
    assert store.continue_recent("/a").get_session_id() == two.get_session_id()
    fresh = store.continue_recent("/c")
    assert store.find_by_id(fresh.get_session_id()) is None  # new, not stored until it talks


@pytest.mark.parametrize("name", ["edge-bom.jsonl", "edge-not-session.jsonl"])
def test_a_stored_file_pi_refuses_to_open_is_not_opened_or_written(store: SessionStore, tmp_path, name: str) -> None:
    """A file without a session header first (here: after a byte order mark, or none at all),
    stored because it was named: ``open`` once gave a manager with no entries whose appends made
    a new root, and the export was then a file Pi refused. Pi's ``SessionManager.open`` refuses it."""
    source = FIXTURES / "sessions" / name
    session_id = store.import_jsonl(source, keep_non_sessions=True)
    with pytest.raises(NotPiSession, match=r"is not a valid Pi session: Pi refuses to open its file"):
        store.open(session_id)
    with pytest.raises(NotPiSession):
        store.fork_from(session_id, "/elsewhere")
    store.export_jsonl(session_id, tmp_path / name)
    assert (tmp_path / name).read_bytes() == source.read_bytes()  # kept as it was


def test_ids_that_are_not_strings_name_no_entry(store: SessionStore) -> None:
    sm = store.create("/w")
    root = sm.append_message(user("x"))
    assert [c["id"] for c in sm.get_children(None)] == [root]  # Pi: entries whose parentId is null
    assert sm.get_children(123) == [] and sm.get_label(123) is None  # type: ignore[arg-type]
    for bad in (None, 123):
        with pytest.raises(EntryNotFound):
            sm.append_label_change(bad, "tag")  # type: ignore[arg-type]
        with pytest.raises(EntryNotFound):
            sm.branch(bad)  # type: ignore[arg-type]


def test_the_id_source_gives_entry_and_session_ids_and_taken_short_ids_are_drawn_again(db_url: str) -> None:
    drawn: list[str] = []
    queue = {"uuid": ["aaaaaaaa-0000-4000-8000-000000000001", "aaaaaaaa-0000-4000-8000-000000000002",
                      "bbbbbbbb-0000-4000-8000-000000000003"],
             "session": ["sess-1"]}

    def ids(kind: str) -> str:
        drawn.append(kind)
        return queue[kind].pop(0)

    with SessionStore.connect(db_url, clock=lambda: 1_767_225_600_000.0, ids=ids) as s:
        sm = s.create("/w")
        first = sm.append_message(user("one"))
        second = sm.append_message(user("two"))  # aaaaaaaa is taken: the next UUID is drawn
        assert (sm.get_session_id(), first, second) == ("sess-1", "aaaaaaaa", "bbbbbbbb")
        assert drawn == ["session", "uuid", "uuid", "uuid"]


@pytest.mark.parametrize("bad", ["", "-a", "a-", "a b", "é", "a/b", "a\n"])
def test_chosen_session_ids_must_be_ones_pi_accepts(store: SessionStore, bad: str) -> None:
    with pytest.raises(InvalidSessionId):
        store.create("/w", session_id=bad)
    with pytest.raises(InvalidSessionId):
        store.in_memory("/w", session_id=bad)
    assert store.create("/w", session_id="A.b_c-9").get_session_id() == "A.b_c-9"


def test_a_single_append_whose_first_id_is_taken_makes_the_entry_a_batch_would(db_url: str) -> None:
    """The single append leaves its first candidate id to the insert to check; when that id is
    taken the entry is made again with the next candidate: the same ids drawn, one clock
    reading, the same stored entry as the batch path, which looks every candidate up first."""
    made: list[list[dict]] = []
    for batched in (False, True):
        uuids = iter(["aaaaaaaa-0000-4000-8000-000000000001", "aaaaaaaa-0000-4000-8000-000000000002",
                      "aaaaaaaa-0000-4000-8000-000000000003", "cccccccc-0000-4000-8000-000000000004"])
        drawn: list[str] = []

        def ids(kind: str, uuids=uuids, drawn=drawn) -> str:
            drawn.append(kind)
            return next(uuids) if kind == "uuid" else "sess-1"

        clock = Clock()
        with SessionStore.connect(db_url, clock=clock, ids=ids) as s:
            sm = s.create("/w")
            sm.append_message(user("one"))
            readings, version = clock.now, sm.get_version()
            if batched:
                with sm.batch():
                    sm.append_message(user("two"))
            else:
                sm.append_message(user("two"))
            assert clock.now == readings + 1
            assert drawn == ["session", "uuid", "uuid", "uuid", "uuid"]
            assert sm.get_leaf_id() == "cccccccc" and sm.get_version() == version + 1
            made.append(sm.get_entries())
            s.delete("sess-1")
    assert made[0] == made[1] and made[0][-1]["parentId"] == "aaaaaaaa"
