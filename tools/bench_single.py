#!/usr/bin/env python3
"""One writer's single appends against the raw driver loop, interleaved: blocks of ``--block``
store appends (``append_message``) and as many raw inserts + commits (``bench_concurrency.Raw``)
alternate in one process, so both see the same moment of a loaded machine; the ratio of each
block pair (raw time / store time: the store's rate as a fraction of the raw loop's) and its
median. The sync API, and with ``--async`` the async API against the async raw loop.
``--workload agent``: the store appends what an agent writes (a user message, then assistant
messages with a tool call each, each followed by its result, then an answer; ``agent_message``)
instead of user messages; the raw loop's rows stay the same. ``--history N``: the store first holds
N other sessions of 50 agent appends each, and PostgreSQL's statistics are gathered (``ANALYZE``,
as autovacuum does within a minute or so of a table's first rows): a store with some history,
instead of a new store whose tables the planner knows nothing about (BENCHMARKS.md, "Young
tables").

    python tools/bench_single.py [--engines sqlite,postgresql] [--blocks 20] [--block 50]
        [--synchronous-commit off] [--async] [--workload user|agent] [--history 200]
        [--pg postgresql+psycopg://postgres@127.0.0.1/test]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bench_async import scratch_pg
from bench_concurrency import Raw, message
from benchmarking import record
from sqlalchemy import text
from sqlalchemy.engine import make_url

from store.aio import AsyncSessionStore
from store.session_store import SessionStore

_USAGE = {"input": 100, "output": 20, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 120,
          "cost": {"input": 0.001, "output": 0.002, "cacheRead": 0, "cacheWrite": 0, "total": 0.003}}
TURN = 10  # appends per agent turn: a prompt, four tool calls and their results, an answer


def agent_message(tag: str, i: int) -> dict:
    """Append ``i`` of an agent's session: by its place in a turn of ``TURN`` appends."""
    step = i % TURN
    if step == 0:
        return message(tag, i)
    assistant = {"role": "assistant", "api": "anthropic-messages", "provider": "anthropic", "model": "m",
                 "usage": _USAGE, "timestamp": i}
    if step == TURN - 1:
        return {**assistant, "stopReason": "stop", "content": [{"type": "text", "text": f"{tag} {i} done"}]}
    if step % 2:
        return {**assistant, "stopReason": "toolUse",
                "content": [{"type": "toolCall", "id": f"{tag}-{i}", "name": "read", "arguments": {"path": "/a.py"}}]}
    return {"role": "toolResult", "toolCallId": f"{tag}-{i - 1}", "toolName": "read", "isError": False,
            "content": [{"type": "text", "text": "x = 1\n" * 40}], "timestamp": i}


def sync_pairs(url: str, raw: Raw, blocks: int, block: int, message=message) -> list[tuple[float, float]]:
    """(store seconds, raw seconds) per block pair; ``message(tag, i)``: the store's append ``i``."""
    raw.setup()
    conn, insert = raw.connect()
    pairs = []
    with SessionStore.connect(url) as store:
        sm = store.create("/bench/single")
        sm.append_message(message("root", 0))
        n = 0
        for _ in range(blocks):
            start = time.perf_counter()
            for _ in range(block):
                n += 1
                sm.append_message(message("m", n))
            mine = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(block):
                n += 1
                insert(0, n)
            pairs.append((mine, time.perf_counter() - start))
    conn.close()
    return pairs


def async_pairs(url: str, raw: Raw, blocks: int, block: int, message=message) -> list[tuple[float, float]]:
    async def main() -> list[tuple[float, float]]:
        raw.setup()
        conn, insert = await raw.aconnect()
        pairs = []
        async with await AsyncSessionStore.connect(url) as store:
            sm = await store.create("/bench/single")
            await sm.append_message(message("root", 0))
            n = 0
            for _ in range(blocks):
                start = time.perf_counter()
                for _ in range(block):
                    n += 1
                    await sm.append_message(message("m", n))
                mine = time.perf_counter() - start
                start = time.perf_counter()
                for _ in range(block):
                    n += 1
                    await insert(0, n)
                pairs.append((mine, time.perf_counter() - start))
        await conn.close()
        return pairs

    return asyncio.run(main())


def add_history(url: str, sessions: int) -> None:
    """``sessions`` other sessions of 50 agent appends each (one batch per session); then, on
    PostgreSQL, the planner's statistics."""
    with SessionStore.connect(url) as store:
        for s in range(sessions):
            sm = store.create(f"/bench/history/{s}")
            with sm.batch():
                for i in range(50):
                    sm.append_message(agent_message(f"h{s}", i))
        if store.engine.dialect.name == "postgresql":
            with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("ANALYZE"))


def report(engine: str, api: str, pairs: list[tuple[float, float]], block: int, workload: str,
           history: int) -> None:
    ratios = sorted(theirs / mine for mine, theirs in pairs)
    record(engine=engine, api=api, workload=workload, history=history, blocks=len(pairs),
           store_ms=round(statistics.median(m for m, _ in pairs) / block * 1000, 3),
           raw_ms=round(statistics.median(t for _, t in pairs) / block * 1000, 3),
           ratio=round(statistics.median(ratios), 2),
           ratio_quartiles=(round(ratios[len(ratios) // 4], 2), round(ratios[3 * len(ratios) // 4], 2)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", type=lambda s: s.split(","), default=["sqlite", "postgresql"])
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--async", dest="use_async", action="store_true", help="the async API and raw loop")
    parser.add_argument("--synchronous-commit", choices=("on", "off"), default="on")
    parser.add_argument("--workload", choices=("user", "agent"), default="user")
    parser.add_argument("--history", type=int, default=0, metavar="N",
                        help="N other sessions (50 appends each) in the store first, statistics gathered")
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    pairs_of = async_pairs if args.use_async else sync_pairs
    api = "async" if args.use_async else "sync"
    made = agent_message if args.workload == "agent" else message

    def run(url: str, raw: Raw, blocks: int, block: int) -> list[tuple[float, float]]:
        if args.history:
            add_history(url, args.history)
        return pairs_of(url, raw, blocks, block, made)
    if "sqlite" in args.engines:
        with tempfile.TemporaryDirectory() as folder:
            pairs = run(f"sqlite:///{folder}/store.db", Raw("sqlite", str(Path(folder) / "raw.db")),
                        args.blocks, args.block)
            report("sqlite", api, pairs, args.block, args.workload, args.history)
    if "postgresql" in args.engines:
        url, drop = scratch_pg(args.pg, args.synchronous_commit)
        try:
            plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
            report("postgresql", api, run(url, Raw("postgresql", plain), args.blocks, args.block), args.block,
                   args.workload, args.history)
        finally:
            drop()


if __name__ == "__main__":
    main()
