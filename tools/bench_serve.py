"""How fast ``pi-store serve`` answers: the pages and API of a 5,000-entry linear session and of
a 100-branch session on SQLite, over real HTTP to a real ``pi-store serve`` subprocess.

    python tools/bench_serve.py [--reps 7]

Prints one JSON line per measurement (median and best of ``reps`` after a warm-up) and a table;
the target is ≤ 200 ms a page for the 5,000-entry session. Load on the machine changes the
numbers: the one-minute load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from benchmarking import ROOT, record

from tests.web import sessions
from tests.web.conftest import import_files, start_server, stop


def timed(url: str, reps: int) -> tuple[float, float, int]:
    httpx.get(url, timeout=300)
    times, size = [], 0
    for _ in range(reps):
        start = time.perf_counter()
        response = httpx.get(url, timeout=300)
        times.append((time.perf_counter() - start) * 1000)
        size = len(response.content)
        assert response.status_code == 200, (url, response.status_code)
    return statistics.median(times), min(times), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        url = f"sqlite:///{folder / 'store.db'}"
        import_files(url, folder)
        process, base = start_server(url)
        try:
            pages = {
                "long: session page (leaf)": f"/sessions/{sessions.LONG_ID}",
                "long: session page, entry in the middle": f"/sessions/{sessions.LONG_ID}?leaf=L02500",
                "long: session page, fold opened (5,000 rows)": f"/sessions/{sessions.LONG_ID}?open=L00001",
                "long: context API": f"/api/sessions/{sessions.LONG_ID}/context",
                "long: session API": f"/api/sessions/{sessions.LONG_ID}",
                "branchy: session page, side branch": f"/sessions/{sessions.BRANCHY_ID}?leaf=T042b3",
                "sessions page": "/",
                "sessions page with search": "/?q=module",
                "usage page": "/usage",
            }
            for name, path in pages.items():
                median, best, size = timed(base + path, args.reps)
                record(bench="serve", page=name, path=path, median_ms=round(median, 1), best_ms=round(best, 1),
                       bytes=size, load1=round(os.getloadavg()[0], 2))
        finally:
            stop(process)
    print(f"\n{'page':48} {'median ms':>10} {'best ms':>9} {'KiB':>7}", file=sys.stderr)
    from benchmarking import RESULTS

    for r in RESULTS:
        print(f"{r['page']:48} {r['median_ms']:>10} {r['best_ms']:>9} {r['bytes'] // 1024:>7}", file=sys.stderr)
    print(f"(root {ROOT}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)", file=sys.stderr)


if __name__ == "__main__":
    main()
