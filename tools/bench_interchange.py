#!/usr/bin/env python3
"""Interchange benchmarks, each a ratio against a baseline measured in the same run.

    python tools/bench_interchange.py [--entries 100000] [--memory-gb 1.0] [--out bench-out] [--pg URL]

* import: ``import_file`` of a linear session (~1 KB entries, ``../shared/baselines/
  make_linear_session.py``) and of a realistic one (the oracle's ``gen.mjs --size large`` when
  installed, else the largest fixture), against ``raw_sqlite_baseline.py import`` on the same
  file (parse each line with orjson, one ``executemany``): MB/s, entries/s and the ratio; each
  import runs in a fresh process, best of ``--reps``;
  (also "one process": with the reading worker turned off);
* export: ``export_jsonl`` of the imported session against ``shutil.copyfile`` of the file, and
  what SQLite alone takes to produce the same bytes (``SELECT sum(length(...))``: no Python);
* memory: peak RSS of importing a generated ``--memory-gb`` file (the importing process and,
  separately, its reading worker; then in one process), and the time it took.

Prints one JSON object per measurement and a Markdown table at the end (for BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
from benchmarking import BASELINES, ORACLE_RUN, RESULTS, ROOT, record, run_json

# Runs in a fresh interpreter: import one file, export it, report times and peak RSS.
_IMPORT = r"""
import hashlib, json, os, resource, shutil, sys, time
sys.path.insert(0, sys.argv[1])
from store.interchange.importing import import_file
from store.session_store import SessionStore
path, url, parallel, out = sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5]
store = SessionStore.connect(url)
start = time.perf_counter()
report = import_file(store, path, parallel=parallel)
imported = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the import's peak, before anything else
worker_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
start = time.perf_counter()
store.export_jsonl(report.session_id, out)
exported = time.perf_counter() - start
floor = None
if url.startswith("sqlite"):  # what SQLite alone takes to produce the bytes (no Python per row)
    from sqlalchemy import text
    with store.engine.connect() as conn:
        pk = conn.execute(text("SELECT pk FROM sessions WHERE session_id = :id"), {"id": report.session_id}).scalar()
        start = time.perf_counter()
        conn.execute(text("SELECT sum(length(CAST(COALESCE(raw, line) || eol AS BLOB))) FROM entries "
                          "WHERE session_pk = :pk"), {"pk": pk}).scalar()
        floor = time.perf_counter() - start
start = time.perf_counter()
shutil.copyfile(path, out + ".copy")
copied = time.perf_counter() - start

