"""The JSON API against the command line: the same shapes and numbers as ``pi-store list
--json``, ``search --json``, ``stats --json`` and ``inspect --leaf``, on both engines."""

from __future__ import annotations

import base64
import json
import re

import pytest

from store.describe import describe_session
from store.format import js_stringify
from store.session_store import SessionStore
from tests.web import sessions
from tests.web.conftest import Served, pi_store


def cli_json(served: Served, *args: str) -> object:
    return json.loads(pi_store(served.db_url, *args).stdout)


def test_sessions_is_list_json(served: Served) -> None:
    assert served.get("/api/sessions").json() == cli_json(served, "list", "--json")
    for query, args in (("?sort=cost&limit=5", ["--sort", "cost", "--limit", "5"]),
                        ("?sort=name&reverse=1&limit=3", ["--sort", "name", "--reverse", "--limit", "3"]),
                        ("?model=claude-test", ["--model", "claude-test"])):
        assert served.get("/api/sessions" + query).json() == cli_json(served, "list", "--json", *args)


def test_cursor_pages_cover_the_listing(served: Served) -> None:
    everything = [s["id"] for s in served.get("/api/sessions").json()]
    seen, cursor = [], None
    while True:
        page = served.get("/api/sessions", params={"limit": 7, **({"cursor": cursor} if cursor else {})})
        seen += [s["id"] for s in page.json()]
        cursor = page.headers.get("x-next-cursor")
        if cursor is None:
            break
    assert seen == everything


def test_the_pages_next_link_keeps_the_page_size(served: Served) -> None:
    """``/?limit=2`` linked to a next page of 50 (the link left the limit out)."""
    html = served.get("/", params={"limit": 2, "sort": "created"}).text
    link = re.search(r'id="next-page" href="([^"]*)"', html).group(1).replace("&amp;", "&")
    assert "limit=2" in link and "sort=created" in link
    assert served.get(link).text.count('<td class="title">') == 2


def test_bad_parameters_are_400(served: Served) -> None:
    assert served.get("/api/sessions?sort=nope").status_code == 400
    assert served.get("/api/sessions?since=notadate").status_code == 400
    assert served.get("/api/sessions?since=5").status_code == 400  # new Date("5"): 1 May 2001; typed dates are ISO
    assert served.get("/api/sessions?cursor=garbage&limit=2").status_code == 400
    assert served.get("/api/sessions/no-such-session").status_code == 404
    assert served.get(f"/api/sessions/{sessions.LONG_ID}/context?leaf=nope").status_code == 404


def forged(*cursor: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(cursor)).encode()).decode().rstrip("=")


@pytest.mark.parametrize("path", [
    "/?limit=99999999999999999999999", "/api/sessions?limit=9223372036854775807",
    "/api/search?q=module&limit=9223372036854775808", "/api/search?q=module&limit=0", "/api/search?q=module&limit=-1",
    "/api/sessions?cursor=" + forged("modified", False, 1, 2**70),
    "/api/sessions?cursor=" + forged("modified", False, 2**70, 1),
    "/api/sessions?cursor=" + forged("modified", False, {"a": 1}, 1),
    "/api/sessions?cursor=" + forged("modified", False, "a", 36),
    "/api/sessions?cursor=" + forged("name", False, "\u0000", 1),
    "/api/sessions?sort=cost&cursor=" + forged("cost", False, [1, 2], 1),
    "/api/sessions?cursor=" + forged("modified", False, 1, -1),
])
def test_numbers_and_cursors_past_what_the_database_takes_are_400(served: Served, path: str) -> None:
    """Once a 500 each (an integer past 64 bits reached the driver, a forged cursor's value was
    compared with the column as it was)."""
    response = served.get(path)
    assert response.status_code == 400, (path, response.text[-300:])


@pytest.mark.parametrize("name", ["cwd", "name", "model"])
def test_a_filter_with_a_nul_matches_nothing(served: Served, name: str) -> None:
    """PostgreSQL's text cannot hold NUL: the filter once reached it as given (a 500)."""
    response = served.get(f"/api/sessions?{name}=%00")
    assert (response.status_code, response.json()) == (200, [])


def test_search_is_search_json(served: Served) -> None:
    hits = served.get("/api/search", params={"q": "module", "limit": 10}).json()
    assert hits["pending"] == 0
    assert hits["hits"] == cli_json(served, "search", "module", "--limit", "10", "--json")
    assert hits["hits"], "the long test session mentions modules"


def test_usage_is_stats_json(served: Served) -> None:
    assert served.get("/api/usage").json()["stats"] == cli_json(served, "stats", "--json")
    usage = served.get(f"/api/sessions/{sessions.LONG_ID}/usage").json()
    assert usage["stats"] == cli_json(served, "stats", sessions.LONG_ID, "--json")
    assert sum(day["cost"] for day in usage["byDay"]) == pytest.approx(usage["stats"]["cost"])
    assert sum(day["tokens"]["total"] for day in usage["byDay"]) == usage["stats"]["tokens"]["total"]


