"""Seeded fast subset of the crash matrix (``tools/crash_matrix.py``; the full run is in
BENCHMARKS.md, "Campaigns"): each scenario's command killed with SIGKILL at seeded times, then
checked (acknowledged work stored once, store healthy, a re-run finishes the job); and the CLI's
commands stopped with SIGTERM, which must end them by themselves, without a traceback, under the
same checks."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.campaigns import crash_matrix
from tests.conftest import scratch_pg_database

SEED = 20260102
# SIGTERM's stop times are drawn apart from SIGKILL's; this seed stops each command while it works
# (the import at 0.9–1.1 s of its ~3 s, the watch at 1.4 s; a compaction, ~0.3 s, is too short to
# be sure to land on: the campaign's, with its calibration, covers it)
TERM_SEED = 20261161
FAST = ["append", "batch", "sync", "compact"]


def _matrix(engine: str, scenarios: list[str], runs: int, stop_signal: signal.Signals = signal.SIGKILL,
            seed: int = SEED) -> list:
    if engine == "postgresql":  # the matrix makes its own scratch databases; skip (loudly) without a server
        with scratch_pg_database("pi_crash_probe"):
            pass
    return crash_matrix.run_matrix(runs=runs, seed=seed, engines=[engine], scenarios=scenarios, calibrate=False,
                                   stop_signal=stop_signal)


def _assert_clean(results: list) -> None:
    assert results and all(r.kill_at is not None for r in results)
    failures = [f"{r.engine} {r.scenario} run {r.run} (kill at {r.kill_at:.2f} s): {r.error}" for r in results
                if r.error]
    assert not failures, crash_matrix.summary(results) + "\n" + "\n".join(failures)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", FAST)
def test_kills_on_sqlite(scenario: str) -> None:
    _assert_clean(_matrix("sqlite", [scenario], runs=2))


@pytest.mark.slow
@pytest.mark.parametrize("scenario", FAST)
def test_a_kill_on_postgresql(scenario: str) -> None:
    _assert_clean(_matrix("postgresql", [scenario], runs=1))


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_kills_of_a_folder_import(engine: str) -> None:
    _assert_clean(_matrix(engine, ["import"], runs=1))


@pytest.mark.slow
@pytest.mark.parametrize(("engine", "scenario"), [("sqlite", "import"), ("sqlite", "sync"), ("postgresql", "import")])
def test_sigterm_stops_the_cli_cleanly(engine: str, scenario: str) -> None:
    results = _matrix(engine, [scenario], runs=1, stop_signal=signal.SIGTERM, seed=TERM_SEED)
    _assert_clean(results)
    assert all(r.landed for r in results), "the command had ended before its SIGTERM: nothing was tested"


def test_reading_worker_dies_with_its_importer(tmp_path: Path) -> None:
    big = crash_matrix.big_session(tmp_path / "big.jsonl")
    crash_matrix.become_subreaper()
    earlier = {pid for pid, parent in crash_matrix._ppids().items() if parent == os.getpid()}  # e.g. servers
    command = [*crash_matrix._cli(), "--db", f"sqlite:///{tmp_path / 's.db'}", "import", str(big), "--progress",
               "none"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    children: set[int] = set()
    while not children and process.poll() is None and time.monotonic() < deadline:
        children = crash_matrix.descendants(process.pid)
        time.sleep(0.02)
    assert children, "the import of a 33 MB file did not fork its reading worker"
    time.sleep(0.5)  # the worker is reading
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert crash_matrix.survivors(children, earlier) == []
