#!/usr/bin/env python3
"""PostgreSQL import against the SQLite import of the same files, in the same run.

    python tools/bench_pg_import.py PATH [PATH ...] [--rounds 3] [--before REV] [--pg URL]

Each PATH (a session file, or a folder of them: Pi's layout) is imported, in fresh processes
taking turns round after round so that the machine's load hits them alike, by:

* the raw SQLite baseline (``../shared/baselines/raw_sqlite_baseline.py``: its schema and
  pragmas, ``orjson`` per line, one ``executemany`` per file in a transaction of its own, as an
  import commits each file);
* ``SessionStore.import_path`` into a fresh SQLite file, then ``fts.sync`` (what ``pi-store
  import`` does before it returns, so that a search finds the rows: timed apart);
* ``SessionStore.import_path`` into a fresh PostgreSQL database on the ``--pg`` server (made
  for the run, dropped after); with ``--before REV`` also the code of that revision (a temporary
  ``git worktree``, first on ``PYTHONPATH``).

Reported per variant (best of ``--rounds``): MB/s, entries/s, the importing process's CPU time
and — the server being local — the PostgreSQL backend's CPU time (``/proc``), and the ratios
against the raw baseline and the SQLite import of the same round. Prints one JSON object per
measurement and a Markdown table at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from benchmarking import BASELINES, RESULTS, ROOT, record, run_json
from sqlalchemy import create_engine, make_url, text

# In a fresh interpreter: import PATH into URL, then bring the search index up to date.
_IMPORT = r"""
import json, os, sys, time
from sqlalchemy import text
from store.analysis import fts
from store.session_store import SessionStore
url, path = sys.argv[1], sys.argv[2]
store = SessionStore.connect(url)
postgres = not url.startswith("sqlite")

def server_cpu():  # the backend's CPU seconds (the server runs on this machine)
    if not postgres:
        return 0.0
    with store.engine.connect() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

before_server, cpu, start = server_cpu(), time.process_time(), time.perf_counter()
reports = store.import_path(path)
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
server = server_cpu() - before_server
start = time.perf_counter()
fts.sync(store.engine)
sync_s = time.perf_counter() - start
print(json.dumps({"s": seconds, "sync_s": sync_s, "cpu_s": cpu, "server_cpu_s": server, "files": len(reports),
                  "imported": sum(r.imported for r in reports), "entries": sum(r.entries or 0 for r in reports),
                  "bytes": sum(r.size or 0 for r in reports if r.imported)}))
"""

# The raw baseline's loop over several files: its connect() (schema, pragmas) and its row shape.
_RAW = r"""
import json, os, sys, tempfile, time
from pathlib import Path
import orjson
sys.path.insert(0, sys.argv[1])
from raw_sqlite_baseline import connect
path = Path(sys.argv[2])
files = sorted(path.rglob("*.jsonl")) if path.is_dir() else [path]
with tempfile.TemporaryDirectory() as folder:
    conn = connect(os.path.join(folder, "raw.db"))
    start, entries, size = time.perf_counter(), 0, 0
    for session, name in enumerate(files):
        rows = []
        with open(name, "rb") as f:
            next(f, None)  # the header
            for seq, line in enumerate(f):
                try:
                    o = orjson.loads(line)
                    rows.append((session, seq, o.get("id"), o.get("parentId"), o.get("type"), o.get("timestamp"),
                                 line.decode()))
                except (orjson.JSONDecodeError, UnicodeDecodeError, AttributeError):
                    continue  # the baseline cannot read it (the store keeps it as a skipped line)
        conn.execute("begin")
        conn.executemany("insert into e values (?,?,?,?,?,?,?)", rows)
        conn.execute("commit")
        entries += len(rows)
        size += os.path.getsize(name)
    print(json.dumps({"s": time.perf_counter() - start, "entries": entries, "bytes": size}))
"""


def raw_baseline(path: Path) -> dict | None:
    """The raw SQLite baseline's import of the files at ``path``: seconds, entries, bytes."""
    return run_json([sys.executable, "-c", _RAW, str(BASELINES), str(path)])


def load() -> float:
    return os.getloadavg()[0]


