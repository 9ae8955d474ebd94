#!/usr/bin/env python3
"""N single appends (or one batch of N) to a fresh SQLite store: the workload for counting an
append's instructions with callgrind, where wall-clock timing is too noisy (BENCHMARKS.md,
"Optimistic writes and claims").

    PYTHONHASHSEED=0 valgrind --tool=callgrind python tools/append_loop.py single 600
    PYTHONHASHSEED=0 valgrind --tool=callgrind python tools/append_loop.py single 100

The difference of the two totals, divided by 500, is the cost of one append. ``--url`` appends
to a store at that URL instead (a PostgreSQL database, say: the client's instructions only).
``--page-size`` creates the SQLite database with that page size first (the store keeps a file's
page size). ``searched``: each append is followed by a search, which first brings the full-text
index up to date with the appended row (``fts.sync``); ``--text-chars`` makes each message that long.
``conversation``: single appends of a user message and an assistant answer with usage, in turn
(what an agent writes: each message adds to ``activity_days``, each user message starts a turn).
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile

from store.session_store import SessionStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("single", "batch", "searched", "conversation"))
    parser.add_argument("count", type=int)
    parser.add_argument("--url", help="the store's database (default: a SQLite file in a temporary folder)")
    parser.add_argument("--page-size", type=int, help="SQLite page size of the new database (default: SQLite's)")
    parser.add_argument("--text-chars", type=int, default=0, help="pad each message's text to this length")
    args = parser.parse_args()
    if args.url:
        run(args.url, args.mode, args.count, args.text_chars)
        return
    with tempfile.TemporaryDirectory() as folder:
        if args.page_size:  # kept once the file has a header: switching to WAL writes it
            conn = sqlite3.connect(f"{folder}/s.db")
            conn.execute(f"PRAGMA page_size={args.page_size}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.close()
        run(f"sqlite:///{folder}/s.db", args.mode, args.count, args.text_chars)


def run(url: str, mode: str, count: int, chars: int) -> None:
    def content(i: int) -> str:
        text = f"message {i}"
        return text + " padding" * max(0, (chars - len(text)) // 8)

    with SessionStore.connect(url) as store:
        manager = store.create("/bench")
        manager.append_message({"role": "user", "content": "hi"})
        if mode == "batch":
            with manager.batch():
                for i in range(count):
                    manager.append_message({"role": "user", "content": content(i)})
            return
        for i in range(count):
            if mode == "conversation" and i % 2:
                manager.append_message(_answer(content(i)))
                continue
            manager.append_message({"role": "user", "content": content(i)})
            if mode == "searched":
                store.search(f"message {i}", limit=1)


def _answer(text: str) -> dict:
    return {"role": "assistant", "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
            "stopReason": "stop", "content": [{"type": "text", "text": text}],
            "usage": {"input": 1200, "output": 80, "cacheRead": 900, "cacheWrite": 0, "totalTokens": 2180,
                      "cost": {"input": 0.0036, "output": 0.0012, "cacheRead": 0.00027, "cacheWrite": 0,
                               "total": 0.00507}}}


if __name__ == "__main__":
    main()
