"""Really damaging a SQLite database file: bytes of one page of a table overwritten on disk."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def damage_page_of(db_file: Path, table: str, offset: int | None = None, size: int = 200, nth: int = 0) -> int:
    """Overwrite ``size`` bytes at ``offset`` (default: the page's last bytes, where its cells
    are; the middle of a page may be free space) of the ``nth`` leaf page of ``table`` (found
    with the ``dbstat`` virtual table) with 0xA5, after a checkpoint has moved the WAL's pages
    into the main file; returns the page number."""
    conn = sqlite3.connect(db_file)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = [page for (page,) in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno", (table,))]
    finally:
        conn.close()
    assert len(pages) > nth, f"{table} has {len(pages)} leaf pages"
    assert not Path(f"{db_file}-wal").exists() or Path(f"{db_file}-wal").stat().st_size == 0
    with db_file.open("r+b") as out:
        out.seek((pages[nth] - 1) * page_size + (page_size - size if offset is None else offset))
        out.write(b"\xa5" * size)
    return pages[nth]
