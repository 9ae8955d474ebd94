"""Full-text search on both engines: every kind of content, filters, provenance after branching,
compaction and context edits, the query syntax, and updates right after an append."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import unicodedata

import pytest

from store.analysis.fts import BadQuery, parse_query
from store.analysis.search import SearchHit
from store.db.engine import is_sqlite
from store.session_store import SessionStore

USAGE = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15,
         "cost": {"input": 0.1, "output": 0.2, "cacheRead": 0, "cacheWrite": 0, "total": 0.3}}

pytestmark = pytest.mark.both_apis  # the tests on the `store` fixture: on the sync API, then the async one


def assistant(text: str, *blocks: dict) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": text}, *blocks], "api": "x",
            "provider": "anthropic", "model": "claude-test", "usage": USAGE, "stopReason": "stop", "timestamp": 1}


def build(store: SessionStore) -> tuple[str, dict[str, str]]:
    """A session with every kind of searchable content, a branch left behind, a compaction and
    context edits; returns its id and the entry id of each marker word."""
    sm = store.create("/work/search")
    ids: dict[str, str] = {}
    ids["zebra"] = sm.append_message({"role": "user", "content": "first question about zebra", "timestamp": 1})
    ids["yak"] = sm.append_message(assistant(
        "an answer with yak", {"type": "thinking", "thinking": "pondering quokka"},
        {"type": "toolCall", "id": "call-1", "name": "read", "arguments": {"path": "/src/platypus.py"}},
    ))
    ids["wombat"] = sm.append_message({"role": "toolResult", "toolCallId": "call-1", "toolName": "read",
                                       "content": [{"type": "text", "text": "file content wombat"}],
                                       "isError": False, "timestamp": 2})
    ids["narwhal"] = sm.append_message({"role": "user", "content": "second question narwhal", "timestamp": 3})
    ids["ocelot"] = sm.append_message(assistant("reply about ocelot"))
    sm.branch(ids["yak"])
    ids["walrus"] = sm.append_message({"role": "user", "content": "abandoned walrus", "timestamp": 4})
    sm.branch(ids["ocelot"])
    ids["capybara"] = sm.append_message({"role": "user", "content": "kept capybara", "timestamp": 5})
    ids["meerkat"] = sm.append_custom_message_entry("ext", "injected meerkat", True)
    ids["iguana"] = sm.append_message({"role": "bashExecution", "command": "ls iguana", "output": "file jackal",
                                       "exitCode": 0, "cancelled": False, "truncated": False, "timestamp": 6})
    ids["armadillo"] = sm.append_compaction("summary of armadillo", ids["narwhal"], 1234)
    sm.append_context_edit(ids["ocelot"], None)
    ids["gazelle"] = sm.append_context_edit(ids["narwhal"], {"content": "replaced by gazelle"})
    sm.append_label_change(ids["zebra"], "bookmark heron")
    sm.append_session_info("session named koala")
    ids["okapi"] = sm.append_message({"role": "user", "content": "after the compaction okapi", "timestamp": 7})
    ids["jackal"] = ids["iguana"]
    ids["quokka"] = ids["platypus"] = ids["yak"]
    return sm.get_session_id(), ids


def only(hits: list[SearchHit]) -> SearchHit:
    assert len(hits) == 1, [(h.entry_id, h.snippet) for h in hits]
    return hits[0]


def test_every_kind_of_content_is_found(store: SessionStore) -> None:
    session_id, ids = build(store)
    for word in ("zebra", "yak", "quokka", "platypus", "wombat", "narwhal", "ocelot", "walrus", "capybara",
                 "meerkat", "iguana", "jackal", "armadillo", "gazelle", "okapi"):
        hit = only(store.search(word))
        assert (hit.entry_id, hit.session_id) == (ids[word], session_id), word
        assert f"<mark>{word}</mark>" in hit.snippet.lower(), hit.snippet
    assert only(store.search("heron")).type == "label"
    assert only(store.search("koala")).type == "session_info"
    hit = only(store.search("wombat"))
    assert (hit.role, hit.type) == ("toolResult", "message") and hit.timestamp


def test_provenance_of_a_first_kept_entry_whose_id_holds_a_lone_surrogate(store: SessionStore, tmp_path) -> None:
    """The compaction's ``firstKeptEntryId`` is escaped where the store keeps it; looked up in
    that form it named no entry, and the kept message was reported "before" the compaction."""
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"type":"session","version":3,"id":"sur","timestamp":"2025-02-01T09:00:00.000Z","cwd":"/h"}\n'
        '{"type":"message","id":"r\\udc00","parentId":null,"timestamp":"2025-02-01T09:00:01.000Z",'
        '"message":{"role":"user","content":"tapir"}}\n'
        '{"type":"compaction","id":"k","parentId":"r\\udc00","timestamp":"2025-02-01T09:00:02.000Z",'
        '"summary":"s","firstKeptEntryId":"r\\udc00","tokensBefore":1}\n', "utf-8")
    store.import_file(path)
    hit = only(store.search("tapir"))
    assert hit.provenance.compaction == "kept" and hit.entry_id == "r\udc00"  # the id, not its stored escape
    assert [m.get("content") for m in store.open("sur").build_session_context().messages][1:] == ["tapir"]


def test_provenance_after_branching_compaction_and_context_edits(store: SessionStore) -> None:
    build(store)

    def where(word: str) -> tuple[str, str | None, str | None]:
        p = only(store.search(word)).provenance
        return p.branch, p.compaction, p.edited

    assert where("zebra") == ("current", "before", None)  # summarised away
    assert where("narwhal") == ("current", "kept", "replaced")  # first kept entry, then replaced
    assert where("ocelot") == ("current", "kept", "hidden")
    assert where("capybara") == ("current", "kept", None)
    assert where("walrus") == ("abandoned", "before", None)
    assert where("armadillo") == ("current", "after", None)  # the compaction itself
    assert where("gazelle") == ("current", "after", None)
    assert where("okapi") == ("current", "after", None)
    assert only(store.search("walrus")).provenance.to_json() == {
        "onPath": False, "branch": "abandoned", "compaction": "before", "edited": None}


def test_filters(store: SessionStore) -> None:
    session_id, ids = build(store)
    other = store.create("/elsewhere")
    other_id = other.append_message({"role": "user", "content": "zebra elsewhere", "timestamp": 1})
    assert {h.entry_id for h in store.search("zebra")} == {ids["zebra"], other_id}
    assert [h.entry_id for h in store.search("zebra", session=session_id)] == [ids["zebra"]]
    assert [h.entry_id for h in store.search("question", role="user")] == [ids["narwhal"], ids["zebra"]]
    assert store.search("question", role="assistant") == []
    assert [h.entry_id for h in store.search("armadillo", role="compaction")] == [ids["armadillo"]]
    assert store.search("walrus", path_only=True) == []
    assert [h.entry_id for h in store.search("question", path_only=True)] == [ids["narwhal"], ids["zebra"]]
    assert len(store.search("question", limit=1)) == 1


def test_path_only_reads_past_a_page_of_abandoned_hits(store: SessionStore) -> None:
    sm = store.create("/w")
    keep = sm.append_message({"role": "user", "content": "needle on the path", "timestamp": 1})
    with sm.batch():
        for i in range(250):  # more abandoned hits than one round of candidates
            sm.branch(keep)
            sm.append_message({"role": "user", "content": f"needle abandoned {i}", "timestamp": 2})
        sm.branch(keep)
        last = sm.append_message({"role": "user", "content": "the end", "timestamp": 3})
    assert sm.get_leaf_id() == last
    assert [h.entry_id for h in store.search("needle", path_only=True)] == [keep]
    assert len(store.search("needle", limit=300)) == 251


def test_query_syntax(store: SessionStore) -> None:
    _, ids = build(store)
    assert only(store.search('"second question"')).entry_id == ids["narwhal"]
    assert store.search('"question second"') == []
    assert only(store.search("narwh*")).entry_id == ids["narwhal"]
    assert [h.entry_id for h in store.search("question -zebra")] == [ids["narwhal"]]
    assert {h.entry_id for h in store.search("zebra OR okapi")} == {ids["zebra"], ids["okapi"]}
    assert only(store.search("/src/platypus.py")).entry_id == ids["yak"]  # path parts, on both engines
    assert only(store.search("ZEBRA")).entry_id == ids["zebra"]
    # parentheses group (expanded to alternatives of conjunctions), on both engines
    assert {h.entry_id for h in store.search("question (zebra OR narwhal)")} == {ids["zebra"], ids["narwhal"]}
    assert [h.entry_id for h in store.search("question -(zebra OR okapi)")] == [ids["narwhal"]]
    assert {h.entry_id for h in store.search('("second question" OR yak) -ocelot')} == {ids["narwhal"], ids["yak"]}
    for bad in ("", "   ", "-zebra", "!!!", "-(zebra OR okapi)", "()", "(" * 101 + "zebra"):
        with pytest.raises(BadQuery):
            store.search(bad)


@pytest.mark.parametrize(("query", "fts5"), [
    ("(a OR b) c", '("a" AND "c") OR ("b" AND "c")'),
    ("a (b OR c", '("a" AND "b") OR ("a" AND "c")'),  # a group left open closes at the end
    ("a) b", '("a" AND "b")'),  # a parenthesis that closes nothing is left out
    ("print(x) y", '("print(x)" AND "y")'),  # inside a word: part of it (FTS5 splits it: a phrase, as foo-bar)
    ('("a b" OR c) d', '("a b" AND "d") OR ("c" AND "d")'),
    ('-("a b" OR c) d', '("d" NOT "a b" NOT "c")'),
    ("NOT (a b) c", '("c" NOT "a") OR ("c" NOT "b")'),  # De Morgan
    ("-(-(a OR b)) c", '("a" AND "c") OR ("b" AND "c")'),
    ("a AND (b OR NOT c) OR d", '("a" AND "b") OR ("a" NOT "c") OR ("d")'),
    ("(a OR) (OR b)", '("a" AND "b")'),  # alternatives with no term are left out, as before
])
def test_parentheses_group(query: str, fts5: str) -> None:
    assert parse_query(query).fts5() == fts5


def test_parentheses_that_expand_too_far_are_refused() -> None:
    with pytest.raises(BadQuery, match="expand to more than 20,000 terms"):
        parse_query(" ".join(f"(a{i} OR b{i})" for i in range(11)))  # 2**11 alternatives of 11 terms
    assert len(parse_query(" ".join(f"(a{i} OR b{i})" for i in range(10))).alternatives) == 2**10
    words = " ".join(f"w{i}" for i in range(100))  # few alternatives, each long: 2**8 x 108 terms
    with pytest.raises(BadQuery, match="20,000 terms"):
        parse_query(f"{words} " + " ".join(f"(a{i} OR b{i})" for i in range(8)))


def test_parse_query_compiles_the_same_meaning_for_both_engines() -> None:
    query = parse_query('alpha "beta gamma" delt* -epsilon OR zeta-eta')
    # FTS5 gets each term as typed and splits it with its index's tokenizer (zeta-eta: a phrase)
    assert query.fts5() == '("alpha" AND "beta gamma" AND "delt" * NOT "epsilon") OR ("zeta-eta")'
    assert query.tsquery() == ("(((((('alpha') & ('beta' <-> 'gamma')) & (('delt':*) & !('epsilon')))) | "
                               "(('zeta' <-> 'eta'))))")  # balanced trees (see test_twenty_thousand_alternatives)
    # PostgreSQL's index of words (migration 0015): a phrase's words, an excluded phrase checked later
    assert query.words_tsquery() == ("(((((('alpha' & 'beta') & ('gamma' & 'delt':*)) & !('epsilon'))) | "
                                     "(('zeta' & 'eta'))))")
    assert query.has_phrase()
    excluded_phrase = parse_query('alpha -"beta gamma"')
    assert (excluded_phrase.words_tsquery(), excluded_phrase.has_phrase()) == ("(('alpha'))", True)
    assert not parse_query("alpha delt* -epsilon").has_phrase()


def test_twenty_thousand_alternatives(store: SessionStore) -> None:
    """PostgreSQL evaluates a tsquery recursively: a chain of 20,000 alternatives exceeded its
    stack depth ("stack depth limit exceeded"), so they are joined as a balanced tree."""
    sm = store.create("/work/many")
    hit = sm.append_message({"role": "user", "content": "one needle here", "timestamp": 1})
    query = " OR ".join([f"w{n}" for n in range(20_000)] + ["needle"])
    depth = itertools.accumulate(1 if c == "(" else -1 if c == ")" else 0 for c in parse_query(query).tsquery())
    assert max(depth) < 20
    assert only(store.search(query, limit=5)).entry_id == hit


def test_a_word_longer_than_postgresql_indexes_is_a_bad_query_there(store: SessionStore) -> None:
    """PostgreSQL keeps words of at most 2047 bytes; casting a longer one to tsquery failed in the
    server (an OperationalError out of search). SQLite's index holds it."""
    sm = store.create("/work/long")
    hit = sm.append_message({"role": "user", "content": "long " + "a" * 2100 + " end", "timestamp": 1})
    if is_sqlite(store.engine):
        assert only(store.search("a" * 2100)).entry_id == hit
    else:
        with pytest.raises(BadQuery, match="at most 2047 bytes"):
            store.search("long " + "a" * 2048)


