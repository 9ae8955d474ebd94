#!/usr/bin/env python3
"""What ``pooler=transaction`` costs a single append on PostgreSQL, and what PgBouncer adds.

    python tools/bench_pooler.py [--appends 2000] [--rounds 3] [--server postgresql://postgres@127.0.0.1:5432/test]

Three ways to one scratch database, measured in interleaved rounds, the order rotating (the
machine's load hits all alike): straight to the server with the defaults (psycopg prepares a statement from its fifth
run on a connection; the timeouts are startup options), straight with ``pooler=transaction``
(no prepared statements, the timeouts set by one more statement in each transaction), and
through a real PgBouncer in transaction mode (``tests/pgbouncer_support.py``). Per append: wall
time, this process's CPU time and the server backends' CPU time (``/proc/PID/schedstat``; same
machine only). The scratch database commits without waiting for the WAL flush, so the figures
are the statements' cost rather than the disk's. Prints one JSON line per round and configuration
and a Markdown table of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from pathlib import Path

from benchmarking import RESULTS, record
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from store.session_store import SessionStore
from tests.pgbouncer_support import running_pgbouncer


def backend_cpu_ns(pids: list[int]) -> int:
    return sum(int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) for pid in pids)


def one_round(name: str, url: str, appends: int) -> dict:
    with SessionStore.connect(url) as store:
        manager = store.create("/bench/pooler")
        for i in range(20):  # warm: connections open, statements prepared where they will be
            manager.append_message({"role": "user", "content": f"warm-up {i}"})
        with store.engine.connect() as conn:  # direct: its backends; through PgBouncer: the servers'
            pids = list(
                conn.execute(text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")).scalars()
            )
        server, client, wall = backend_cpu_ns(pids), time.process_time(), time.perf_counter()
        for i in range(appends):
            manager.append_message({"role": "user", "content": "x" * 200 + str(i)})
        wall, client = time.perf_counter() - wall, time.process_time() - client
        server = backend_cpu_ns(pids) - server
    return record(
        config=name,
        appends=appends,
        per_s=round(appends / wall),
        client_cpu_us=round(client / appends * 1e6),
        server_cpu_us=round(server / appends / 1e3),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--server", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    name = f"pi_store_bench_pooler_{uuid.uuid4().hex[:8]}"
    admin = create_engine(args.server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
        conn.execute(text(f'ALTER DATABASE "{name}" SET synchronous_commit = off'))
    direct = make_url(args.server).set(database=name)
    try:
        with running_pgbouncer(direct.render_as_string(hide_password=False), pool_size=2) as (bounced, _log):
            configs = {
                "direct, defaults": direct,
                "direct, pooler=transaction": direct.update_query_dict({"pooler": "transaction"}),
                "PgBouncer, pooler=transaction": make_url(bounced).update_query_dict({"pooler": "transaction"}),
            }
            order = list(configs)
            for _ in range(args.rounds):
                for config in order:
                    one_round(config, configs[config].render_as_string(hide_password=False), args.appends)
                order.append(order.pop(0))  # each configuration in each place of the order in turn
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    print("\n| configuration | appends/s | client CPU µs/append | server CPU µs/append |\n|---|---|---|---|")
    for config in configs:
        rounds = [r for r in RESULTS if r["config"] == config]
        medians = [statistics.median(r[k] for r in rounds) for k in ("per_s", "client_cpu_us", "server_cpu_us")]
        print(f"| {config} | {medians[0]:.0f} | {medians[1]:.0f} | {medians[2]:.0f} |")


if __name__ == "__main__":
    main()
