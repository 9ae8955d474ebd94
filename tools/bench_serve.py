"""How fast ``pi-store serve`` answers: the pages and API of a 5,000-entry linear session and of
a 100-branch session on SQLite, over real HTTP to a real ``pi-store serve`` subprocess.

    python tools/bench_serve.py [--reps 7] [--before REV]

Prints one JSON line per measurement (median and best of ``reps`` after a warm-up) and a table;
the target is ≤ 200 ms a page for the 5,000-entry session. With ``--before REV`` that revision's
``pi-store serve`` (a temporary git worktree) runs over the same store and every page is timed on
both servers in turn, request by request, so that the machine's load falls on both alike; the
table then gives the ratio now / before. The one-minute load average is printed with the numbers.
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

import httpx
from benchmarking import RESULTS, ROOT, record

from tests.web import sessions
from tests.web.conftest import free_port, import_files, start_server, stop

PAGES = {
    "long: session page (leaf)": f"/sessions/{sessions.LONG_ID}",
    "long: session page, entry in the middle": f"/sessions/{sessions.LONG_ID}?leaf=L02500",
    "long: session page, fold opened (5,000 rows)": f"/sessions/{sessions.LONG_ID}?open=L00001",
    "long: context API": f"/api/sessions/{sessions.LONG_ID}/context",
    "long: session API": f"/api/sessions/{sessions.LONG_ID}",
    "branchy: session page (leaf)": f"/sessions/{sessions.BRANCHY_ID}",
    "branchy: session page, side branch": f"/sessions/{sessions.BRANCHY_ID}?leaf=T042b3",
    "sessions page": "/",
    "sessions page with search": "/?q=module",
    "usage page": "/usage",
}


def cpu_ms(pid: int) -> float:
    """CPU time (user + system) the process has used so far, in ms (clock-tick resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def get_ms(url: str) -> tuple[float, int]:
    start = time.perf_counter()
    response = httpx.get(url, timeout=300)
    elapsed = (time.perf_counter() - start) * 1000
    assert response.status_code == 200, (url, response.status_code)
    return elapsed, len(response.content)


def start_before(tree: Path, url: str) -> tuple[subprocess.Popen, str]:
    """``pi-store serve`` of the code in ``tree`` (its own package first on the path)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    process = subprocess.Popen(
        [sys.executable, "-m", "store.cli", "--db", url, "serve", "--port", str(port)],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        if process.poll() is not None:
            raise RuntimeError(f"the before server exited: {process.stderr.read()}")
        try:
            httpx.get(base + "/static/style.css", timeout=5)
            return process, base
        except httpx.TransportError:
            time.sleep(0.2)
    raise RuntimeError("the before server did not answer")


def measure(servers: dict[str, tuple[str, int]], reps: int) -> None:
    """Each page on each server: a warm-up, then ``reps`` rounds of one request per server. Besides
    the wall time, the server process's CPU time per request (it hardly depends on the load)."""
    for name, path in PAGES.items():
        times: dict[str, list[float]] = {label: [] for label in servers}
        cpu = dict.fromkeys(servers, 0.0)
        sizes: dict[str, int] = {}
        for base, _ in servers.values():
            get_ms(base + path)
        for _ in range(reps):
            for label, (base, pid) in servers.items():
                used = cpu_ms(pid)
                elapsed, sizes[label] = get_ms(base + path)
                cpu[label] += cpu_ms(pid) - used
                times[label].append(elapsed)
        for label in servers:
            record(
                bench="serve",
                code=label,
                page=name,
                path=path,
                median_ms=round(statistics.median(times[label]), 1),
                best_ms=round(min(times[label]), 1),
                server_cpu_ms=round(cpu[label] / reps, 1),
                bytes=sizes[label],
                load1=round(os.getloadavg()[0], 2),
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--before", metavar="REV", help="also time this git revision's server (e.g. main)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as scratch:
        folder = Path(scratch)
        url = f"sqlite:///{folder / 'store.db'}"
        import_files(url, folder)
        processes: list[subprocess.Popen] = []
        servers: dict[str, str] = {}
        tree = folder / "before"
        try:
            if args.before:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), args.before], check=True
                )
                # the editable install maps store.migrations to this checkout's; the old tree gets its own
                (tree / "store" / "migrations").symlink_to(tree / "migrations", target_is_directory=True)
                process, base = start_before(tree, url)
                processes.append(process)
                servers["before"] = (base, process.pid)
            process, base = start_server(url)
            processes.append(process)
            servers["now"] = (base, process.pid)
            measure(servers, args.reps)
        finally:
            for process in processes:
                stop(process)
            if args.before:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
    by_page: dict[str, dict[str, dict]] = {}
    for r in RESULTS:
        by_page.setdefault(r["page"], {})[r["code"]] = r
    heads = [f"{label} median (best) ms | {label} server CPU ms" for label in servers]
    print(
        f"\n| page | {' | '.join(heads)} | KiB now |{' now / before (median, CPU) |' if args.before else ''}",
        file=sys.stderr,
    )
    print("|---" * (2 * len(servers) + 2 + bool(args.before)) + "|", file=sys.stderr)
    for page, rows in by_page.items():
        cells = " | ".join(
            f"{rows[label]['median_ms']} ({rows[label]['best_ms']}) | {rows[label]['server_cpu_ms']}"
            for label in servers
        )
        ratio = ""
        if args.before:
            now, before = rows["now"], rows["before"]
            ratio = (
                f" {now['median_ms'] / before['median_ms']:.2f}, "
                f"{now['server_cpu_ms'] / max(before['server_cpu_ms'], 0.1):.2f} |"
            )
        print(f"| {page} | {cells} | {rows['now']['bytes'] // 1024} |{ratio}", file=sys.stderr)
    print(f"(root {ROOT}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)", file=sys.stderr)


if __name__ == "__main__":
    main()
