"""A store's SQLite file opens in Datasette: its pages, the views, SQL and full-text search on
``entries`` (Datasette finds ``entries_fts`` by itself). Datasette is optional (``pip install
datasette``); without it this module is skipped."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from store.analysis import fts
from store.session_store import SessionStore
from tests.oracle_support import FIXTURES

datasette_app = pytest.importorskip("datasette.app", reason="Datasette is not installed (pip install datasette)")


def test_datasette_serves_the_views_and_search(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    with SessionStore.connect(f"sqlite:///{path}") as store:
        for name in ("small-seed1-0.jsonl", "medium-seed1-0.jsonl", "legacy-v1.jsonl"):
            store.import_file(FIXTURES / "sessions" / name)
        fts.sync(store.engine)
        word = store.search("fix")[0]

    async def fetch() -> dict[str, object]:
        app = datasette_app.Datasette([str(path)])
        pages: dict[str, object] = {}
        for url in ("/", "/history", "/history/sessions_overview", "/history/entries"):
            response = await app.client.get(url)
            assert response.status_code == 200, (url, response.text[:500])
        for view in ("sessions_overview", "messages", "tool_calls", "usage_ledger", "compactions", "branches",
                     "labels"):
            response = await app.client.get(f"/history/{view}.json?_shape=array&_size=5")
            assert response.status_code == 200, (view, response.text[:500])
            pages[view] = response.json()
        response = await app.client.get("/history.json?sql=select+count(*)+as+n+from+messages&_shape=array")
        pages["count"] = response.json()
        response = await app.client.get("/history/entries.json?_search=fix&_shape=array&_col=entry_id&_size=max")
        assert response.status_code == 200, response.text[:500]
        pages["search"] = response.json()
        return pages

    pages = asyncio.run(fetch())
    assert all(pages[view] for view in ("sessions_overview", "messages", "tool_calls", "usage_ledger"))
    assert pages["count"][0]["n"] > 400
    assert word.entry_id in {row["entry_id"] for row in pages["search"]}
