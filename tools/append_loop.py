#!/usr/bin/env python3
"""N single appends (or one batch of N) to a fresh SQLite store: the workload for counting an
append's instructions with callgrind, where wall-clock timing is too noisy (BENCHMARKS.md,
"Optimistic writes and claims").

    PYTHONHASHSEED=0 valgrind --tool=callgrind python tools/append_loop.py single 600
    PYTHONHASHSEED=0 valgrind --tool=callgrind python tools/append_loop.py single 100

The difference of the two totals, divided by 500, is the cost of one append. ``--page-size``
creates the database with that SQLite page size first (the store keeps a file's page size).
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile

from store.session_store import SessionStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("single", "batch"))
    parser.add_argument("count", type=int)
    parser.add_argument("--page-size", type=int, help="SQLite page size of the new database (default: SQLite's)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.page_size:  # kept once the file has a header: switching to WAL writes it
            conn = sqlite3.connect(f"{folder}/s.db")
            conn.execute(f"PRAGMA page_size={args.page_size}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.close()
        run(f"sqlite:///{folder}/s.db", args.mode, args.count)


def run(url: str, mode: str, count: int) -> None:
    with SessionStore.connect(url) as store:
        manager = store.create("/bench")
        manager.append_message({"role": "user", "content": "hi"})
        if mode == "single":
            for i in range(count):
                manager.append_message({"role": "user", "content": f"message {i}"})
        else:
            with manager.batch():
                for i in range(count):
                    manager.append_message({"role": "user", "content": f"message {i}"})


if __name__ == "__main__":
    main()
