#!/usr/bin/env python3
"""Concurrent writers: aggregate appends/s and p50/p99 append latency of N writers, each on a
session of its own, as threads (one ``SessionStore``), processes (one store each) and asyncio
tasks (one ``AsyncSessionStore``), against a raw driver loop doing the same inserts with the same
concurrency; and 16 writers of which 4 share one session (``SessionChanged`` counted, each one
handled by ``refresh()`` and a retry). Every run checks that every acknowledged append is stored
exactly once and nothing else is.

    python tools/bench_concurrency.py --seconds 2 --writers 1,4,16,64 [--engines sqlite,postgresql]
        [--modes threads,processes,async] [--appends N] [--rounds R] [--pg postgresql+psycopg://postgres@127.0.0.1/test]
        [--synchronous-commit off]

The raw loop inserts one row and commits, per append, into a table with three indexes
(``bench_async.TABLE``): sqlite3 / aiosqlite on SQLite (WAL, ``BEGIN IMMEDIATE``, the store's
busy timeout), psycopg / psycopg's ``AsyncConnection`` on PostgreSQL; one connection per writer.
SQLite is a file in a temporary directory; PostgreSQL a scratch database with the default
``synchronous_commit`` (on: every commit waits for its WAL flush; ``--synchronous-commit off``
leaves the disk out, for the statements' and the clients' cost). The store's PostgreSQL pool is
sized to the writers (``pool_size``); SQLite's pool is SQLAlchemy's default (5 + 10 overflow).
A failed append (a busy error, say) is counted, not retried, and not acknowledged.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

from bench_async import LINE, TABLE, scratch_pg
from benchmarking import RESULTS, record
from sqlalchemy.engine import make_url

from store.aio import AsyncSessionStore
from store.db.engine import BUSY_TIMEOUT_MS
from store.errors import SessionChanged
from store.session_store import SessionStore

SHARED_WRITERS, SHARING = 16, 4  # the OCC run: 16 writers, the first 4 on one session


@dataclass
class Plan:
    """How long each writer runs: ``appends`` appends, or else for ``seconds``."""

    seconds: float
    appends: int | None

    def more(self, done: int, deadline: float) -> bool:
        return done < self.appends if self.appends else time.perf_counter() < deadline


@dataclass
class Run:
    """What one writer did: per-append latencies (s), the ids acknowledged, conflicts, failures."""

    latencies: list[float] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    conflicts: int = 0
    errors: int = 0
    first_error: str = ""
    start: float = 0.0
    end: float = 0.0

    def failed(self, exc: Exception) -> None:
        self.errors += 1
        self.first_error = self.first_error or f"{type(exc).__name__}: {str(exc)[:200]}"


class Gate:
    """Tasks wait at ``wait()``; ``open(n)`` lets them all go once ``n`` are waiting."""

    def __init__(self) -> None:
        self.ready, self.event = 0, asyncio.Event()

    async def wait(self) -> None:
        self.ready += 1
        await self.event.wait()

    async def open(self, n: int) -> None:
        while self.ready < n:
            await asyncio.sleep(0.005)
        self.event.set()


def message(tag: str, i: int) -> dict:
    return {"role": "user", "content": f"{tag} {i}", "timestamp": i}


# ---------------------------------------------------------------------------------------------
# one writer of each kind


def store_writer(store: SessionStore, session_id: str, tag: str, plan: Plan, go: Callable[[], object]) -> Run:
    """Append to ``session_id`` under its newest entry; a stale view is refreshed, then again."""
    sm, run = store.open(session_id), Run()
    go()
    run.start = time.perf_counter()
    deadline = run.start + plan.seconds
    while plan.more(len(run.latencies), deadline):
        i = len(run.latencies)
        begin = time.perf_counter()
        try:
            while True:
                try:
                    run.acked.append(sm.append_message(message(tag, i)))
                    break
                except SessionChanged:
                    run.conflicts += 1
                    sm.refresh()
        except Exception as exc:  # counted, as a caller would see it
            run.failed(exc)
        run.latencies.append(time.perf_counter() - begin)
    run.end = time.perf_counter()
    return run


async def async_store_writer(store: AsyncSessionStore, session_id: str, tag: str, plan: Plan, go: Gate) -> Run:
    sm, run = await store.open(session_id), Run()
    await go.wait()
    run.start = time.perf_counter()
    deadline = run.start + plan.seconds
    while plan.more(len(run.latencies), deadline):
        i = len(run.latencies)
        begin = time.perf_counter()
        try:
            while True:
                try:
                    run.acked.append(await sm.append_message(message(tag, i)))
                    break
                except SessionChanged:
                    run.conflicts += 1
                    await sm.refresh()
        except Exception as exc:
            run.failed(exc)
        run.latencies.append(time.perf_counter() - begin)
    run.end = time.perf_counter()
    return run


class Raw:
    """The raw driver loop of one engine: a connection per writer, insert + commit per append."""

    def __init__(self, engine: str, target: str) -> None:
        self.engine, self.target = engine, target  # target: the SQLite file, or a libpq URL

    def setup(self) -> None:
        if self.engine == "sqlite":
            with sqlite3.connect(self.target, isolation_level=None) as conn:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(TABLE.format(pk="INTEGER PRIMARY KEY"))
            return
        import psycopg

        with psycopg.connect(self.target) as conn:
            for ddl in TABLE.format(pk="BIGSERIAL PRIMARY KEY").split(";"):
                conn.execute(ddl)

    def connect(self) -> tuple[Any, Callable[[int, int], None]]:
        """A connection and the insert + commit of row ``seq`` of writer ``s`` on it."""
        if self.engine == "sqlite":
            conn = sqlite3.connect(self.target, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000,
                                   check_same_thread=False)
            conn.execute("PRAGMA synchronous=NORMAL")  # as the store's connections

            def insert(s: int, seq: int) -> None:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO t (s, seq, eid, line) VALUES (?, ?, ?, ?)",
                             (s, seq, f"{seq:08x}", LINE % (seq, seq)))
                conn.execute("COMMIT")

            return conn, insert
        import psycopg

        pconn = psycopg.connect(self.target)

        def pinsert(s: int, seq: int) -> None:
            pconn.execute("INSERT INTO t (s, seq, eid, line) VALUES (%s, %s, %s, %s)",
                          (s, seq, f"{seq:08x}", LINE % (seq, seq)))
            pconn.commit()

        return pconn, pinsert

    async def aconnect(self) -> tuple[Any, Callable[[int, int], Any]]:
        if self.engine == "sqlite":
            import aiosqlite

            conn = await aiosqlite.connect(self.target, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
            await conn.execute("PRAGMA synchronous=NORMAL")

            async def insert(s: int, seq: int) -> None:
                await conn.execute("BEGIN IMMEDIATE")
                await conn.execute("INSERT INTO t (s, seq, eid, line) VALUES (?, ?, ?, ?)",
                                   (s, seq, f"{seq:08x}", LINE % (seq, seq)))
                await conn.execute("COMMIT")

            return conn, insert
        import psycopg

        pconn = await psycopg.AsyncConnection.connect(self.target)

        async def pinsert(s: int, seq: int) -> None:
            await pconn.execute("INSERT INTO t (s, seq, eid, line) VALUES (%s, %s, %s, %s)",
                                (s, seq, f"{seq:08x}", LINE % (seq, seq)))
            await pconn.commit()

        return pconn, pinsert


def raw_writer(raw: Raw, s: int, plan: Plan, go: Callable[[], object]) -> Run:
    conn, insert = raw.connect()
    run = Run()
    go()
    run.start = time.perf_counter()
    deadline = run.start + plan.seconds
    while plan.more(len(run.latencies), deadline):
        begin = time.perf_counter()
        try:
            insert(s, len(run.latencies))
        except Exception as exc:
            run.failed(exc)
            conn.rollback()
        run.latencies.append(time.perf_counter() - begin)
    run.end = time.perf_counter()
    conn.close()
    return run


async def async_raw_writer(raw: Raw, s: int, plan: Plan, go: Gate) -> Run:
    conn, insert = await raw.aconnect()
    run = Run()
    await go.wait()
    run.start = time.perf_counter()
    deadline = run.start + plan.seconds
    while plan.more(len(run.latencies), deadline):
        begin = time.perf_counter()
        try:
            await insert(s, len(run.latencies))
        except Exception as exc:
            run.failed(exc)
            await conn.rollback()
        run.latencies.append(time.perf_counter() - begin)
    run.end = time.perf_counter()
    await conn.close()
    return run


# ---------------------------------------------------------------------------------------------
# N writers at once: threads, processes, tasks


def in_threads(n: int, work: Callable[[int, Callable[[], object]], Run]) -> list[Run]:
    barrier, runs = threading.Barrier(n), [Run()] * n

    def one(k: int) -> None:
        runs[k] = work(k, barrier.wait)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return runs


def _child(work: Callable[[int, Callable[[], object]], Run], k: int, barrier: Any, out: Any) -> None:
    out.put((k, work(k, barrier.wait)))


def in_processes(n: int, work: Callable[[int, Callable[[], object]], Run]) -> list[Run]:
    """``work`` in ``n`` forked processes (each opens its own connections after the fork)."""
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_child, args=(work, k, barrier, out)) for k in range(n)]
    for proc in procs:
        proc.start()
    runs = dict(out.get(timeout=600) for _ in procs)
    for proc in procs:
        proc.join()
        assert proc.exitcode == 0, proc.exitcode
    return [runs[k] for k in range(n)]


def summarise(runs: list[Run]) -> dict:
    latencies = sorted(t for r in runs for t in r.latencies)
    wall = max(r.end for r in runs) - min(r.start for r in runs)
    errors = sum(r.errors for r in runs)
    return {
        "appends": len(latencies) - errors,
        "per_s": round((len(latencies) - errors) / wall),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000, 2),
        "conflicts": sum(r.conflicts for r in runs),
        "errors": errors,
        "first_error": next((r.first_error for r in runs if r.first_error), ""),
    }


# ---------------------------------------------------------------------------------------------
# one configuration: the store's writers, checked, and the raw loop's


def make_sessions(url: str, sessions: int, label: str) -> list[str]:
    with SessionStore.connect(url) as store:
        ids = []
        for k in range(sessions):
            sm = store.create(f"/bench/{label}/{k}")
            sm.append_message(message("root", k))  # a stored session: appends take the fast path
            ids.append(sm.get_session_id())
    return ids


def check_stored(url: str, session_of: list[str], runs: list[Run]) -> None:
    """Every acknowledged append stored exactly once, in its session, and nothing else stored."""
    with SessionStore.connect(url) as store:
        for session_id in set(session_of):
            acked = [i for sid, r in zip(session_of, runs, strict=True) if sid == session_id for i in r.acked]
            stored = [e["id"] for e in store.open(session_id).get_entries()][1:]  # after the root
            assert sorted(stored) == sorted(acked) and len(set(stored)) == len(stored), (
                f"session {session_id}: {len(stored)} stored, {len(acked)} acknowledged"
            )


def store_runs(mode: str, url: str, session_of: list[str], plan: Plan) -> list[Run]:
    n = len(session_of)
    if mode == "async":

        async def main() -> list[Run]:
            go = Gate()
            async with await AsyncSessionStore.connect(url) as store:
                tasks = [asyncio.ensure_future(async_store_writer(store, sid, f"w{k}", plan, go))
                         for k, sid in enumerate(session_of)]
                await go.open(n)
                return list(await asyncio.gather(*tasks))

        return asyncio.run(main())
    if mode == "threads":
        with SessionStore.connect(url) as store:
            return in_threads(n, lambda k, go: store_writer(store, session_of[k], f"w{k}", plan, go))

    def work(k: int, go: Callable[[], object]) -> Run:
        with SessionStore.connect(url) as store:
            return store_writer(store, session_of[k], f"w{k}", plan, go)

    return in_processes(n, work)


def raw_runs(mode: str, raw: Raw, n: int, plan: Plan, base: int) -> list[Run]:
    if mode == "async":

        async def main() -> list[Run]:
            go = Gate()
            tasks = [asyncio.ensure_future(async_raw_writer(raw, base + k, plan, go)) for k in range(n)]
            await go.open(n)
            return list(await asyncio.gather(*tasks))

        return asyncio.run(main())
    work = lambda k, go: raw_writer(raw, base + k, plan, go)  # noqa: E731
    return in_threads(n, work) if mode == "threads" else in_processes(n, work)


def with_pool(url: str, engine: str, n: int) -> str:
    """PostgreSQL: a pool as large as the writers (a server would size it so)."""
    if engine == "sqlite":
        return url
    return make_url(url).update_query_dict({"pool_size": str(max(5, n))}).render_as_string(hide_password=False)


def measure(mode: str, url: str, engine: str, session_of: list[str], raw: Raw, plan: Plan, base: int,
            store_first: bool) -> tuple[dict, dict]:
    """The store's writers on ``session_of`` (checked) and as many raw writers, one after the other."""

    def mine() -> dict:
        runs = store_runs(mode, with_pool(url, engine, len(session_of)), session_of, plan)
        check_stored(url, session_of, runs)
        return summarise(runs)

    def theirs() -> dict:
        return summarise(raw_runs(mode, raw, len(session_of), plan, base))

    if store_first:
        return mine(), theirs()
    raw_figures = theirs()
    return mine(), raw_figures


