"""What readers see of an import, on both engines: a search right after it returns finds its
text, a search while it runs finds all of a session or nothing of it, and an import that stops
midway — its rows partly sent (on PostgreSQL into an open ``COPY``) — leaves nothing behind and
the store usable."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import func, select

from store.bulk import CHUNK_ROWS
from store.db.engine import read_transaction
from store.db.schema import entries, imports, sessions, tool_call_pairs
from store.interchange.importing import import_file
from store.interchange.reading import StrictRefusal
from store.session_store import SessionStore

ROWS = CHUNK_ROWS + 500  # more than one chunk of rows: the import streams them in two parts


def session_file(path: Path, word: str, rows: int = ROWS, *, odd_line_at: int | None = None) -> Path:
    """A linear session of ``rows`` entries — user messages holding ``word``, assistant messages
    calling a tool, tool results answering them — with an empty line (an oddity ``--strict``
    refuses) before entry ``odd_line_at`` if given."""
    lines = [
        {"type": "session", "version": 3, "id": f"{word}-session", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"}
    ]
    parent = None
    for index in range(rows):
        stamp = f"2026-01-01T00:{index // 6000 % 60:02d}:{index // 100 % 60:02d}.{index % 100:03d}Z"
        if index % 3 == 0:
            message = {"role": "user", "content": f"{word} number {index}", "timestamp": index}
        elif index % 3 == 1:
            message = {
                "role": "assistant",
                "api": "x",
                "provider": "p",
                "model": "m",
                "stopReason": "toolUse",
                "content": [
                    {"type": "toolCall", "id": f"call{index}", "name": "read", "arguments": {"path": f"/f{index}"}}
                ],
                "timestamp": index,
            }
        else:
            message = {
                "role": "toolResult",
                "toolCallId": f"call{index - 1}",
                "toolName": "read",
                "isError": False,
                "content": [{"type": "text", "text": "ok"}],
                "timestamp": index,
            }
        entry_id = f"{index:08x}"
        lines.append({"type": "message", "id": entry_id, "parentId": parent, "timestamp": stamp, "message": message})
        parent = entry_id
    text = [json.dumps(line) for line in lines]
    if odd_line_at is not None:
        text.insert(odd_line_at + 1, "")
    path.write_text("\n".join(text) + "\n")
    return path


def stored_counts(store: SessionStore) -> tuple[int, ...]:
    with read_transaction(store.engine) as conn:
        return tuple(
            conn.execute(select(func.count()).select_from(table)).scalar_one()
            for table in (sessions, entries, imports, tool_call_pairs)
        )


def test_a_search_right_after_an_import_finds_it(store: SessionStore, tmp_path: Path) -> None:
    path = session_file(tmp_path / "okapi.jsonl", "okapi")
    report = import_file(store, path)
    assert report.entries == ROWS
    hits = store.search("okapi", limit=ROWS)
    assert len(hits) == (ROWS + 2) // 3 and {hit.session_id for hit in hits} == {"okapi-session"}
    assert b"".join(store.iter_export("okapi-session")) == path.read_bytes()
    # each call answered by the result after it, across the two parts of the stream
    with read_transaction(store.engine) as conn:
        assert (
            conn.execute(
                select(func.count())
                .select_from(tool_call_pairs)
                .where(tool_call_pairs.c.result_seq == tool_call_pairs.c.call_seq + 1)
            ).scalar_one()
            == (ROWS + 1) // 3
        )


def test_a_search_right_after_pi_store_import_finds_it(store: SessionStore, db_url: str, tmp_path: Path) -> None:
    path = session_file(tmp_path / "quagga.jsonl", "quagga", rows=30)
    cli = [sys.executable, "-m", "store.cli", "--db", db_url]
    subprocess.run([*cli, "import", str(path)], check=True, capture_output=True)
    found = subprocess.run(
        [*cli, "search", "quagga", "--json", "--limit", "50"], check=True, capture_output=True, text=True
    ).stdout
    assert len(json.loads(found)) == 10


@pytest.mark.parametrize("in_worker", [False, True], ids=["in process", "reading worker"])
def test_an_import_refused_midway_stores_nothing(
    store: SessionStore, tmp_path: Path, in_worker: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import store.interchange.importing as importing

    if in_worker:
        monkeypatch.setattr(importing, "WORKER_MIN_BYTES", 0)
    path = session_file(tmp_path / "zebu.jsonl", "zebu", odd_line_at=ROWS - 10)  # the second chunk is refused
    with pytest.raises(StrictRefusal, match="empty line"):
        import_file(store, path, strict=True)
    assert stored_counts(store) == (0, 0, 0, 0)
    assert store.search("zebu") == []
    # the connection the refused import used serves the next import
    report = import_file(store, path)
    assert report.entries == ROWS and stored_counts(store)[:3] == (1, ROWS + 2, 1)
    assert len(store.search("zebu", limit=ROWS)) == (ROWS + 2) // 3


def test_a_search_during_an_import_sees_all_of_it_or_nothing(store: SessionStore, tmp_path: Path) -> None:
    path = session_file(tmp_path / "gaur.jsonl", "gaur", rows=3 * CHUNK_ROWS)
    expected = CHUNK_ROWS  # every third row holds the word
    seen: list[int] = []
    done = threading.Event()

    def search() -> None:
        while True:  # at least once after the start, however fast the import
            seen.append(len(store.search("gaur", limit=expected + 1)))
            if done.is_set():
                return

    reader = threading.Thread(target=search)
    reader.start()
    try:
        import_file(store, path)
    finally:
        done.set()
        reader.join()
    seen.append(len(store.search("gaur", limit=expected + 1)))
    assert set(seen) <= {0, expected} and seen[-1] == expected and len(seen) > 1