def inspect_doc(served: Served, session_id: str, leaf: str | None, store: SessionStore | None) -> dict:
    """``pi-store inspect SESSION [--leaf ID]``'s document: from the command line, or (``store``
    given) from the function it prints, as JSON the same way."""
    if store is None:
        return cli_json(served, "inspect", session_id, *(["--leaf", leaf] if leaf else []))
    return json.loads(js_stringify(describe_session(store, session_id, leaf)))


def context_matches_inspect(served: Served, session_id: str, leaf: str | None,
                            store: SessionStore | None = None) -> dict:
    """The context API's numbers and messages equal ``pi-store inspect --leaf``'s."""
    query = {"leaf": leaf} if leaf else {}
    got = served.get(f"/api/sessions/{session_id}/context", params=query).json()
    doc = inspect_doc(served, session_id, leaf, store)
    if doc["openError"] is not None:  # a file Pi would not open: nothing to show
        assert got["openError"] and got["messages"] == []
        return got
    if isinstance(doc.get("projection"), dict) and "$error" in doc["projection"]:  # Pi throws, or loops
        assert got["contextEntryIds"] == doc["contextEntryIds"]
        assert got.get("error") == doc["projection"] and got["messages"] == []
        return got
    assert got["leafId"] == doc["leafId"]
    for field in ("contextEntryIds", "estimateProjectedContextTokens", "estimateContextTokens",
                  "messageTokenEstimates", "shouldCompact"):
        assert got[field] == doc[field], field
    assert got["prepareCompaction"]["20000"] == doc["prepareCompaction"]["20000"]
    expected = [(e["sourceId"], m) for e in doc["projection"]["entries"] for m in e["messages"]]
    assert [(m["sourceId"], m["message"]) for m in got["messages"]] == expected
    assert [m["message"] for m in got["messages"]] == doc["sessionContext"]["messages"]
    assert got["model"] == doc["sessionContext"]["model"]
    return got


def test_context_equals_inspect_for_every_session(served: Served) -> None:
    listed = served.get("/api/sessions").json()
    assert len(listed) > 50
    with SessionStore.connect(served.db_url) as store:
        for info in listed:
            if info["id"] != sessions.LONG_ID:  # its own test below, once
                context_matches_inspect(served, info["id"], None, store)


def test_context_provenance(served: Served) -> None:
    """Compacted corpus and fixture sessions: the summary, kept entries and edits are marked."""
    statuses: set[str] = set()
    for info in served.get("/api/sessions").json():
        got = served.get(f"/api/sessions/{info['id']}/context").json()
        for message in got.get("messages", []):
            statuses.add(message["provenance"]["status"])
            if message["provenance"]["status"] in ("summary", "kept"):
                assert message["provenance"]["compactionId"] == got["contextEntryIds"][0]
            if "replacedBy" in message["provenance"]:
                statuses.add("replaced")
        if got.get("summarised"):
            assert got["summarised"]["compactionId"] == got["contextEntryIds"][0]
    assert {"summary", "kept", "path", "replaced"} <= statuses


def test_context_of_side_branch_and_long_session(served: Served) -> None:
    side = context_matches_inspect(served, sessions.BRANCHY_ID, "T042b5")
    assert [m["sourceId"] for m in side["messages"]][-6:] == [f"T042b{d}" for d in range(6)]
    long = context_matches_inspect(served, sessions.LONG_ID, "L04999")
    assert len(long["messages"]) == 5000


def test_session_doc(served: Served) -> None:
    doc = served.get(f"/api/sessions/{sessions.BRANCHY_ID}", params={"leaf": "T010b3"}).json()
    assert doc["session"] == served.get("/api/sessions").json()[
        [s["id"] for s in served.get("/api/sessions").json()].index(sessions.BRANCHY_ID)]
    assert doc["selectedId"] == "T010b3" and doc["pathIds"][-1] == "T010b3"
    assert doc["pathIds"] == cli_json(served, "inspect", sessions.BRANCHY_ID, "--leaf", "T010b3")["branchIds"]
    branch_points = [row for row in doc["tree"] if row["kind"] == "entry" and row["children"] > 1]
    assert len(branch_points) == 100
    selected = [row for row in doc["tree"] if row.get("selected")]
    assert [row["id"] for row in selected] == ["T010b3"]


def test_session_page_shows_the_context_tail(served: Served) -> None:
    """A 5,000-message context: the page lists the last 300 messages (the count and a link to
    all of them above), in the API's order; ``?ctx=all`` lists every one."""
    api = served.get(f"/api/sessions/{sessions.LONG_ID}/context").json()
    page = served.get(f"/sessions/{sessions.LONG_ID}").text
    assert re.search(r'id="ctx-count">5000 from 5000 context entries', page)
    assert "Show the 4700 earlier messages" in page
    assert re.findall(r'class="ctx-message [^"]*" data-source="([^"]+)"', page) == [
        m["sourceId"] for m in api["messages"][-300:]]
    everything = served.get(f"/sessions/{sessions.LONG_ID}", params={"ctx": "all"}).text
    assert len(re.findall(r'class="ctx-message ', everything)) == 5000 and "earlier messages" not in everything
