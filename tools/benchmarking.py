"""What the benchmark scripts share: where the baselines live, timing, and one JSON line per
measurement (``record``), kept in ``RESULTS`` for the tables the scripts print at the end.
Importing it puts the project root on ``sys.path`` (the scripts run from a checkout)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.oracle_support import SHARED  # noqa: E402  ($PI_STORE_SHARED, else ../shared)

BASELINES = SHARED / "baselines"
ORACLE_RUN = SHARED / "oracle" / "run.sh"
RESULTS: list[dict] = []


def record(**fields: object) -> dict:
    """Print one measurement as a JSON line and keep it in ``RESULTS``."""
    RESULTS.append(fields)
    print(json.dumps(fields), flush=True)
    return fields


def median_ms(fn: Callable[[], object], reps: int = 7) -> float:
    """Median wall time of ``fn`` in milliseconds over ``reps`` runs, after one warm-up run."""
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def run_json(cmd: list[str], timeout: float = 7200, **kw: object) -> dict | None:
    """The last stdout line of a baseline command, parsed as JSON (None, said on stderr, if it fails)."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=timeout, **kw).stdout
    except (subprocess.CalledProcessError, FileNotFoundError, subprocess.TimeoutExpired) as exc:
        print(f"baseline failed: {' '.join(map(str, cmd))}: {exc}", file=sys.stderr)
        return None
    return json.loads(out.strip().splitlines()[-1])


def pi_open_ms(path: Path, reps: int = 5) -> float | None:
    """The real Pi's open + buildSessionContext of ``path`` (median ms), None without the oracle."""
    if not ORACLE_RUN.exists():
        return None
    result = run_json([str(ORACLE_RUN), str(BASELINES / "pi_baseline.mjs"), "open", str(path), str(reps)])
    return result["median_ms"] if result else None
