"""A store opens in the real Datasette, with the metadata the package ships: every table and view
page answers within Datasette's own time limit (1 s per query: a slower one is "SQL Interrupted"),
the facets and canned queries of the metadata run, and full-text search on ``entries`` finds what
``pi-store search`` finds.

The store holds every oracle fixture session and, when ``../shared`` is there, the corpus of real
Pi files. Datasette is started as its command (``datasette serve``, on a Unix socket: no port to
race for) with ``pi-store path --datasette-metadata`` as its ``-m``. Skipped, with the reason, when
Datasette is not installed (it is in the ``test`` extra).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from sqlalchemy import text

from store.analysis import VIEWS, fts
from store.cli import main
from store.db.engine import read_transaction
from store.errors import StoreError
from store.session_store import SessionStore
from tests.analysis.conftest import history_files

DATASETTE = shutil.which("datasette", path=str(Path(sys.executable).parent)) or shutil.which("datasette")
pytestmark = pytest.mark.skipif(DATASETTE is None, reason="Datasette is not installed (pip install -e '.[datasette]')")
WORD = "refactor"  # a word of the fixture sessions


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[httpx.Client, SessionStore]]:
    folder = tmp_path_factory.mktemp("datasette")
    path = folder / "history.db"
    store = SessionStore.connect(f"sqlite:///{path}")
    for source in history_files():
        try:
            store.import_file(source)
        except StoreError:  # a second file with a session id already stored
            continue
    fts.sync(store.engine)  # what pi-store import does at its end
    metadata = CliRunner().invoke(main, ["--db", str(path), "path", "--datasette-metadata"], catch_exceptions=False)
    assert metadata.exit_code == 0, metadata.stderr
    (folder / "metadata.json").write_text(metadata.stdout, "utf-8")
    socket = folder / "datasette.sock"
    log = (folder / "datasette.log").open("wb")
    process = subprocess.Popen([DATASETTE, "serve", str(path), "-m", str(folder / "metadata.json"), "--uds",
                                str(socket)], stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
    client = httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)), base_url="http://datasette", timeout=30)
    try:
        deadline = time.monotonic() + 30
        while not socket.exists() or not _answers(client):
            assert process.poll() is None, (folder / "datasette.log").read_text("utf-8", "replace")
            assert time.monotonic() < deadline, "datasette did not start within 30 s"
            time.sleep(0.1)
        yield client, store
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=10)
        log.close()
        store.close()


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/-/versions.json").status_code == 200
    except httpx.TransportError:
        return False


def fetch(client: httpx.Client, url: str) -> dict:
    """A JSON page, which must come within Datasette's time limit (no interrupted query)."""
    start = time.monotonic()
    response = client.get(url)
    seconds = time.monotonic() - start
    assert response.status_code == 200, (url, response.text[:500])
    assert "interrupted" not in response.text.lower() and "too long" not in response.text.lower(), url
    assert seconds < 5, (url, seconds)  # each query has 1 s; a page runs a few (rows, count, facets)
    return response.json()


def test_every_table_and_view_page_answers(served) -> None:
    client, _store = served
    database = fetch(client, "/history.json")
    tables = {table["name"] for table in database["tables"]}
    views = {view["name"] for view in database["views"]}
    assert {"sessions", "entries", "tool_call_pairs", "imports"} <= tables
    assert set(VIEWS) <= views
    for name in sorted(tables | views):
        page = fetch(client, f"/history/{name}.json?_size=100")
        assert "rows" in page, name
        if name in VIEWS or name in ("sessions", "entries", "tool_call_pairs"):
            assert page["rows"], name  # the store's history is in every view
    # the metadata's facets, all computed in time (a timed-out one is left out of the page)
    for name, facets in (("sessions", {"cwd", "pi_valid"}), ("sessions_overview", {"cwd", "pi_valid"}),
                         ("tool_call_pairs", {"name", "is_error"})):
        page = fetch(client, f"/history/{name}.json?_size=1")
        assert facets <= set(page["facet_results"]) and all(page["facet_results"][f]["results"] for f in facets)


def test_the_metadata_is_applied(served) -> None:
    client, _store = served
    shipped = json.loads((Path(__file__).parents[2] / "store" / "analysis" / "datasette.json").read_text("utf-8"))
    got, want = fetch(client, "/-/metadata.json")["databases"]["history"], shipped["databases"]["sessions"]
    assert got["description"] == want["description"] and set(got["queries"]) == set(want["queries"])
    assert {name: table.get("description") for name, table in got["tables"].items()} == {
        name: table.get("description") for name, table in want["tables"].items()}
    page = client.get("/history/activity")
    assert page.status_code == 200 and "One row per entry Pi&#39;s /session counts" in page.text
    hidden = {table["name"] for table in fetch(client, "/history.json")["tables"] if table["hidden"]}
    assert {"alembic_version", "fts_watermark", "entries_fts"} <= hidden


# the canned queries as first written, over the activity view
_USAGE_BY_DAY = """SELECT day, count(DISTINCT session_pk) AS sessions, sum(messages) AS messages,
    sum(tool_calls) AS tool_calls, sum(tool_errors) AS tool_errors, sum(input) AS input, sum(output) AS output,
    sum(cache_read) AS cache_read, sum(cache_write) AS cache_write, sum(tokens) AS tokens,
    round(sum(cost), 10) AS cost FROM activity GROUP BY day ORDER BY day"""
_COST_BY_MODEL = """SELECT provider, model, count(DISTINCT session_pk) AS sessions, sum(messages) AS messages,
    sum(tool_calls) AS tool_calls, sum(tokens) AS tokens, round(sum(cost), 10) AS cost FROM activity
    GROUP BY provider, model ORDER BY sum(cost) DESC"""


def test_canned_queries_and_full_text_search(served) -> None:
    client, store = served
    by_day = fetch(client, "/history/usage_by_day.json?_shape=array")
    stats = store.stats()
    assert sum(row["messages"] for row in by_day) == stats.total_messages
    assert sum(row["tokens"] for row in by_day) == stats.tokens.total
    by_model = fetch(client, "/history/cost_by_model.json?_shape=array")
    assert sum(row["tool_calls"] for row in by_model) == stats.tool_calls
    # what the kept totals give is what the activity view gives, summed from every row
    with read_transaction(store.engine) as conn:
        assert by_day == [dict(row._mapping) for row in conn.execute(text(_USAGE_BY_DAY))]
        reference = [repr(dict(row._mapping)) for row in conn.execute(text(_COST_BY_MODEL))]
        assert sorted(map(repr, by_model)) == sorted(reference)  # (groups of equal cost: any order)
    assert fetch(client, "/history/tools_that_fail_most.json?_shape=array")
    ours = {hit.entry_id for hit in store.search(WORD, limit=1000)}
    assert ours
    searched = fetch(client, f"/history/entries.json?_search={WORD}&_shape=array&_col=entry_id&_size=max")
    assert {row["entry_id"] for row in searched} == ours  # only the matching rows: the search box is applied
    canned = fetch(client, f"/history/search.json?query={WORD}&_shape=array")
    assert canned and all(row["entry_id"] in ours for row in canned)
    count = fetch(client, "/history.json?sql=select+count(*)+as+n+from+messages&_shape=array")
    assert count[0]["n"] == stats.total_messages
