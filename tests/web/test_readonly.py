"""No endpoint changes the database: every link of every page followed (bounded), then the row
counts, and on SQLite the file's bytes, are what they were."""

from __future__ import annotations

import hashlib
import re
from collections import deque
from html import unescape
from urllib.parse import parse_qsl, urljoin, urlsplit

import pytest
from sqlalchemy import create_engine, text

from tests.web import sessions
from tests.web.conftest import Served

TABLES = ("sessions", "entries", "imports", "alembic_version")
MAX_PAGES = 80  # every kind of link is reached well before (CI time: ~0.12 s a page)
HREF = re.compile(r'href="([^"]+)"')


def snapshot(served: Served) -> tuple:
    engine = create_engine(served.db_url)
    with engine.connect() as conn:
        counts = tuple(conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in TABLES)
        versions = tuple(conn.execute(text("SELECT session_id, row_version FROM sessions ORDER BY pk")).all())
        if served.db_file is not None:
            counts += (conn.execute(text("SELECT indexed_pk FROM fts_watermark")).scalar_one(),)
    engine.dispose()
    digest = hashlib.sha256(served.db_file.read_bytes()).hexdigest() if served.db_file is not None else None
    return counts, versions, digest


def shape(local: str) -> tuple[str, tuple[str, ...]]:
    """A link's kind: its route (ids left out) and the names of its query parameters."""
    parts = urlsplit(local)
    route = re.sub(r"^/(api/)?sessions/[^/]+", lambda m: f"/{m.group(1) or ''}sessions/ID", parts.path)
    return route, tuple(sorted({key for key, _ in parse_qsl(parts.query, keep_blank_values=True)}))


def crawl(served: Served) -> tuple[int, set, set]:
    """Follow the links of the pages (bounded), a link of a kind not fetched yet always first;
    the number of fetches, the kinds of link found and the kinds fetched."""
    start = ["/", "/usage", "/?q=module", "/?q=compaction&sort=cost", "/api/sessions", "/api/usage",
             f"/sessions/{sessions.BRANCHY_ID}?leaf=T050b2", f"/sessions/{sessions.LONG_ID}",
             f"/api/sessions/{sessions.LONG_ID}/context", f"/api/sessions/{sessions.BRANCHY_ID}?leaf=T050b2",
             "/api/search?q=module", f"/api/sessions/{sessions.LONG_ID}/usage"]
    new_kinds, more = deque(start), deque()
    seen, found, fetched_kinds = set(start), {shape(p) for p in start}, set()
    fetched = 0
    while (new_kinds or more) and fetched < MAX_PAGES:
        path = new_kinds.popleft() if new_kinds else more.popleft()
        response = served.get(path)
        fetched += 1
        fetched_kinds.add(shape(path))
        assert response.status_code in (200, 400, 404), (path, response.status_code)
        if "text/html" not in response.headers.get("content-type", ""):
            continue
        for href in HREF.findall(response.text):
            target = urljoin(served.base + path, unescape(href))
            parts = urlsplit(target)
            local = parts.path + (f"?{parts.query}" if parts.query else "")
            if target.startswith(served.base) and local not in seen:
                seen.add(local)
                kind = shape(local)
                (more if kind in found else new_kinds).append(local)
                found.add(kind)
    return fetched, found, fetched_kinds


def test_crawl_changes_nothing(served: Served) -> None:
    before = snapshot(served)
    fetched, found, fetched_kinds = crawl(served)
    assert fetched == MAX_PAGES  # the store has more links than that: the bound is reached
    assert found == fetched_kinds, "every kind of link was followed at least once"
    assert {("/sessions/ID", ("leaf", "open")), ("/sessions/ID", ("all", "leaf")), ("/sessions/ID", ("ctx", "leaf")),
            ("/usage", ("session",)), ("/static/style.css", ())} <= found
    assert snapshot(served) == before


def test_the_viewers_connections_cannot_write(store, db_url: str) -> None:
    """Whatever its code did, the viewer's engine refuses writes: SQLite's query_only, a
    read-only PostgreSQL session (on both engines, through the suite's fixtures)."""
    from sqlalchemy.exc import DBAPIError

    from store.web.data import readonly_engine

    store.create("/work/x").append_message({"role": "user", "content": "hi", "timestamp": 1})
    engine = readonly_engine(db_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM sessions")).scalar_one() == 1
        for statement in ("DELETE FROM entries", "UPDATE sessions SET row_version = row_version + 1",
                          "CREATE TABLE intruder (x INTEGER)"):
            with engine.connect() as conn, pytest.raises(DBAPIError, match=r"(?i)read.only|readonly"):
                conn.execute(text(statement))
                conn.commit()
    finally:
        engine.dispose()
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM entries")).scalar_one() > 0