def bench_engine(engine: str, url: str, raw: Raw, args: argparse.Namespace) -> None:
    """Each configuration ``args.rounds`` times, the store and the raw loop back to back, the one
    that goes first alternating (the machine's load changes: a ratio is of the same moment)."""
    plan, labels = Plan(args.seconds, args.appends), count()
    raw.setup()
    for mode in args.modes:
        for n in args.writers:
            for r in range(args.rounds):
                session_of = make_sessions(url, n, f"{mode}-{n}-{next(labels)}")
                mine, theirs = measure(mode, url, engine, session_of, raw, plan, next(labels) * 1000, r % 2 == 0)
                ratio = round(mine["per_s"] / theirs["per_s"], 2)
                record(engine=engine, mode=mode, writers=n, round=r, what="store", ratio=ratio, **mine)
                record(engine=engine, mode=mode, writers=n, round=r, what="raw", **theirs)
        if SHARED_WRITERS in args.writers or args.shared:
            sessions = make_sessions(url, SHARED_WRITERS - SHARING + 1, f"{mode}-shared-{next(labels)}")
            session_of = [sessions[0]] * SHARING + sessions[1:]
            runs = store_runs(mode, with_pool(url, engine, SHARED_WRITERS), session_of, plan)
            check_stored(url, session_of, runs)
            record(engine=engine, mode=mode, writers=SHARED_WRITERS, what="store, 4 on one session", **summarise(runs))