def sha(name):
    digest = hashlib.sha256()
    with open(name, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()

assert sha(out) == sha(path) == report.sha256, "the export differs from the file"
os.remove(out + ".copy")
print(json.dumps({"import_s": imported, "export_s": exported, "copy_s": copied, "db_read_s": floor,
                  "entries": report.entries,
                  "bytes": report.size, "rss_mb": rss, "worker_rss_mb": worker_rss}))
"""


def fresh_sqlite(folder: Path, name: str) -> str:
    for suffix in ("", "-wal", "-shm"):
        (folder / f"{name}{suffix}").unlink(missing_ok=True)
    return f"sqlite:///{folder / name}"


def ours(path: Path, url: str, out: Path, parallel: bool = True) -> dict | None:
    return run_json([sys.executable, "-c", _IMPORT, str(ROOT), str(path), url, "1" if parallel else "0", str(out)])


def bench_import(label: str, path: Path, out: Path, reps: int, pg: str | None) -> None:
    size_mb = path.stat().st_size / 1e6
    raws, mine, serial = [], [], []
    for _ in range(reps):  # interleaved, so that both see the same machine load
        if raw := run_json([sys.executable, str(BASELINES / "raw_sqlite_baseline.py"), "import", str(path)]):
            raws.append(raw)
        if result := ours(path, fresh_sqlite(out, "bench.db"), out / "export.jsonl"):
            mine.append(result)
        if result := ours(path, fresh_sqlite(out, "bench.db"), out / "export.jsonl", parallel=False):
            serial.append(result)
    if not raws or not mine:
        record(op="import", file=label, error="a run failed")
        return
    raw_mbs = max(r["MB_per_s"] for r in raws)
    best = min(mine, key=lambda r: r["import_s"])
    one = min(serial, key=lambda r: r["import_s"]) if serial else None
    record(op="import", file=label, MB=round(size_mb, 1), entries=best["entries"],
           raw_MB_per_s=round(raw_mbs, 1), raw_entries_per_s=round(max(r["entries_per_s"] for r in raws)),
           MB_per_s=round(size_mb / best["import_s"], 1), entries_per_s=round(best["entries"] / best["import_s"]),
           ratio=round(size_mb / best["import_s"] / raw_mbs, 2),
           one_process_MB_per_s=round(size_mb / one["import_s"], 1) if one else None,
           one_process_ratio=round(size_mb / one["import_s"] / raw_mbs, 2) if one else None)
    fastest_export = min(mine, key=lambda r: r["export_s"])
    copy_s = min(r["copy_s"] for r in mine)
    floor_s = min(r["db_read_s"] for r in mine)
    record(op="export", file=label, MB_per_s=round(size_mb / fastest_export["export_s"], 1),
           copy_MB_per_s=round(size_mb / copy_s, 1), ratio=round(copy_s / fastest_export["export_s"], 2),
           sqlite_read_MB_per_s=round(size_mb / floor_s, 1))
    if pg and (result := ours(path, pg, out / "export.jsonl")):
        record(op="import-postgresql", file=label, MB_per_s=round(size_mb / result["import_s"], 1),
               entries_per_s=round(result["entries"] / result["import_s"]),
               ratio_vs_raw_sqlite=round(size_mb / result["import_s"] / raw_mbs, 2))


def make_linear(entries: int, path: Path) -> Path:
    if not path.exists():
        subprocess.run([sys.executable, str(BASELINES / "make_linear_session.py"), str(entries), str(path)], check=True)
    return path


def realistic(out: Path) -> Path:
    """Pi's own large session (20k entries, ``gen.mjs --size large``) when the oracle is installed,
    else the medium fixture; without the few lines the raw baseline cannot parse (orjson refuses
    lone surrogates, which JSON.parse accepts), so that both read the same file."""
    source = ROOT / "tests" / "fixtures" / "oracle" / "sessions" / "medium-seed1-0.jsonl"
    if ORACLE_RUN.exists():
        done = subprocess.run([str(ORACLE_RUN), "gen.mjs", "--seed", "1", "--size", "large", "--out", str(out)],
                              capture_output=True, text=True)
        if done.returncode == 0 and (out / "large-seed1-0.jsonl").exists():
            source = out / "large-seed1-0.jsonl"
    target = out / f"pi-written-{source.name}"
    with source.open("rb") as lines, target.open("wb") as kept:
        for number, line in enumerate(lines):
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if number == 0 or all(key in value for key in ("id", "parentId", "type", "timestamp")):
                kept.write(line)
    return target


def markdown() -> str:
    rows = ["| measurement | file | ours | baseline (same run) | ratio |", "|---|---|---|---|---|"]
    for r in RESULTS:
        if r.get("error"):
            rows.append(f"| {r['op']} | {r['file']} | failed | | |")
        elif r["op"] == "import":
            rows.append(f"| import | {r['file']} ({r['MB']} MB, {r['entries']} entries) | {r['MB_per_s']} MB/s, "
                        f"{r['entries_per_s']} entries/s (one process: {r['one_process_MB_per_s']} MB/s) | raw "
                        f"sqlite3+orjson {r['raw_MB_per_s']} MB/s, {r['raw_entries_per_s']} entries/s | "
                        f"{r['ratio']} (one process {r['one_process_ratio']}) |")
        elif r["op"] == "export":
            rows.append(f"| export | {r['file']} | {r['MB_per_s']} MB/s (SQLite alone producing the bytes: "
                        f"{r['sqlite_read_MB_per_s']} MB/s) | file copy {r['copy_MB_per_s']} MB/s | {r['ratio']} |")
        elif r["op"] == "import-postgresql":
            rows.append(f"| import, PostgreSQL | {r['file']} | {r['MB_per_s']} MB/s, {r['entries_per_s']} entries/s |"
                        f" raw sqlite3 import | {r['ratio_vs_raw_sqlite']} |")
        elif r["op"] == "memory":
            rows.append(f"| peak RSS, import | {r['file']} ({r['MB']} MB) | importer {r['rss_mb']} MB, reading worker "
                        f"{r['worker_rss_mb']} MB, {r['MB_per_s']} MB/s; in one process: {r['one_process_rss_mb']} MB, "
                        f"{r['one_process_MB_per_s']} MB/s | limit 200 MB | |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--memory-gb", type=float, default=1.0, help="0 skips the memory run")
    parser.add_argument("--pg", help="also import into this PostgreSQL URL (an empty database)")
    parser.add_argument("--out", default="bench-out")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    bench_import(f"linear {args.entries}", make_linear(args.entries, out / f"linear-{args.entries}.jsonl"), out,
                 args.reps, args.pg)
    bench_import("Pi-written, realistic", realistic(out), out, args.reps, None)
    if args.memory_gb > 0:
        entries = int(args.memory_gb * 1e9 / 1140)  # make_linear_session writes ~1140 bytes an entry
        big = make_linear(entries, out / f"linear-{entries}.jsonl")
        result = ours(big, fresh_sqlite(out, "memory.db"), out / "export.jsonl")
        one = ours(big, fresh_sqlite(out, "memory.db"), out / "export.jsonl", parallel=False)
        if result and one:
            size = big.stat().st_size / 1e6
            record(op="memory", file=f"linear {result['entries']}", MB=round(size), rss_mb=round(result["rss_mb"]),
                   worker_rss_mb=round(result["worker_rss_mb"]), MB_per_s=round(size / result["import_s"], 1),
                   one_process_rss_mb=round(one["rss_mb"]), one_process_MB_per_s=round(size / one["import_s"], 1))
        fresh_sqlite(out, "memory.db")
        (out / "export.jsonl").unlink(missing_ok=True)
    print("\n" + markdown())
    print(f"\n(files kept in {out}; run at {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