def test_words_are_runs_of_letters_and_digits_on_both_engines(store: SessionStore) -> None:
    """PostgreSQL's text-search parser reads ``0e02b2c3`` as a number and a word and
    ``v1.2.3`` as a version; its index of words (migration 0015) splits as SQLite does."""
    sm = store.create("/work/words")
    uuid = sm.append_message({"role": "user", "content": "request f47ac10b-58cc-0e02b2c3d479 and 1e293x",
                              "timestamp": 1})
    version = sm.append_message({"role": "user", "content": "pinned v1.2.3 of Überzeug, x² and ½", "timestamp": 2})
    order = sm.append_message({"role": "user", "content": "gamma beta, then alpha", "timestamp": 3})
    assert only(store.search("0e02b2c3d479")).entry_id == uuid
    assert only(store.search("1e293x")).entry_id == uuid
    assert only(store.search('"58cc 0e02b2c3d479"')).entry_id == uuid
    assert store.search("0e02") == [] and store.search("1e293") == []
    assert only(store.search("0e02b*")).entry_id == uuid
    assert only(store.search("v1.2.3")).entry_id == version
    assert only(store.search("überzeug")).entry_id == version
    assert only(store.search("x²")).entry_id == only(store.search('"x² and ½"')).entry_id == version
    assert store.search("x") == []  # not split off its ² (glibc's [:alnum:] leaves ² out)
    assert only(store.search("alpha beta")).entry_id == order
    assert store.search('"alpha beta"') == []
    assert only(store.search('"gamma beta" -"then beta"')).entry_id == order
    assert store.search('alpha -"gamma beta"') == []
    assert only(store.search('"beta alpha" OR "then alpha"')).entry_id == order


