"""CLI start-up: median wall time of ``pi-store --help`` and ``pi-store list`` on a small store.

    python tools/bench_startup.py [--runs 15] [--before REV]

Each command runs as a fresh process (``python -m store.cli ...``, what the ``pi-store`` script
does, in a scratch folder). The small store is a SQLite file holding a few oracle fixture
sessions, imported by the code under test. With ``--before REV`` the same is measured for that
revision, checked out in a temporary ``git worktree`` (removed afterwards) and put first on
``PYTHONPATH``. Two floors are measured alongside: a bare interpreter and ``import click,
sqlalchemy`` (what any command that reads the database loads at least).

The machine is shared, so the variants take turns: each round runs every command once (one
warm-up round first), and each median is reported with its ratio to the same run's floor and,
for "now", to "before" — load that comes and goes hits them all alike.
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


def run_ms(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    """Wall time of running ``cmd`` in ``cwd`` to completion, in milliseconds."""
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1000


def commands(label: str, checkout: Path, scratch: Path) -> list[tuple[str, str, list[str], dict[str, str]]]:
    """``--help`` and ``list`` of the code in ``checkout`` (its small store imported first)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("PI_STORE_DB", None)
    cli = [sys.executable, "-m", "store.cli"]
    where = subprocess.run([sys.executable, "-c", "import store; print(store.__file__)"], env=env, check=True,
                           capture_output=True, text=True, cwd=scratch).stdout.strip()
    if not Path(where).is_relative_to(checkout):
        raise SystemExit(f"{label}: imported {where}, not the code in {checkout}")
    db = scratch / f"store-{label.split()[0]}.db"
    subprocess.run([*cli, "--db", str(db), "import", *map(str, FIXTURES)], env=env, cwd=scratch, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return [(label, "--help", [*cli, "--help"], env), (label, "list", [*cli, "--db", str(db), "list"], env)]


def floors() -> list[tuple[str, str, list[str], dict[str, str]]]:
    """The interpreter alone and ``import click, sqlalchemy``."""
    return [("floor", command, [sys.executable, "-c", code], dict(os.environ))
            for command, code in (("python -c pass", "pass"), ("import click, sqlalchemy", "import click, sqlalchemy"))]


def measure(variants: list[tuple[str, str, list[str], dict[str, str]]], runs: int, scratch: Path) -> None:
    """Run every variant once per round (``runs`` rounds after a warm-up one) and record the medians."""
    times: dict[tuple[str, str], list[float]] = {(code, command): [] for code, command, _, _ in variants}
    load = os.getloadavg()[0]
    for index in range(runs + 1):
        for code, command, cmd, env in variants:
            ms = run_ms(cmd, env, scratch)
            if index:
                times[(code, command)].append(ms)
    medians = {key: statistics.median(values) for key, values in times.items()}
    floor = medians[("floor", "import click, sqlalchemy")]
    for (code, command), ms in medians.items():
        before = next((v for (c, m), v in medians.items() if c.startswith("before") and m == command), None)
        record(bench="startup", code=code, command=command, median_ms=round(ms), runs=runs,
               vs_floor=round(ms / floor, 2),
               vs_before=round(ms / before, 2) if before and code == "now" else None,
               load_1min_start=round(load, 1), load_1min_end=round(os.getloadavg()[0], 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command (default 15)")
    parser.add_argument("--before", metavar="REV", help="also measure this git revision (e.g. main)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as folder:
        scratch = Path(folder)
        variants = []
        tree = scratch / "before"
        if options.before:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), options.before],
                           check=True)
            # the package maps store.migrations to ./migrations; the editable install maps it to this
            # checkout's, so the temporary one gets it beside its own code
            (tree / "store" / "migrations").symlink_to(tree / "migrations", target_is_directory=True)
        try:
            if options.before:
                variants += commands(f"before ({options.before})", tree, scratch)
            variants += commands("now", ROOT, scratch) + floors()
            measure(variants, options.runs, scratch)
        finally:
            if options.before:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
    print("\n| code | command | median | / floor | / before | load (1 min, start-end) |\n|---|---|---|---|---|---|")
    for row in RESULTS:
        print(f"| {row['code']} | `{row['command']}` | {row['median_ms']} ms | {row['vs_floor']} | "
              f"{row['vs_before'] or ''} | {row['load_1min_start']}-{row['load_1min_end']} |")


if __name__ == "__main__":
    main()
