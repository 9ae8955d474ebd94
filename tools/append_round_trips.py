#!/usr/bin/env python3
"""Round trips and statements per single append on PostgreSQL, counted from libpq's protocol
trace of the store's pooled connections (BENCHMARKS.md, "Single appends and many writers").

    python tools/append_round_trips.py [--appends 50] [--pg postgresql+psycopg://postgres@127.0.0.1/test]

A round trip is a message after which the client waits for the server: a simple ``Query``
(psycopg's ``BEGIN`` and ``COMMIT``) or a ``Sync`` ending an extended-protocol exchange; a
statement is a ``Query`` or a ``Bind``. The counts are of ``--appends`` appends of a user message
under the leaf, by one manager, after a warm-up append; no timing is involved.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import tempfile

from bench_async import scratch_pg
from sqlalchemy import event

from store.session_store import SessionStore

_MESSAGE = re.compile(r"\tF\t\d+\t(\w+)")


def count(url: str, appends: int) -> collections.Counter:
    """The frontend messages libpq sent during ``appends`` single appends."""
    with tempfile.TemporaryFile("w+") as trace, SessionStore.connect(url) as store:

        @event.listens_for(store.engine, "connect")
        def _trace(dbapi_connection, _record) -> None:
            dbapi_connection.pgconn.trace(trace.fileno())

        store.engine.dispose()  # the connection that checked the schema: untraced
        manager = store.create("/round-trips")
        manager.append_message({"role": "user", "content": "first", "timestamp": 1})
        manager.append_message({"role": "user", "content": "warm-up", "timestamp": 2})
        start = os.lseek(trace.fileno(), 0, os.SEEK_END)
        for i in range(appends):
            manager.append_message({"role": "user", "content": f"message {i}", "timestamp": 3 + i})
        trace.seek(start)
        return collections.Counter(_MESSAGE.findall(trace.read()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=50)
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    url, drop = scratch_pg(args.pg, "off")
    try:
        sent = count(url, args.appends)
    finally:
        drop()
    per = {name: round(n / args.appends, 2) for name, n in sorted(sent.items())}
    print(f"per append: round trips {per.get('Query', 0) + per.get('Sync', 0):g} "
          f"(Query {per.get('Query', 0):g} + Sync {per.get('Sync', 0):g}), "
          f"statements {per.get('Query', 0) + per.get('Bind', 0):g}; all messages: {per}")


if __name__ == "__main__":
    main()