def test_decomposed_accents_are_found_as_typed(store: SessionStore) -> None:
    """Text whose accents are combining marks (NFD: macOS writes file names so, and text copied
    from them keeps it) is found by the same text on both engines. SQLite's tokenizer keeps a
    combining accent in its word (``cafe`` + U+0301) while the query's words, letters and digits,
    ended before it: SQLite looked for ``cafe`` and found nothing. It now splits the terms itself."""
    sm = store.create("/work/nfd")
    hit = sm.append_message({"role": "user", "content": unicodedata.normalize("NFD", "le café noir à Genève"),
                             "timestamp": 1})
    for query in ("café", "GENÈVE", '"café noir"', "Genè*", "café -Zürich", "(café OR thé) noir"):
        assert only(store.search(unicodedata.normalize("NFD", query))).entry_id == hit, query
    marked = unicodedata.normalize("NFD", "le <mark>café</mark> noir")  # the accent marked with its letter
    assert only(store.search(unicodedata.normalize("NFD", "café"))).snippet.startswith(marked)


def test_characters_sqlite_cannot_take_in_a_string_are_word_breaks(store: SessionStore) -> None:
    sm = store.create("/work/nul")
    hit = sm.append_message({"role": "user", "content": "alpha beta", "timestamp": 1})
    assert only(store.search('alpha\x00beta "beta\ud800"')).entry_id == hit


