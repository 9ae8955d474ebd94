"""No endpoint changes the database: every link of every page followed (bounded), then the row
counts, and on SQLite the file's bytes, are what they were."""

from __future__ import annotations

import hashlib
import re
from collections import deque
from html import unescape
from urllib.parse import urljoin, urlsplit

from sqlalchemy import create_engine, text

from tests.web import sessions
from tests.web.conftest import Served

TABLES = ("sessions", "entries", "imports", "alembic_version")
MAX_PAGES = 150
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


def crawl(served: Served) -> int:
    start = ["/", "/usage", "/?q=module", "/?q=compaction&sort=cost", "/api/sessions", "/api/usage",
             f"/sessions/{sessions.BRANCHY_ID}?leaf=T050b2", f"/api/sessions/{sessions.LONG_ID}/context"]
    queue, seen = deque(start), set(start)
    fetched = 0
    while queue and fetched < MAX_PAGES:
        path = queue.popleft()
        response = served.get(path)
        fetched += 1
        assert response.status_code in (200, 400, 404), (path, response.status_code)
        if "text/html" not in response.headers.get("content-type", ""):
            continue
        for href in HREF.findall(response.text):
            target = urljoin(served.base + path, unescape(href))
            parts = urlsplit(target)
            local = parts.path + (f"?{parts.query}" if parts.query else "")
            if target.startswith(served.base) and local not in seen:
                seen.add(local)
                queue.append(local)
    return fetched


def test_crawl_changes_nothing(served: Served) -> None:
    before = snapshot(served)
    assert crawl(served) == MAX_PAGES  # the store has more links than that: the bound is reached
    assert snapshot(served) == before