def run_import(checkout: Path, url: str, path: Path) -> dict | None:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    return run_json([sys.executable, "-c", _IMPORT, url, str(path)], env=env, cwd=checkout)


def fresh_pg(server: str) -> tuple[str, object]:
    """A new empty database on ``server``; returns its URL and a function that drops it."""
    name = f"bench_pg_import_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(server).set(database=name).render_as_string(hide_password=False), drop


def bench(path: Path, rounds: int, server: str, trees: dict[str, Path], scratch: Path) -> None:
    runs: dict[str, list[dict]] = {}
    for round_number in range(rounds):
        start_load = load()
        raw = raw_baseline(path)
        db = scratch / "sqlite.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        sqlite = run_import(ROOT, f"sqlite:///{db}", path)
        measured = {"raw": raw, "sqlite": sqlite}
        for label, tree in trees.items():
            url, drop = fresh_pg(server)
            try:
                measured[f"postgresql {label}"] = run_import(tree, url, path)
            finally:
                drop()  # type: ignore[operator]
        for variant, result in measured.items():
            if result is not None:
                result["load"] = (start_load, load())
                result["round"] = round_number
                runs.setdefault(variant, []).append(result)
    best = {variant: min(results, key=lambda r: r["s"]) for variant, results in runs.items()}
    raw = best.get("raw")
    sqlite = best.get("sqlite")
    for variant, result in best.items():
        size_mb = result["bytes"] / 1e6
        fields = {
            "MB": round(size_mb, 1),
            "entries": result["entries"],
            "s": round(result["s"], 2),
            "MB_per_s": round(size_mb / result["s"], 2),
            "entries_per_s": round(result["entries"] / result["s"]),
        }
        if variant != "raw":
            fields.update(
                cpu_s=round(result["cpu_s"], 2),
                server_cpu_s=round(result["server_cpu_s"], 2),
                fts_sync_s=round(result["sync_s"], 2),
                files=result["files"],
                imported=result["imported"],
            )
            if raw:
                fields["vs_raw_sqlite"] = round(raw["s"] / result["s"], 3)
            if sqlite and variant != "sqlite":
                fields["vs_sqlite_import"] = round(sqlite["s"] / result["s"], 3)
                fields["vs_sqlite_import_and_sync"] = round((sqlite["s"] + sqlite["sync_s"]) / result["s"], 3)
        record(
            op="import",
            path=str(path),
            variant=variant,
            rounds=len(runs[variant]),
            load=[round(x, 1) for x in result["load"]],
            **fields,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--pg",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="a database URL on the server to use (new databases are made beside it)",
    )
    parser.add_argument("--before", help="also import into PostgreSQL with this revision's code")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        trees = {"now": ROOT}
        if args.before:
            tree = scratch / "before"
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), args.before], check=True
            )
            (tree / "store" / "migrations").symlink_to(tree / "migrations", target_is_directory=True)
            trees = {f"before ({args.before})": tree, **trees}
        try:
            for path in args.paths:
                bench(path.resolve(), args.rounds, args.pg, trees, scratch)
        finally:
            if args.before:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
    print(
        "\n| files | variant | MB/s | entries/s | CPU s (client + server) | vs raw SQLite | vs SQLite import "
        "(+ fts sync) | load |\n|---|---|---|---|---|---|---|---|"
    )
    for r in RESULTS:
        cpu = f"{r['cpu_s']} + {r['server_cpu_s']}" if "cpu_s" in r else ""
        vs_sqlite = f"{r['vs_sqlite_import']} ({r['vs_sqlite_import_and_sync']})" if "vs_sqlite_import" in r else ""
        print(
            f"| {Path(r['path']).name} ({r['MB']} MB, {r['entries']} entries) | {r['variant']} | {r['MB_per_s']} | "
            f"{r['entries_per_s']} | {cpu} | {r.get('vs_raw_sqlite', '')} | {vs_sqlite} | "
            f"{r['load'][0]}-{r['load'][1]} |"
        )
    print(f"\n({json.dumps({'cpus': os.cpu_count()})})")


if __name__ == "__main__":
    main()
