#!/usr/bin/env python3
"""Store-core benchmarks, each reported as a ratio against a baseline measured in the same run.

    python tools/bench_store.py [--entries 100000] [--others 1000] [--appends 5000] [--out bench-out]

Baselines come from ../shared/baselines (the real Pi through the oracle, raw sqlite3 loops); a
baseline that cannot run here (no oracle) is reported as missing, never invented. Prints one JSON
object per measurement and a Markdown table at the end (paste it into BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarking import BASELINES, ORACLE_RUN, RESULTS, median_ms, pi_open_ms, record, run_json

from store.db import queries
from store.db.engine import read_transaction
from store.session_store import SessionStore


def open_and_path(store: SessionStore, session_id: str) -> tuple[float, float, int]:
    """(open + path keys ms, path keys only ms, path length)."""
    def open_path() -> int:
        manager = store.open(session_id)
        with read_transaction(store.engine) as conn:
            return len(queries.path_seqs(conn, manager._spk, manager._leaf.seq))

    manager = store.open(session_id)
    leaf = manager._leaf.seq

    def path_only() -> int:
        with read_transaction(store.engine) as conn:
            return len(queries.path_seqs(conn, manager._spk, leaf))

    length = open_path()
    return median_ms(open_path), median_ms(path_only), length


def bench_paths(work: Path, entries: int, others: int) -> None:
    linear = work / f"linear-{entries}.jsonl"
    subprocess.run([sys.executable, str(BASELINES / "make_linear_session.py"), str(entries), str(linear)], check=True)
    store = SessionStore.connect(f"sqlite:///{work / 'paths.db'}")
    sid = store.import_jsonl(linear)
    open_ms, path_ms, length = open_and_path(store, sid)
    raw = run_json([sys.executable, str(BASELINES / "raw_sqlite_baseline.py"), "path", str(linear)])
    pi = pi_open_ms(linear)
    record(op="open+path keys, linear", entries=length, ms=open_ms, path_only_ms=path_ms,
           raw_cte_ms=raw and raw.get("ms"), pi_open_context_ms=pi,
           vs_raw_cte=raw and raw.get("ms") / path_ms, vs_pi=pi and pi / open_ms)
    full_ms = median_ms(lambda: store.open(sid).get_branch(), reps=3)
    record(op="get_branch (parse every payload), linear", entries=length, ms=full_ms,
           pi_open_context_ms=pi, vs_pi=pi and pi / full_ms)

    large = work / "large"
    if ORACLE_RUN.exists():
        subprocess.run([str(ORACLE_RUN), "gen.mjs", "--seed", "1", "--size", "large", "--out", str(large)],
                       check=True, capture_output=True)
        big = next(large.glob("*.jsonl"))
        sid_big = store.import_jsonl(big)
        open_ms, path_ms, length = open_and_path(store, sid_big)
        pi = pi_open_ms(big)
        record(op="open+path keys, 20k compacted (gen.mjs large)", entries=length, ms=open_ms,
               path_only_ms=path_ms, pi_open_context_ms=pi, vs_pi=pi and pi / open_ms)
    else:
        record(op="open+path keys, 20k compacted", skipped="oracle not installed")

    # path time must not grow with the number of other sessions
    small = work / "small.jsonl"
    subprocess.run([sys.executable, str(BASELINES / "make_linear_session.py"), "2000", str(small)], check=True)
    lone = SessionStore.connect(f"sqlite:///{work / 'lone.db'}")
    lone_sid = lone.import_jsonl(small)
    _, alone_ms, _ = open_and_path(lone, lone_sid)
    crowd = SessionStore.connect(f"sqlite:///{work / 'crowd.db'}")
    text = small.read_bytes().split(b"\n", 1)
    for i in range(others):
        copy = work / "others" / f"s{i}.jsonl"
        copy.parent.mkdir(exist_ok=True)
        head = text[0].replace(b"019a0000-0000-7000-8000-", f"019b{i:04d}-0000-7000-8000-".encode())
        copy.write_bytes(head + b"\n" + text[1])
        crowd.import_jsonl(copy)
    crowd_sid = crowd.import_jsonl(small)
    _, crowd_ms, length = open_and_path(crowd, crowd_sid)
    record(op="path keys, 1 vs many sessions", entries=length, sessions=others + 1, alone_ms=alone_ms,
           crowd_ms=crowd_ms, ratio=crowd_ms / alone_ms)


def statement_floor(path: Path, appends: int) -> float:
    """Appends/s of our exact statements (lock, id check, insert, session update) run by bare
    sqlite3 on our schema, rows built before the clock starts: what the schema and its listing
    columns cost before any of our Python runs."""
    import sqlite3

    from store.db.appends import _ADVANCE, _ID_TAKEN, _LOCK_SQLITE
    from store.db.writes import INSERT_ROW_SQLITE, entry_values
    from store.format import js_stringify
    from store.tree_columns import TreeColumns

    store = SessionStore.connect(f"sqlite:///{path}")
    sm = store.create("/bench")
    sm.append_message({"role": "user", "content": "hello", "timestamp": 0})
    store.close()
    rows = []
    for seq in range(2, appends + 2):
        entry = {"type": "message", "id": f"{seq:08x}", "parentId": f"{seq - 1:08x}",
                 "timestamp": "2026-01-01T00:00:00.000Z",
                 "message": {"role": "user", "content": f"message {seq} {'x' * 200}", "timestamp": seq}}
        cols = TreeColumns(seq, entry["id"], seq - 1, seq - 1, 1)
        rows.append(entry_values(1, seq, "entry", entry, js_stringify(entry), cols))
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA wal_autocheckpoint=10000")  # as store.db.engine sets it
    start = time.perf_counter()
    for row in rows:
        seq = row[1]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(_LOCK_SQLITE, (1,)).fetchone()
        conn.execute(_ID_TAKEN, (1, row[3])).fetchone()
        conn.execute(INSERT_ROW_SQLITE, row)
        conn.execute(_ADVANCE, (seq, seq, 1, 1, seq, seq, seq, seq, seq, seq, None, False, None, True, True, 1))
        conn.execute("COMMIT")
    return appends / (time.perf_counter() - start)


def bench_appends(work: Path, appends: int) -> None:
    store = SessionStore.connect(f"sqlite:///{work / 'appends.db'}")
    sm = store.create("/bench")
    sm.append_message({"role": "user", "content": "hello", "timestamp": 0})
    body = "x" * 200
    start = time.perf_counter()
    for i in range(appends):
        sm.append_message({"role": "user", "content": f"message {i} {body}", "timestamp": i})
    single = appends / (time.perf_counter() - start)
    raw = run_json([sys.executable, str(BASELINES / "raw_sqlite_baseline.py"), "append", str(appends)])
    floor = statement_floor(work / "floor.db", appends)
    record(op="append, one transaction each", n=appends, per_s=single, raw_per_s=raw and raw["per_s"],
           vs_raw=raw and single / raw["per_s"], same_statements_raw_sqlite3_per_s=floor,
           vs_same_statements=single / floor)

    batch_n = appends * 10
    sm2 = store.create("/bench")
    sm2.append_message({"role": "user", "content": "hello", "timestamp": 0})
    start = time.perf_counter()
    with sm2.batch():
        for i in range(batch_n):
            sm2.append_message({"role": "user", "content": f"message {i} {body}", "timestamp": i})
    batched = batch_n / (time.perf_counter() - start)
    pi = None
    if ORACLE_RUN.exists():
        with tempfile.TemporaryDirectory() as d:
            result = run_json([str(ORACLE_RUN), str(BASELINES / "pi_baseline.mjs"), "append", str(batch_n), d])
            pi = result and result["per_s"]
    record(op="append, batched in one transaction", n=batch_n, per_s=batched, pi_jsonl_per_s=pi,
           vs_pi=pi and batched / pi)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--others", type=int, default=1000)
    parser.add_argument("--appends", type=int, default=5000)
    parser.add_argument("--out", type=Path, default=None, help="keep work files here (default: a temp dir)")
    args = parser.parse_args()
    os.environ.setdefault("PI_ORACLE_DIR", str(Path.home() / ".cache" / "pi-oracle"))
    with tempfile.TemporaryDirectory() as tmp:
        work = args.out or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        bench_paths(work, args.entries, args.others)
        bench_appends(work, args.appends)
    print("\n| measurement | result | baseline (same run) | ratio |\n|---|---|---|---|")
    for r in RESULTS:
        print(f"| {r['op']} | {json.dumps({k: v for k, v in r.items() if k != 'op'})} | | |")


if __name__ == "__main__":
    main()