def combined(what: str, engine: str, mode: str, writers: int) -> dict:
    """The rounds of one configuration: medians of the figures, sums of the counts."""
    rows = [r for r in RESULTS if (r["what"], r["engine"], r["mode"], r["writers"]) == (what, engine, mode, writers)]
    out = {k: statistics.median(r[k] for r in rows) for k in ("per_s", "p50_ms", "p99_ms", "ratio") if k in rows[0]}
    return out | {k: sum(r[k] for r in rows) for k in ("conflicts", "errors")}


def print_tables() -> None:
    print("\n| engine | mode | writers | store appends/s | raw appends/s | ratio | store p50 / p99 ms "
          "| raw p50 / p99 ms | failed appends store / raw |\n|---|---|---|---|---|---|---|---|---|")
    configs = dict.fromkeys((r["engine"], r["mode"], r["writers"]) for r in RESULTS if r["what"] == "store")
    for engine, mode, n in configs:
        mine, theirs = combined("store", engine, mode, n), combined("raw", engine, mode, n)
        print(f"| {engine} | {mode} | {n} | {mine['per_s']:.0f} | {theirs['per_s']:.0f} | {mine['ratio']:.2f} "
              f"| {mine['p50_ms']:.2f} / {mine['p99_ms']:.1f} | {theirs['p50_ms']:.2f} / {theirs['p99_ms']:.1f} "
              f"| {mine['errors']} / {theirs['errors']} |")
    shared = [r for r in RESULTS if r["what"].startswith("store, ")]
    if shared:
        print(f"\n{SHARED_WRITERS} writers, {SHARING} of them on one session (every acknowledged append stored once):")
        print("\n| engine | mode | appends/s | p50 / p99 ms | SessionChanged (refresh + retry) | failed |")
        print("|---|---|---|---|---|---|")
        for r in shared:
            print(f"| {r['engine']} | {r['mode']} | {r['per_s']} | {r['p50_ms']} / {r['p99_ms']} | {r['conflicts']} "
                  f"| {r['errors']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="each writer's run (unless --appends)")
    parser.add_argument("--appends", type=int, help="appends per writer instead of --seconds")
    parser.add_argument("--rounds", type=int, default=1, help="of each configuration (the table: medians)")
    parser.add_argument("--writers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16, 64])
    parser.add_argument("--engines", type=lambda s: s.split(","), default=["sqlite", "postgresql"])
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["threads", "processes", "async"])
    parser.add_argument("--shared", action="store_true",
                        help=f"the shared-session run even when --writers omits {SHARED_WRITERS}")
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--synchronous-commit", choices=("on", "off"), default="on",
                        help="of the PostgreSQL scratch database (off: commits do not wait for the WAL flush)")
    args = parser.parse_args()
    if "sqlite" in args.engines:
        with tempfile.TemporaryDirectory() as folder:
            bench_engine("sqlite", f"sqlite:///{folder}/store.db", Raw("sqlite", str(Path(folder) / "raw.db")), args)
    if "postgresql" in args.engines:
        url, drop = scratch_pg(args.pg, args.synchronous_commit)
        try:
            plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
            bench_engine("postgresql", url, Raw("postgresql", plain), args)
        finally:
            drop()
    print_tables()


if __name__ == "__main__":
    main()
