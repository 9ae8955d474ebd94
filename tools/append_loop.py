#!/usr/bin/env python3
"""N single appends (or one batch of N) to a fresh SQLite store: the workload for counting an
append's instructions with callgrind, where wall-clock timing is too noisy (BENCHMARKS.md,
"Optimistic writes and claims").

    PYTHONHASHSEED=0 valgrind --tool=callgrind python tools/append_loop.py single 600
    PYTHONHASHSEED=0 valgrind --tool=callgrind python tools/append_loop.py single 100

The difference of the two totals, divided by 500, is the cost of one append. ``--url`` appends
to a store at that URL instead (a PostgreSQL database, say: the client's instructions only).
"""

from __future__ import annotations

import argparse
import tempfile

from store.session_store import SessionStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("single", "batch"))
    parser.add_argument("count", type=int)
    parser.add_argument("--url", help="the store's database (default: a SQLite file in a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, SessionStore.connect(args.url or f"sqlite:///{folder}/s.db") as store:
        manager = store.create("/bench")
        manager.append_message({"role": "user", "content": "hi"})
        if args.mode == "single":
            for i in range(args.count):
                manager.append_message({"role": "user", "content": f"message {i}"})
        else:
            with manager.batch():
                for i in range(args.count):
                    manager.append_message({"role": "user", "content": f"message {i}"})


if __name__ == "__main__":
    main()
