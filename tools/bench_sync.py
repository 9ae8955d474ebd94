#!/usr/bin/env python3
"""``sync`` of a sessions folder where nothing changed: the quick check (each file's stat against
the one recorded when it was read, migration 0019) against ``checksum=True`` (every file read,
hashed and looked up, as before), and the floor both stand on: the folder walked and every file
stat'ed by Python alone (``os.walk`` + ``os.stat``). ``--files`` session files are made from the
committed fixtures (each with its own session id, in 50 project folders), imported once, left
still for the 2 s the quick check asks, then synced ``--reps`` times each way, interleaved; the
median wall time of each, and the ratios to the floor.

    python tools/bench_sync.py [--files 3000] [--reps 3] [--engines sqlite,postgresql]
        [--pg postgresql+psycopg://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import orjson
from bench_async import scratch_pg
from benchmarking import record

from store.interchange.importing import STABLE_NS
from store.interchange.syncing import import_paths
from store.session_store import SessionStore

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "oracle" / "sessions"


def make_folder(folder: Path, count: int) -> int:
    """``count`` Pi-written fixture sessions under new ids; returns their bytes."""
    sources = sorted([*FIXTURES.glob("small-*.jsonl"), *FIXTURES.glob("medium-*.jsonl")])
    chooser = random.Random(7)
    total = 0
    for index in range(count):
        header, _, rest = chooser.choice(sources).read_bytes().partition(b"\n")
        document = orjson.loads(header)
        document["id"] = str(uuid.UUID(int=chooser.getrandbits(128)))
        target = folder / f"--project{index % 50}--" / f"2026-12-07T00-00-00-000Z_{document['id']}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        total += target.write_bytes(orjson.dumps(document) + b"\n" + rest)
    return total


def walk(folder: Path) -> None:
    for root, _, names in os.walk(folder):
        for name in names:
            os.stat(os.path.join(root, name))


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(engine: str, url: str, folder: Path, files: int, size: int, reps: int) -> None:
    with SessionStore.connect(url) as store:
        first = list(import_paths(store, [folder]))
        assert len(first) == files and {r.status for r in first} == {"imported"}, {r.status for r in first}
        time.sleep(STABLE_NS / 1e9 + 0.5)  # files still long enough for their stat to be trusted
        list(import_paths(store, [folder]))  # records each stat (read once more)

        def sync(checksum: bool) -> None:
            reports = list(import_paths(store, [folder], checksum=checksum))
            assert {r.status for r in reports} == {"unchanged"} and len(reports) == files

        quick, full, floor = [], [], []
        for _ in range(reps):
            floor.append(timed(lambda: walk(folder)))
            quick.append(timed(lambda: sync(False)))
            full.append(timed(lambda: sync(True)))
    q, f, w = statistics.median(quick), statistics.median(full), statistics.median(floor)
    record(bench="sync unchanged folder", engine=engine, files=files, mb=round(size / 1e6, 1),
           quick_s=round(q, 3), checksum_s=round(f, 3), walk_and_stat_s=round(w, 3),
           quick_per_file_ms=round(q / files * 1000, 3), checksum_per_file_ms=round(f / files * 1000, 3),
           checksum_over_quick=round(f / q, 1), quick_over_floor=round(q / w, 1), load=os.getloadavg()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as scratch:
        folder = Path(scratch) / "sessions"
        size = make_folder(folder, args.files)
        for engine in args.engines.split(","):
            if engine == "sqlite":
                run(engine, f"sqlite:///{Path(scratch) / 'store.db'}", folder, args.files, size, args.reps)
                continue
            url, drop = scratch_pg(args.pg, "on")
            try:
                run(engine, url, folder, args.files, size, args.reps)
            finally:
                drop()


if __name__ == "__main__":
    sys.exit(main())
