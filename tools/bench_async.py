#!/usr/bin/env python3
"""Single-append latency of the async API (``store.aio``) against the sync API and raw driver
loops, on SQLite and PostgreSQL; and many tasks appending through one ``AsyncSessionStore``.

    python tools/bench_async.py --appends 2000 --tasks 32 [--pg postgresql+psycopg://postgres@127.0.0.1/test]

The raw loops insert one row and commit, per append, into a table with three indexes (what an
append writes at least): psycopg (sync and ``AsyncConnection``) and asyncpg on PostgreSQL,
sqlite3 and aiosqlite on SQLite — the drivers the async API could sit on. PostgreSQL runs in a
scratch database of its own (dropped afterwards), with ``synchronous_commit`` as given (default on).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import benchmarking  # noqa: F401  (the project root on sys.path)
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from store.aio import AsyncSessionStore
from store.session_store import SessionStore

TABLE = (
    "CREATE TABLE t (pk {pk}, s INTEGER NOT NULL, seq INTEGER NOT NULL, eid TEXT, line TEXT NOT NULL);"
    "CREATE UNIQUE INDEX t_seq ON t (s, seq); CREATE INDEX t_eid ON t (s, eid)"
)
LINE = '{"type":"message","id":"%08x","message":{"role":"user","content":"message %d"}}'


def summary(label: str, engine: str, times: list[float]) -> dict:
    times = sorted(times)
    row = {
        "what": label,
        "engine": engine,
        "p50_us": round(statistics.median(times) * 1e6),
        "p99_us": round(times[int(len(times) * 0.99) - 1] * 1e6),
        "per_s": round(len(times) / sum(times)),
    }
    print(row, flush=True)
    return row


def timed(n: int, fn: Callable[[int], object]) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - start)
    return out


async def atimed(n: int, fn: Callable[[int], Awaitable[object]]) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        await fn(i)
        out.append(time.perf_counter() - start)
    return out


def message(i: int) -> dict:
    return {"role": "user", "content": f"message {i}", "timestamp": i}


def bench_sync_api(url: str, engine: str, n: int) -> dict:
    with SessionStore.connect(url) as store:
        sm = store.create("/bench")
        sm.append_message(message(0))
        timed(50, lambda i: sm.append_message(message(i)))
        return summary("sync API append_message", engine, timed(n, lambda i: sm.append_message(message(i))))


async def bench_async_api(url: str, engine: str, n: int) -> dict:
    async with await AsyncSessionStore.connect(url) as store:
        sm = await store.create("/bench")
        await sm.append_message(message(0))
        await atimed(50, lambda i: sm.append_message(message(i)))
        return summary("async API append_message", engine, await atimed(n, lambda i: sm.append_message(message(i))))


async def bench_tasks(url: str, engine: str, tasks: int, per_task: int) -> dict:
    async with await AsyncSessionStore.connect(url) as store:
        managers = [await store.create(f"/bench/{k}") for k in range(tasks)]
        for sm in managers:
            await sm.append_message(message(0))
        latencies: list[float] = []

        async def writer(sm) -> None:
            latencies.extend(await atimed(per_task, lambda i: sm.append_message(message(i))))

        start = time.perf_counter()
        await asyncio.gather(*(writer(sm) for sm in managers))
        wall = time.perf_counter() - start
        stored = sum(info.message_count for info in await store.list_all() if info.cwd.startswith("/bench/"))
        assert stored == tasks * (per_task + 1), (stored, tasks * (per_task + 1))
        row = summary(f"async API, {tasks} tasks on one store", engine, latencies)
        row["aggregate_per_s"] = round(len(latencies) / wall)
        print({"aggregate_per_s": row["aggregate_per_s"]}, flush=True)
        return row


async def bench_interleaved(url: str, engine: str, rounds: int, block: int) -> dict:
    """The sync and the async API's single appends in alternating blocks (the same load for
    both, on a machine whose load changes): p50 of each, and their ratio."""
    sync_times: list[float] = []
    async_times: list[float] = []
    async with await AsyncSessionStore.connect(url) as astore:
        with SessionStore.connect(url) as store:
            sm = store.create("/bench/sync")
            sm.append_message(message(0))
            asm = await astore.create("/bench/async")
            await asm.append_message(message(0))
            for _ in range(rounds):
                sync_times += timed(block, lambda i: sm.append_message(message(i)))
                async_times += await atimed(block, lambda i: asm.append_message(message(i)))
    summary("sync API (interleaved)", engine, sync_times)
    row = summary("async API (interleaved)", engine, async_times)
    row["async_over_sync_p50"] = round(statistics.median(async_times) / statistics.median(sync_times), 2)
    print({"async_over_sync_p50": row["async_over_sync_p50"]}, flush=True)
    return row


def bench_sqlite_raw(folder: Path, n: int) -> list[dict]:
    import sqlite3

    import aiosqlite

    rows = []
    path = folder / "raw.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(TABLE.format(pk="INTEGER PRIMARY KEY"))

    def one(i: int) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (s, seq, eid, line) VALUES (?, ?, ?, ?)", (1, i, f"{i:08x}", LINE % (i, i)))
        conn.execute("COMMIT")

    rows.append(summary("raw sqlite3 insert+commit", "sqlite", timed(n, one)))
    conn.close()

    async def run() -> dict:
        async with aiosqlite.connect(path, isolation_level=None) as db:
            await db.execute("PRAGMA synchronous=NORMAL")

            async def one_async(i: int) -> None:
                await db.execute("BEGIN IMMEDIATE")
                await db.execute(
                    "INSERT INTO t (s, seq, eid, line) VALUES (?, ?, ?, ?)", (2, i, f"{i:08x}", LINE % (i, i))
                )
                await db.execute("COMMIT")

            return summary("raw aiosqlite insert+commit", "sqlite", await atimed(n, one_async))

    rows.append(asyncio.run(run()))
    return rows


def bench_pg_raw(url: str, n: int) -> list[dict]:
    import psycopg

    try:
        import asyncpg  # measured only: not a dependency of the project
    except ImportError:
        asyncpg = None
        print("asyncpg is not installed (pip install asyncpg): its raw loop is left out", flush=True)

    plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    rows = []
    with psycopg.connect(plain) as conn:
        conn.execute(TABLE.format(pk="BIGSERIAL PRIMARY KEY").split(";")[0])
        for ddl in TABLE.split(";")[1:]:
            conn.execute(ddl)
        conn.commit()

        def one(i: int) -> None:
            conn.execute("INSERT INTO t (s, seq, eid, line) VALUES (%s, %s, %s, %s)", (1, i, f"{i:08x}", LINE % (i, i)))
            conn.commit()

        rows.append(summary("raw psycopg insert+commit", "postgresql", timed(n, one)))

    async def run_psycopg() -> dict:
        async with await psycopg.AsyncConnection.connect(plain) as conn:

            async def one_async(i: int) -> None:
                await conn.execute(
                    "INSERT INTO t (s, seq, eid, line) VALUES (%s, %s, %s, %s)", (2, i, f"{i:08x}", LINE % (i, i))
                )
                await conn.commit()

            return summary("raw psycopg AsyncConnection insert+commit", "postgresql", await atimed(n, one_async))

    async def run_asyncpg() -> dict:
        conn = await asyncpg.connect(plain)
        try:

            async def one_async(i: int) -> None:
                async with conn.transaction():
                    await conn.execute(
                        "INSERT INTO t (s, seq, eid, line) VALUES ($1, $2, $3, $4)", 3, i, f"{i:08x}", LINE % (i, i)
                    )

            return summary("raw asyncpg insert+commit", "postgresql", await atimed(n, one_async))
        finally:
            await conn.close()

    rows.append(asyncio.run(run_psycopg()))
    if asyncpg is not None:
        rows.append(asyncio.run(run_asyncpg()))
    return rows


def scratch_pg(admin_url: str, synchronous_commit: str) -> tuple[str, Callable[[], None]]:
    name = f"bench_async_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
        conn.execute(text(f'ALTER DATABASE "{name}" SET synchronous_commit = {synchronous_commit}'))

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(admin_url).set(database=name).render_as_string(hide_password=False), drop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--per-task", type=int, default=100)
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument(
        "--synchronous-commit",
        choices=("on", "off"),
        default="on",
        help="off: commits do not wait for the WAL flush, figures of the drivers, not the disk",
    )
    parser.add_argument("--only", choices=("sqlite", "postgresql"))
    parser.add_argument("--rounds", type=int, default=10, help="blocks of the interleaved sync/async comparison")
    args = parser.parse_args()
    if args.only != "postgresql":
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite:///{folder}/store.db"
            bench_sync_api(url, "sqlite", args.appends)
            asyncio.run(bench_async_api(url, "sqlite", args.appends))
            asyncio.run(bench_tasks(url, "sqlite", args.tasks, args.per_task))
            bench_sqlite_raw(Path(folder), args.appends)
            asyncio.run(bench_interleaved(url, "sqlite", args.rounds, args.appends // args.rounds))
    if args.only == "sqlite":
        return
    url, drop = scratch_pg(args.pg, args.synchronous_commit)
    try:
        bench_sync_api(url, "postgresql", args.appends)
        asyncio.run(bench_async_api(url, "postgresql", args.appends))
        asyncio.run(bench_tasks(url, "postgresql", args.tasks, args.per_task))
        bench_pg_raw(url, args.appends)
        asyncio.run(bench_interleaved(url, "postgresql", args.rounds, args.appends // args.rounds))
    finally:
        drop()


if __name__ == "__main__":
    main()
