"""Arguments of the public API that the database cannot take as given: text with NUL or lone
surrogates (PostgreSQL's text refuses NUL; neither engine stores a lone surrogate, so stored text
is in ``store.db.stored_text.db_text``'s form), numbers past a BIGINT, values of the wrong type.
Each is looked up in the stored form or refused with a ValueError / TypeError naming it — never
a driver's error, and the same on both engines."""

from __future__ import annotations

import pytest

from store.errors import SessionNotFound
from store.format import js_stringify
from store.session_store import SessionStore

pytestmark = pytest.mark.both_apis

SURROGATE_CWD = "/tmp/caf\udce9"  # how Python decodes a path that is not UTF-8
NUL_CWD = "/tmp/n\x00c"


def user(text: str) -> dict:
    return {"role": "user", "content": text, "timestamp": 1}


@pytest.mark.parametrize("cwd", [SURROGATE_CWD, NUL_CWD])
def test_a_cwd_the_database_cannot_hold_is_found_again(store: SessionStore, cwd: str) -> None:
    sm = store.create(cwd)
    sm.append_message(user("x"))
    assert sm.get_cwd() == cwd
    assert [info.id for info in store.list(cwd)] == [sm.get_session_id()]
    again = store.continue_recent(cwd)
    assert again.get_session_id() == sm.get_session_id() and again.get_cwd() == cwd
    assert store.open(sm.get_session_id()).get_cwd() == cwd
    assert store.list("/tmp/elsewhere") == []


@pytest.mark.parametrize("odd", ["\udc00", "\x00"])
def test_listing_gives_header_fields_as_written(store: SessionStore, odd: str, tmp_path) -> None:
    """The columns hold db_text's escape (``\\udc00``); ``list`` and ``find_by_id`` give the id,
    cwd and parent session as the (imported) header has them, so that ``open(info.id)`` opens it."""
    lines = [{"type": "session", "version": 3, "id": "s" + odd, "timestamp": "2026-03-01T00:00:00.000Z",
              "cwd": "/w" + odd, "parentSession": "p" + odd},
             {"type": "message", "id": "a" + odd, "parentId": None, "timestamp": "2026-03-01T00:00:01.000Z",
              "message": user("findable")}]
    path = tmp_path / "odd.jsonl"
    path.write_text("".join(js_stringify(line) + "\n" for line in lines), "ascii")
    store.import_jsonl(path)
    [info] = store.list("/w" + odd)
    assert (info.id, info.cwd, info.parent_session) == ("s" + odd, "/w" + odd, "p" + odd)
    assert store.find_by_id("s" + odd) == info and [i.id for i in store.list_all()] == ["s" + odd]
    [hit] = store.search("findable")  # its ids too (they were the escape text)
    assert (hit.session_id, hit.entry_id) == ("s" + odd, "a" + odd)
    sm = store.open(info.id)
    assert (sm.get_session_id(), sm.get_cwd()) == ("s" + odd, "/w" + odd)  # the manager's too (it was escaped)
    sm.append_message(user("y"))  # its writes and refresh compare the stored form
    sm.refresh()
    branched = store.open(sm.create_branched_session(sm.get_leaf_id()))
    assert branched.get_header()["parentSession"] == "s" + odd


@pytest.mark.parametrize("text", ["\x00", "\ud800", "a\x00b"])
def test_filters_with_text_no_row_can_hold_match_nothing(store: SessionStore, text: str) -> None:
    sm = store.create("/w")
    sm.append_message(user("findable"))
    assert store.list_all(name=text) == [] and store.list_all(model=text) == [] and store.list(text) == []
    assert store.search("findable", role=text) == []
    assert [hit.role for hit in store.search("findable", role="user")] == ["user"]
    with pytest.raises(SessionNotFound):
        store.delete(text)
    assert len(store.list_all()) == 1


@pytest.mark.parametrize("options", [{"limit": -1}, {"limit": True}, {"limit": 2.5}, {"since_ms": "x"},
                                     {"until_ms": 2**70}, {"since_ms": float("nan")}])
def test_listing_bounds_are_checked(store: SessionStore, options: dict) -> None:
    store.create("/w").append_message(user("x"))
    name = next(iter(options))
    with pytest.raises(ValueError, match=f"^{name} must be "):
        store.list_all(**options)


def test_listing_bounds_that_fit(store: SessionStore) -> None:
    store.create("/w").append_message(user("x"))
    assert len(store.list_all(limit=0)) == 0 and len(store.list_all(limit=5, since_ms=0, until_ms=2**62)) == 1
    assert len(store.list_all(since_ms=0.5)) == 1  # a fraction of a millisecond is a number too


def test_claims_and_ids_of_the_wrong_kind_are_refused(store: SessionStore) -> None:
    sm = store.create("/w")
    sm.append_message(user("x"))
    session_id = sm.get_session_id()
    with pytest.raises(ValueError, match="owner name cannot hold NUL or lone surrogates"):
        store.claim(session_id, "a\x00b", force=True)
    for ttl in (2**70, -1, float("nan")):
        with pytest.raises(ValueError, match=r"^ttl_ms must be milliseconds"):
            store.claim(session_id, "owner", ttl_ms=ttl)
    assert store.claims() == []  # nothing was taken
    for wrong in (None, 5):
        with pytest.raises(TypeError, match=r"^a session id is a string"):
            store.open(wrong)  # type: ignore[arg-type]
    assert store.claim(session_id, "owner", ttl_ms=1000).owner == "owner"


@pytest.mark.parametrize("odd", ["\udc00", "\x00"])
def test_listing_gives_name_and_first_message_as_written(store: SessionStore, odd: str) -> None:
    """The listing columns hold db_text's escape; list gave ``name\\\\udc00`` where the manager gives
    ``name\\udc00``."""
    sm = store.create("/w")
    sm.append_message(user(f"hi {odd} there"))
    sm.append_session_info(f"name{odd}")
    [info] = store.list_all()
    assert (info.name, info.first_message) == (f"name{odd}", f"hi {odd} there") == (sm.get_session_name(),
                                                                                    f"hi {odd} there")
    plain = store.create("/w")
    plain.append_message(user("C:\\work\\utils and \\u00e9"))  # backslash-u, but not an escape of db_text's
    assert store.find_by_id(plain.get_session_id()).first_message == "C:\\work\\utils and \\u00e9"
