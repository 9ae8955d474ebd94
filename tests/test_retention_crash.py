"""``kill -9`` during ``SessionStore.delete`` and ``SessionStore.prune(apply=True)`` (real processes, SQLite).

Each run copies a prepared database, starts the call in a process of its own, kills it at a
seeded moment within the time an uninterrupted call takes, and checks the store: the deleted
session is wholly there or wholly gone, the pruned one is exactly the original or exactly the
pruned result (never a mix), the other session is untouched, every session's tree columns
verify, and running the command (``pi-store delete`` / ``prune --apply``) again finishes the job.
``PI_STORE_CRASH_RUNS`` (default 3 per call) runs a longer campaign.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from store.interchange.verifying import verify_all
from store.session_store import SessionStore
from tests.retention_sessions import branched_lines, bulky_lines, write_session

RUNS = int(os.environ.get("PI_STORE_CRASH_RUNS", "3"))
PRUNE = ("prune", "30d")
DELETE = ("delete", "big")


# A real process that runs one store call: it says "ready" once imports and connection are done,
# so that the kill lands inside the call, not in the interpreter's start-up (~1-3 s here).
_DRIVER = """
import sys, time
from store.retention import RetentionPolicy, parse_duration
from store.session_store import SessionStore
store = SessionStore.connect(sys.argv[1])
print("ready", flush=True)
started = time.perf_counter()
if sys.argv[2] == "delete":
    store.delete(sys.argv[3:], ignore_missing=True)
else:
    store.prune(RetentionPolicy(parse_duration(sys.argv[3])), apply=True)
print(time.perf_counter() - started, flush=True)
"""


def _driver(db: Path, *args: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", _DRIVER, f"sqlite:///{db}", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "ready\n", process.stderr.read()
    return process


def _finish(db: Path, *args: str) -> float:
    """Run the call to its end; returns how long the call itself took."""
    process = _driver(db, *args)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    return float(stdout)


def _finish_cli(db: Path, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "store.cli", "--db", f"sqlite:///{db}", *args],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def _exports(db: Path) -> dict[str, bytes]:
    with SessionStore.connect(f"sqlite:///{db}") as store:
        return {info.id: b"".join(store.iter_export(info.id)) for info in store.list_all()}


def _check_consistent(db: Path) -> None:
    """verify: every tree column as a fresh derivation gives it, every export as imported unless
    the session is marked diverged from its file (a pruned one)."""
    with SessionStore.connect(f"sqlite:///{db}") as store:
        with store.engine.connect() as conn:
            diverged = set(conn.execute(text("SELECT session_id FROM sessions WHERE diverged_seq IS NOT NULL"))
                           .scalars())
        for health in verify_all(store):
            assert health.tree_ok, health.details
            assert health.bytes_ok or health.session_id in diverged, health.details


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict:
    """A database holding a big old branched session and a small one, the exports before and
    after an uninterrupted prune, and how long an uninterrupted delete and prune take."""
    root = tmp_path_factory.mktemp("crash")
    now = time.time() * 1000
    big = write_session(root / "big.jsonl", bulky_lines("big", now, branches=1500))
    small = write_session(root / "small.jsonl", branched_lines("small", now, "crash"))
    base = root / "base.db"
    with SessionStore.connect(f"sqlite:///{base}") as store:
        store.import_path(big, small)
    before = _exports(base)
    pruned_db = root / "pruned.db"
    shutil.copy(base, pruned_db)
    prune_seconds = _finish(pruned_db, *PRUNE)
    deleted_db = root / "deleted.db"
    shutil.copy(base, deleted_db)
    delete_seconds = _finish(deleted_db, *DELETE)
    return {"root": root, "base": base, "before": before, "pruned": _exports(pruned_db),
            "prune_seconds": prune_seconds, "delete_seconds": delete_seconds}


def _killed_run(prepared: dict, name: str, seed: int, args: tuple[str, ...], seconds: float) -> Path:
    db = prepared["root"] / f"{name}-{seed}.db"
    shutil.copy(prepared["base"], db)
    process = _driver(db, *args)
    time.sleep(random.Random(seed).uniform(0.0, 1.1) * seconds)  # mostly inside the call, now and then after it
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    return db


@pytest.mark.parametrize("seed", range(RUNS))
def test_kill_during_delete(prepared: dict, seed: int) -> None:
    db = _killed_run(prepared, "delete", seed, DELETE, prepared["delete_seconds"])
    exports = _exports(db)
    assert exports["small"] == prepared["before"]["small"]
    assert exports.get("big") in (None, prepared["before"]["big"])  # wholly there or wholly gone
    _check_consistent(db)
    _finish_cli(db, "delete", "big", "--ignore-missing")
    assert _exports(db) == {"small": prepared["before"]["small"]}
    _check_consistent(db)


@pytest.mark.parametrize("seed", range(RUNS))
def test_kill_during_prune(prepared: dict, seed: int) -> None:
    db = _killed_run(prepared, "prune", seed, PRUNE, prepared["prune_seconds"])
    exports = _exports(db)
    assert exports in (prepared["before"], prepared["pruned"])  # all or nothing, both sessions together
    _check_consistent(db)
    _finish_cli(db, "prune", "--older-than", "30d", "--apply")
    assert _exports(db) == prepared["pruned"]
    _check_consistent(db)


def test_the_prepared_prune_did_something(prepared: dict) -> None:
    """The kill tests compare against states that differ (else they would pass by construction)."""
    assert prepared["pruned"]["big"] != prepared["before"]["big"]
    assert prepared["pruned"]["small"] != prepared["before"]["small"]
    assert len(prepared["pruned"]["big"]) < len(prepared["before"]["big"]) * 0.3