@pytest.mark.sync_api_only("session_from_entries: not in the async API")
def test_an_append_is_found_at_once(store: SessionStore) -> None:
    session_id, _ = build(store)
    assert store.search("tapir") == []
    sm = store.open(session_id)
    fresh = sm.append_message({"role": "user", "content": "a fresh tapir", "timestamp": 9})
    assert only(store.search("tapir")).entry_id == fresh
    imported_text = {"type": "message", "id": "cafe0001", "parentId": None, "timestamp": "2026-01-01T00:00:00.000Z",
                     "message": {"role": "user", "content": "imported gerenuk", "timestamp": 1}}
    other = store.session_from_entries(
        {"type": "session", "version": 3, "id": "imported-1", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/i"},
        [imported_text], persist=True)
    assert only(store.search("gerenuk")).entry_id == "cafe0001" and other.get_session_id() == "imported-1"


def test_unknown_session_is_an_error(store: SessionStore) -> None:
    from store.errors import SessionNotFound

    with pytest.raises(SessionNotFound):
        store.search("x", session="nope")


@pytest.mark.sync_api_only("the CLI is the subject")
def test_cli_search_json(store: SessionStore, db_url: str) -> None:
    _, ids = build(store)
    done = subprocess.run([sys.executable, "-m", "store.cli", "--db", db_url, "search", "wombat", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    [hit] = json.loads(done.stdout)
    assert hit["entryId"] == ids["wombat"] and hit["provenance"]["branch"] == "current"
    assert set(hit) == {"entryId", "sessionId", "seq", "type", "role", "timestamp", "snippet", "provenance"}
    text = subprocess.run([sys.executable, "-m", "store.cli", "--db", db_url, "search", "walrus", "--path-only"],
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and text.stdout == ""
    bad = subprocess.run([sys.executable, "-m", "store.cli", "--db", db_url, "search", "-"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "nothing to search" in bad.stderr


def test_a_snippet_marks_only_the_matches(store: SessionStore) -> None:
    """A ``<mark>`` written in the text came out as a highlight (the page showed "important" as a
    match, and JSON readers could not tell the text's tags from the matches): the snippet is an
    HTML fragment, its text escaped."""
    from store.web.render import snippet

    sm = store.create("/w")
    sm.append_message({"role": "user", "content": "In HTML write <mark>important</mark> then zebracorn & co",
                       "timestamp": 1})
    hit = only(store.search("zebracorn"))
    assert hit.snippet == "In HTML write &lt;mark&gt;important&lt;/mark&gt; then <mark>zebracorn</mark> &amp; co"
    assert str(snippet(hit.snippet)) == hit.snippet  # the viewer shows it as it is (one highlight)
    assert str(snippet("\x1b[31m<a> & <mark>b</mark>")) == "&lt;a&gt; &amp; <mark>b</mark>"
