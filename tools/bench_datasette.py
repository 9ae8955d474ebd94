#!/usr/bin/env python3
"""Datasette over a store: every table and view page, the canned queries and a search, as the
real ``datasette serve`` answers them with the package's metadata (``pi-store path
--datasette-metadata``), with Datasette's facet suggestions on (its default) and off.

    python tools/bench_datasette.py STORE.db [--reps 3] [--word WORD]

STORE.db: a SQLite store, e.g. the one ``tools/bench_analysis.py --out DIR`` leaves in
``DIR/analysis.db``. Baseline, in the same run: the page's own query (``SELECT * FROM name LIMIT
101``, or the canned query) run directly on the file with ``sqlite3``; ``vs_query`` is the page's
time over it (what Datasette adds: the count, facets, suggestions, rendering). A page whose
query Datasette interrupts (its 1 s ``sql_time_limit_ms``) is reported with its status.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from benchmarking import RESULTS, median_ms, record

BIN = Path(sys.executable).parent


def serve(path: Path, folder: Path, *settings: str) -> tuple[subprocess.Popen, httpx.Client]:
    metadata = subprocess.run(
        [str(BIN / "pi-store"), "--db", str(path), "path", "--datasette-metadata"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (folder / "metadata.json").write_text(metadata, "utf-8")
    socket = folder / f"datasette-{len(settings)}.sock"
    process = subprocess.Popen(
        [
            str(BIN / "datasette"),
            "serve",
            str(path),
            "-m",
            str(folder / "metadata.json"),
            "--uds",
            str(socket),
            *settings,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)), base_url="http://datasette", timeout=60)
    for _ in range(300):
        try:
            if client.get("/-/versions.json").status_code == 200:
                return process, client
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit("datasette did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--word", default="kalo", help="the full-text search word")
    args = parser.parse_args()
    name = args.store.stem
    metadata = json.loads((Path(__file__).resolve().parents[1] / "store" / "analysis" / "datasette.json").read_text())
    queries = next(iter(metadata["databases"].values()))["queries"]
    direct = sqlite3.connect(f"file:{args.store}?mode=ro", uri=True)
    with tempfile.TemporaryDirectory() as folder:
        for label, settings in (("suggestions on", ()), ("suggestions off", ("--setting", "suggest_facets", "off"))):
            process, client = serve(args.store, Path(folder), *settings)
            try:
                page = client.get(f"/{name}.json").json()
                pages = [t["name"] for t in page["tables"] if not t["hidden"]] + [v["name"] for v in page["views"]]
                urls = {f"page {p}": (f"/{name}/{p}.json?_size=100", f"SELECT * FROM {p} LIMIT 101") for p in pages}
                urls |= {
                    f"canned {q}": (f"/{name}/{q}.json?query={args.word}", spec["sql"]) for q, spec in queries.items()
                }
                urls["search on entries"] = (f"/{name}/entries.json?_search={args.word}", None)
                for what, (url, sql) in urls.items():
                    status = client.get(url).status_code
                    ms = median_ms(lambda u=url, c=client: c.get(u), args.reps)
                    base = (
                        None
                        if sql is None
                        else median_ms(lambda s=sql: direct.execute(s, {"query": args.word}).fetchall(), args.reps)
                    )
                    record(op=f"{what} ({label})", status=status, ms=ms, query_ms=base, vs_query=base and ms / base)
            finally:
                client.close()
                process.terminate()
                process.wait()
    print("\n| page | status | Datasette | its query alone | ratio |\n|---|---|---|---|---|")
    for r in RESULTS:
        query = f"{r['query_ms']:.1f} ms" if r["query_ms"] is not None else ""
        ratio = f"{r['vs_query']:.1f}x" if r["vs_query"] else ""
        print(f"| {r['op']} | {r['status']} | {r['ms']:.0f} ms | {query} | {ratio} |")


if __name__ == "__main__":
    main()
