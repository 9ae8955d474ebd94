"""CLI start-up: median wall time of ``pi-store --help`` and ``pi-store list`` on a small store.

    python tools/bench_startup.py [--runs 15] [--before REV]

Each command runs as a fresh process (``python -m store.cli ...``, what the ``pi-store`` script
does, in a scratch folder) ``--runs`` times after one warm-up run; the median is reported with
the load average, since the machine is shared. The small store is a SQLite file holding a few oracle fixture sessions,
imported by the code under test. With ``--before REV`` the same is measured for that revision,
checked out in a temporary ``git worktree`` (removed afterwards) and put first on ``PYTHONPATH``.
Two floors are measured alongside: a bare interpreter and ``import click, sqlalchemy`` (what any
command that reads the database loads at least).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarking import RESULTS, ROOT, record

FIXTURES = sorted((ROOT / "tests" / "fixtures" / "oracle" / "sessions").glob("small-*.jsonl"))[:5]


def median_run_ms(cmd: list[str], env: dict[str, str], runs: int, cwd: Path) -> float:
    """Median wall time of running ``cmd`` in ``cwd`` to completion, in milliseconds (one warm-up first)."""
    times = []
    for index in range(runs + 1):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if index:
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(label: str, checkout: Path, runs: int, scratch: Path) -> None:
    """Record ``--help`` and ``list`` of the code in ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("PI_STORE_DB", None)
    cli = [sys.executable, "-m", "store.cli"]
    where = subprocess.run([sys.executable, "-c", "import store; print(store.__file__)"], env=env, check=True,
                           capture_output=True, text=True, cwd=scratch).stdout.strip()
    if not Path(where).is_relative_to(checkout):
        raise SystemExit(f"{label}: imported {where}, not the code in {checkout}")
    db = scratch / f"store-{len(RESULTS)}.db"
    subprocess.run([*cli, "--db", str(db), "import", *map(str, FIXTURES)], env=env, cwd=scratch, check=True,
                   stdout=subprocess.DEVNULL)
    for command, args in (("--help", ["--help"]), ("list", ["--db", str(db), "list"])):
        load = os.getloadavg()[0]
        ms = median_run_ms([*cli, *args], env, runs, scratch)
        record(bench="startup", code=label, command=command, median_ms=round(ms), runs=runs,
               load_1min=round(load, 1))


def floors(runs: int, scratch: Path) -> None:
    """Record the interpreter alone and ``import click, sqlalchemy``."""
    for command, code in (("python -c pass", "pass"), ("import click, sqlalchemy", "import click, sqlalchemy")):
        load = os.getloadavg()[0]
        ms = median_run_ms([sys.executable, "-c", code], dict(os.environ), runs, scratch)
        record(bench="startup", code="floor", command=command, median_ms=round(ms), runs=runs,
               load_1min=round(load, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command (default 15)")
    parser.add_argument("--before", metavar="REV", help="also measure this git revision (e.g. main)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as folder:
        scratch = Path(folder)
        if options.before:
            tree = scratch / "before"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), options.before],
                           check=True)
            # the package maps store.migrations to ./migrations; the editable install maps it to this
            # checkout's, so the temporary one gets it beside its own code
            (tree / "store" / "migrations").symlink_to(tree / "migrations", target_is_directory=True)
            try:
                measure(f"before ({options.before})", tree, options.runs, scratch)
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
        measure("now", ROOT, options.runs, scratch)
        floors(options.runs, scratch)
    print("\n| code | command | median | load (1 min) |\n|---|---|---|---|")
    for row in RESULTS:
        print(f"| {row['code']} | `{row['command']}` | {row['median_ms']} ms | {row['load_1min']} |")


if __name__ == "__main__":
    main()
