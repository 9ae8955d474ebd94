#!/usr/bin/env python3
"""Crash matrix: real writer processes killed with SIGKILL at seeded random times, then the
promise "acknowledged work is there exactly once, the store is healthy, re-running finishes the
job" checked.

    python tools/crash_matrix.py --runs 20 --seed 1 [--engine sqlite|postgresql|both] [--scenario append ...]
        [--signal KILL|TERM]

``--signal TERM`` stops each command with SIGTERM instead (``kill``, a service manager, a container
stopping): the command must then end by itself within ``GRACE`` seconds — the CLI with status 143,
a writer script killed by the signal, ``sync --watch`` with its summary and status 0 (a stop signal
is how a watch ends) — without a traceback, and everything below must hold as
after a SIGKILL. The CLI turns a SIGTERM into Ctrl-C's interrupt, so this runs the clean-up paths
(rollbacks, the reading worker's end, ``finally`` blocks) that a SIGKILL skips.

Scenarios (``SCENARIOS``, the table new ones — ``delete``, ``prune`` — are added to):

* ``append``: a loop of single ``append_message`` calls (``writer append``, below); each id is
  printed, flushed, after its append returned: every printed id must be stored once, in one
  unbroken chain, with at most one more (committed, killed before printing);
* ``batch``: 10,000 ``append_custom_entry`` in one ``batch()``: all of them or none, all if the
  writer printed ``committed``;
* ``import``: ``pi-store import FOLDER --json`` of a folder holding a ≥ 32 MB file (read by the
  forked reading worker) among smaller ones: each file reported is stored byte-identical, no file
  is stored in part, and no child process of the killed importer survives it (by pid: the harness
  is the child subreaper, so orphans become its children and are seen);
* ``sync``: ``pi-store sync FOLDER --watch`` while the harness appends lines to the session files
  (as Pi does): every stored session is a prefix of its file and holds at least what was reported;
* ``compact``: ``pi-store compact SESSION --summarizer deterministic`` on a long session: the
  session's entries are intact, and it holds one compaction or none (the reported one if any).

After each kill: no process of the command's tree is left (``GRACE`` seconds), ``pi-store verify
--all`` is clean (a session reported only as "diverged" passes), the scenario's checks hold; then
the command is run again to the end (``sync`` without ``--watch``) and the final checks hold:
nothing lost, nothing duplicated. The first run of each scenario is a calibration that is not
killed (its duration draws the kill times of the others). Run ``r`` of a scenario kills at a time
drawn from ``Random(f"{seed}:{scenario}:{engine}:{r}")``. Ends with
``crash-matrix: K kills (L landed mid-run), F failures of N runs``; exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from fuzz_import import FIXTURES, store_url  # noqa: E402

GRACE = 5.0  # seconds a child of a killed command may take to notice and exit (a SIGTERMed command: to end)
# exit statuses of a command stopped by SIGTERM: the CLI's (128 + 15), or killed by the signal itself
TERM_STATUSES = (128 + signal.SIGTERM, -signal.SIGTERM)
COMMAND_TIMEOUT = 300.0  # for a re-run or a verify
CWD = "/crash/matrix"
SESSION = "0190a0a0-0000-7000-8000-00000000c0de"
BATCH = 10_000
BIG_BYTES = 33 << 20


class Failed(AssertionError):
    """A check of a run failed (the message says which)."""


def _cli() -> list[str]:
    cli = Path(sys.executable).with_name("pi-store")
    return [str(cli)] if cli.exists() else [sys.executable, "-m", "store.cli"]


# ---------------------------------------------------------------------------- the writers (child processes)
def writer_append(url: str, count: int) -> None:
    """Append ``count`` user messages "append i" (continuing after the stored ones), printing
    ``ack <id> <i>`` after each append returned."""
    from store.errors import SessionNotFound
    from store.session_store import SessionStore

    store = SessionStore.connect(url)
    try:
        manager = store.open(SESSION)
    except SessionNotFound:
        manager = store.create(CWD, session_id=SESSION)
    start = len(_markers(manager.get_entries(), "append "))
    print("ready", flush=True)
    for i in range(start, count):
        entry_id = manager.append_message({"role": "user", "content": f"append {i}"})
        print(f"ack {entry_id} {i}", flush=True)
    print("done", flush=True)


def writer_batch(url: str, count: int) -> None:
    """One user message, then ``count`` custom entries in one ``batch()`` unless stored already."""
    from store.errors import SessionNotFound
    from store.session_store import SessionStore

    store = SessionStore.connect(url)
    try:
        manager = store.open(SESSION)
    except SessionNotFound:
        manager = store.create(CWD, session_id=SESSION)
        entry_id = manager.append_message({"role": "user", "content": "start"})
        print(f"ack {entry_id} start", flush=True)
    ticks = _ticks(manager.get_entries())
    if len(ticks) not in (0, count):
        print(f"partial {len(ticks)}", flush=True)
        sys.exit(3)
    if not ticks:
        print("ready", flush=True)
        with manager.batch():
            for i in range(count):
                manager.append_custom_entry("crash.tick", {"i": i})
        print("committed", flush=True)
    print("done", flush=True)


WRITERS: dict[str, Callable[[str, int], None]] = {"append": writer_append, "batch": writer_batch}


def _markers(entries: list, prefix: str) -> list[int]:
    return [int(e["message"]["content"][len(prefix):]) for e in entries
            if e.get("type") == "message" and str(e["message"].get("content", "")).startswith(prefix)]


def _ticks(entries: list) -> list[int]:
    return [e["data"]["i"] for e in entries if e.get("type") == "custom" and e.get("customType") == "crash.tick"]


# ---------------------------------------------------------------------------- processes
def become_subreaper() -> bool:
    """Make orphaned descendants this process's children (Linux ``PR_SET_CHILD_SUBREAPER``)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _ppids() -> dict[int, int]:
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            found[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def descendants(pid: int) -> set[int]:
    ppids = _ppids()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in ppids.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our (adopted) child and has exited
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


@dataclass(slots=True)
class Running:
    """A command whose stdout lines are collected as they come."""

    process: subprocess.Popen
    started: float
    lines: list[str] = field(default_factory=list)
    stderr: bytes = b""
    arrived: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def start(cls, argv: list[str], env: dict | None = None) -> Running:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)
        running = cls(process, time.monotonic())
        threading.Thread(target=running._read_stdout, daemon=True).start()
        threading.Thread(target=running._read_stderr, daemon=True).start()
        return running

    def _read_stdout(self) -> None:
        for raw in self.process.stdout:
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
            self.arrived.set()

    def _read_stderr(self) -> None:
        self.stderr = self.process.stderr.read()

    def wait_for(self, prefix: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.startswith(prefix) for line in self.lines):
                return True
            if self.process.poll() is not None and not self.arrived.wait(0.05):
                return any(line.startswith(prefix) for line in self.lines)
            self.arrived.wait(0.02)
            self.arrived.clear()
        return False

    def finish(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise Failed(f"{' '.join(map(str, self.process.args))[:200]}: no exit within {timeout:.0f} s") from None
        time.sleep(0.05)  # let the readers take the last lines
        return code


def run_to_end(argv: list[str], what: str, ok_codes: tuple[int, ...] = (0,)) -> Running:
    running = Running.start(argv)
    code = running.finish(COMMAND_TIMEOUT)
    stderr = running.stderr.decode("utf-8", "replace")
    if "Traceback" in stderr or code not in ok_codes:
        raise Failed(f"{what}: exit {code}; stderr: {stderr[-2500:]}")
    return running


# ---------------------------------------------------------------------------- shared checks
def verify_clean(url: str, cli: bool = True) -> None:
    """``pi-store verify --all --json`` (or, ``cli=False``, the function it runs, in this process,
    a CLI start cheaper): every session ok (or reported only as diverged)."""
    if not cli:
        from store.interchange.verifying import verify_all
        from store.session_store import SessionStore

        with SessionStore.connect(url) as store:
            bad = [f"{h.session_id}: {h.describe()} {h.details[:4]}" for h in verify_all(store) if not h.ok]
        if bad:
            raise Failed("verify --all: " + "; ".join(bad))
        return
    running = Running.start([*_cli(), "--db", url, "verify", "--all", "--json"])
    code = running.finish(COMMAND_TIMEOUT)
    stderr = running.stderr.decode("utf-8", "replace")
    if "Traceback" in stderr:
        raise Failed(f"verify --all printed a traceback: {stderr[-2500:]}")
    bad = []
    for line in running.lines:  # the database's health, one line per session, then a summary
        health = json.loads(line)
        if "database" in health and not health["database"]["ok"]:
            bad.append(f"database: {health['database']['problems'][:4]}")
        elif "sessionId" in health and not health["ok"]:  # ok: identical, diverged or api
            bad.append(f"{health['sessionId']} ({health['verdict']}): {health['details'][:4]}")
    if bad or code not in (0, 1) or (code == 1 and not running.lines):
        raise Failed(f"verify --all (exit {code}): " + "; ".join(bad) + stderr[-500:])


def stored_exports(url: str) -> dict[str, bytes]:
    from store.session_store import SessionStore

    with SessionStore.connect(url) as store:
        return {info.id: b"".join(store.iter_export(info.id)) for info in _all_sessions(store)}


def _all_sessions(store: Any) -> list:
    from sqlalchemy import select

    from store.db.schema import sessions

    with store.engine.connect() as conn:
        ids = conn.execute(select(sessions.c.session_id).order_by(sessions.c.pk)).scalars().all()
    return [store.find_by_id(session_id) for session_id in ids]


def session_entries(url: str, session_id: str = SESSION) -> list | None:
    from store.errors import SessionNotFound
    from store.session_store import SessionStore

    with SessionStore.connect(url) as store:
        try:
            return store.open(session_id).get_entries()
        except SessionNotFound:
            return None


def check_chain(entries: list) -> None:
    """Every entry's parent is the entry before it (one unbroken line), and ids are unique."""
    ids = [e["id"] for e in entries]
    repeated = [i for i, n in Counter(ids).items() if n > 1]
    if repeated:
        raise Failed(f"ids stored more than once: {repeated[:5]}")
    for before, entry in zip([None, *ids], entries, strict=False):
        if entry.get("parentId") != before:
            raise Failed(f"chain broken at {entry['id']}: parent {entry.get('parentId')}, expected {before}")


# ---------------------------------------------------------------------------- scenarios
@dataclass(slots=True)
class Context:
    """One run: its store, its scratch folder, what ``prepare`` made, the run's random numbers."""

    url: str
    folder: Path
    shared: Path  # files made once per campaign (the big file)
    rng: random.Random
    state: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Scenario:
    """A command to kill, and what must hold after the kill and after re-running it.

    ``command(ctx)``: the argv; ``marker``: the stdout line prefix after which the kill clock
    starts (else the start); ``window``: fixed kill times in seconds (else drawn from the
    calibration run's duration, or from ``expected`` when there is none); ``during(ctx, stop)``:
    runs beside the command until ``stop`` is set (``sync``: Pi appending); ``after_kill(ctx,
    lines)`` / ``after_rerun(ctx, lines)``: the checks, given the command's stdout lines.
    """

    name: str
    command: Callable[[Context], list[str]]
    after_kill: Callable[[Context, list[str]], None]
    after_rerun: Callable[[Context, list[str]], None]
    prepare: Callable[[Context], None] = lambda ctx: None
    rerun: Callable[[Context], list[str]] | None = None  # default: ``command``
    marker: str | None = None
    window: tuple[float, float] | None = None
    expected: float = 2.0  # seconds of work after the start (or marker), when not calibrated
    during: Callable[[Context, threading.Event], None] | None = None
    term_statuses: tuple[int, ...] = TERM_STATUSES  # its exit statuses when stopped by SIGTERM


def _writer(kind: str, count: int) -> Callable[[Context], list[str]]:
    return lambda ctx: [sys.executable, str(Path(__file__).resolve()), "writer", kind, "--db", ctx.url,
                        "--count", str(count)]


def _acks(lines: list[str]) -> list[tuple[str, str]]:
    return [tuple(line.split()[1:3]) for line in lines if line.startswith("ack ")]


# append ---------------------------------------------------------------
APPENDS = 4000


def append_after_kill(ctx: Context, lines: list[str]) -> None:
    acked = _acks(lines)
    entries = session_entries(ctx.url) or []
    check_chain(entries)
    markers = _markers(entries, "append ")
    if markers != list(range(len(markers))):
        raise Failed(f"stored markers are not 0..{len(markers) - 1} in order: {markers[:10]}...")
    stored = {e["id"] for e in entries}
    lost = [entry_id for entry_id, _ in acked if entry_id not in stored]
    if lost:
        raise Failed(f"{len(lost)} acknowledged appends lost, first {lost[:3]}")
    if len(entries) - len(acked) not in (0, 1):
        raise Failed(f"{len(entries)} stored, {len(acked)} acknowledged: more than one unacknowledged commit")


def append_after_rerun(ctx: Context, lines: list[str]) -> None:
    entries = session_entries(ctx.url) or []
    check_chain(entries)
    if _markers(entries, "append ") != list(range(APPENDS)):
        raise Failed(f"after the re-run: {len(entries)} entries, not appends 0..{APPENDS - 1} once each")


# batch ----------------------------------------------------------------
def batch_after_kill(ctx: Context, lines: list[str]) -> None:
    entries = session_entries(ctx.url)
    ticks = _ticks(entries or [])
    if len(ticks) not in (0, BATCH):
        raise Failed(f"batch() half-stored: {len(ticks)} of {BATCH} entries")
    if "committed" in lines and len(ticks) != BATCH:
        raise Failed(f"batch() acknowledged but {len(ticks)} of {BATCH} stored")
    if any(line.startswith("ack ") for line in lines) and entries is None:
        raise Failed("the acknowledged first message is not stored")
    if entries:
        check_chain(entries)


def batch_after_rerun(ctx: Context, lines: list[str]) -> None:
    entries = session_entries(ctx.url) or []
    check_chain(entries)
    if sorted(_ticks(entries)) != list(range(BATCH)) or len(entries) != BATCH + 1:
        raise Failed(f"after the re-run: {len(entries)} entries, {len(_ticks(entries))} ticks")


# import ---------------------------------------------------------------
def big_session(path: Path, size: int = BIG_BYTES) -> Path:
    """A linear v3 session of ``size``+ bytes (made once, reused)."""
    if path.exists() and path.stat().st_size >= size:
        return path
    rng = random.Random(0)
    words = ["parse", "session", "tree", "entry", "store", "import", "line", "byte", "leaf", "branch", "会话", "💡"]
    partial = path.with_suffix(".partial")
    with partial.open("wb") as out:
        out.write(json.dumps({"type": "session", "version": 3, "id": "0190b1b1-0000-7000-8000-0000000b1600",
                              "timestamp": "2026-01-01T00:00:00.000Z", "cwd": CWD}).encode() + b"\n")
        parent, written, i = None, 0, 0
        while written < size:
            entry_id = f"{i:08x}"
            role = "user" if i % 2 == 0 else "assistant"
            text = " ".join(rng.choices(words, k=150))
            message = {"role": role, "content": text if role == "user" else [{"type": "text", "text": text}]}
            line = json.dumps({"type": "message", "id": entry_id, "parentId": parent,
                               "timestamp": f"2026-01-01T00:{i // 60000 % 60:02d}:{i // 1000 % 60:02d}.000Z",
                               "message": message}, ensure_ascii=False).encode() + b"\n"
            out.write(line)
            written += len(line)
            parent, i = entry_id, i + 1
    partial.rename(path)
    return path


def import_prepare(ctx: Context) -> None:
    folder = ctx.folder / "sessions"
    layout = folder / f"--{CWD.strip('/').replace('/', '-')}--"
    layout.mkdir(parents=True)
    names = ["medium-seed1-0.jsonl", "small-seed1-0.jsonl", "legacy-v1.jsonl", "legacy-v2-hookmessage.jsonl",
             "medium-seed2-0.jsonl", "edge-crlf.jsonl"]
    for k, name in enumerate(names):  # the big file is the third of seven, by name
        (layout / f"{k if k < 2 else k + 1}_{name}").write_bytes((FIXTURES / name).read_bytes())
    os.link(ctx.shared / "big.jsonl", layout / "2_big.jsonl")
    ctx.state["folder"] = folder
    ctx.state["files"] = {str(p): p.read_bytes() for p in sorted(layout.iterdir())}


def import_command(ctx: Context) -> list[str]:
    return [*_cli(), "--db", ctx.url, "import", str(ctx.state["folder"]), "--json", "--progress", "none"]


def import_after_kill(ctx: Context, lines: list[str]) -> None:
    exports = stored_exports(ctx.url)
    files = ctx.state["files"]
    contents = set(files.values())
    partial = [sid for sid, data in exports.items() if data not in contents]
    if partial:
        raise Failed(f"sessions stored that are no whole file: {partial}")
    for line in lines:
        report = json.loads(line)
        stored = report.get("status") in ("imported", "appended", "rebuilt", "replaced", "unchanged")
        if stored and exports.get(report["sessionId"]) != files[report["path"]]:
            raise Failed(f"{report['path']} reported {report['status']} but its session does not export it")


def import_after_rerun(ctx: Context, lines: list[str]) -> None:
    exports = stored_exports(ctx.url)
    counts = Counter(exports.values())
    files = ctx.state["files"]
    missing = [path for path, data in files.items() if counts.get(data) != 1]
    if missing or len(exports) != len(files):
        raise Failed(f"after the re-run: {len(exports)} sessions for {len(files)} files; not stored once: {missing}")


# sync --watch ---------------------------------------------------------
def sync_prepare(ctx: Context) -> None:
    layout = ctx.folder / "sessions" / "--crash-sync--"
    layout.mkdir(parents=True)
    files = []
    for k in range(3):
        path = layout / f"2026-01-01T00-00-0{k}-000Z_0190c0c0-0000-7000-8000-00000000000{k}.jsonl"
        head = {"type": "session", "version": 3, "id": f"0190c0c0-0000-7000-8000-00000000000{k}",
                "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/crash/sync"}
        first = {"type": "message", "id": f"{k}0000000", "parentId": None, "timestamp": "2026-01-01T00:00:01.000Z",
                 "message": {"role": "user", "content": f"session {k}"}}
        path.write_bytes(json.dumps(head).encode() + b"\n" + json.dumps(first).encode() + b"\n")
        files.append(path)
    ctx.state["folder"], ctx.state["files"] = ctx.folder / "sessions", files


def sync_command(ctx: Context) -> list[str]:
    return [*_cli(), "--db", ctx.url, "sync", str(ctx.state["folder"]), "--watch", "--interval", "0.1", "--json",
            "--progress", "none"]


def sync_rerun(ctx: Context) -> list[str]:
    return [*_cli(), "--db", ctx.url, "sync", str(ctx.state["folder"]), "--json", "--progress", "none"]


def sync_appender(ctx: Context, stop: threading.Event) -> None:
    """Pi appending to the session files: whole lines, now and then one written in two parts."""
    rng = random.Random(ctx.rng.random())
    parents = {path: f"{k}0000000" for k, path in enumerate(ctx.state["files"])}
    i = 0
    while not stop.is_set():
        path = rng.choice(ctx.state["files"])
        entry_id = f"{ctx.state['files'].index(path)}{i + 1:07d}"
        role = rng.choice(["user", "assistant"])
        message = {"role": role, "content": f"line {i} " + "x" * rng.randint(10, 3000)}
        line = json.dumps({"type": "message", "id": entry_id, "parentId": parents[path],
                           "timestamp": "2026-01-01T00:00:02.000Z", "message": message}).encode() + b"\n"
        parents[path], i = entry_id, i + 1
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            if rng.random() < 0.1:
                cut = rng.randrange(1, len(line))
                os.write(fd, line[:cut])
                time.sleep(rng.uniform(0.01, 0.2))
                os.write(fd, line[cut:])
            else:
                os.write(fd, line)
        finally:
            os.close(fd)
        time.sleep(rng.uniform(0.002, 0.03))


def sync_after_kill(ctx: Context, lines: list[str]) -> None:
    exports = stored_exports(ctx.url)
    files = {json.loads(path.read_bytes().split(b"\n", 1)[0])["id"]: path.read_bytes() for path in ctx.state["files"]}
    for session_id, data in exports.items():
        if session_id not in files or not files[session_id].startswith(data):
            raise Failed(f"session {session_id} stored {len(data)} bytes that are not a beginning of its file")
    for line in lines:
        report = json.loads(line)
        if report.get("status") in ("imported", "appended", "rebuilt"):
            stored = exports.get(report["sessionId"], b"")
            data = files[report["sessionId"]][:report["size"]]
            if len(stored) < report["size"] or hashlib.sha256(data).hexdigest() != report["sha256"]:
                raise Failed(f"{report['sessionId']}: reported {report['size']} bytes stored, {len(stored)} are")


def sync_after_rerun(ctx: Context, lines: list[str]) -> None:
    exports = stored_exports(ctx.url)
    for path in ctx.state["files"]:
        data = path.read_bytes()
        session_id = json.loads(data.split(b"\n", 1)[0])["id"]
        if exports.get(session_id) != data:
            raise Failed(f"after the re-run: {session_id} exports {len(exports.get(session_id, b''))} bytes, "
                         f"its file has {len(data)}")
    if len(exports) != len(ctx.state["files"]):
        raise Failed(f"after the re-run: {len(exports)} sessions for {len(ctx.state['files'])} files")


# compact --------------------------------------------------------------
LONG_MESSAGES = 3000


def compact_prepare(ctx: Context) -> None:
    from store.session_store import SessionStore

    rng = random.Random(ctx.rng.random())
    with SessionStore.connect(ctx.url) as store:
        manager = store.create(CWD, session_id=SESSION)
        with manager.batch():
            for i in range(LONG_MESSAGES):
                text = f"message {i} " + " ".join(rng.choices(["alpha", "beta", "gamma", "delta", "tree"], k=80))
                if i % 2:
                    manager.append_message({"role": "assistant", "content": [{"type": "text", "text": text}]})
                else:
                    manager.append_message({"role": "user", "content": text})
        ctx.state["ids"] = [e["id"] for e in manager.get_entries()]


def compact_command(ctx: Context) -> list[str]:
    return [*_cli(), "--db", ctx.url, "compact", SESSION, "--summarizer", "deterministic", "--json"]


def _compactions(ctx: Context) -> list[str]:
    entries = session_entries(ctx.url) or []
    ids = [e["id"] for e in entries]
    if ids[:len(ctx.state["ids"])] != ctx.state["ids"]:
        raise Failed("the session's entries before the compaction changed")
    if len(set(ids)) != len(ids):
        raise Failed("an id is stored twice")
    return [e["id"] for e in entries if e.get("type") == "compaction"]


def compact_after_kill(ctx: Context, lines: list[str]) -> None:
    found = _compactions(ctx)
    reported = [json.loads(line)["compactionId"] for line in lines if '"compacted":true' in line]
    if len(found) > 1 or (reported and found != reported):
        raise Failed(f"compactions stored {found}, reported {reported}")
    ctx.state["before_rerun"] = len(found)


def compact_after_rerun(ctx: Context, lines: list[str]) -> None:
    found = _compactions(ctx)
    compacted = any('"compacted":true' in line for line in lines)
    if len(found) != ctx.state.get("before_rerun", 0) + compacted or not found:
        raise Failed(f"after the re-run: {len(found)} compactions (re-run compacted: {compacted})")


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("append", _writer("append", APPENDS), append_after_kill, append_after_rerun, marker="ready",
             expected=1.0),
    Scenario("batch", _writer("batch", BATCH), batch_after_kill, batch_after_rerun, marker="ready", expected=1.0),
    Scenario("import", import_command, import_after_kill, import_after_rerun, prepare=import_prepare,
             expected=5.0),
    Scenario("sync", sync_command, sync_after_kill, sync_after_rerun, prepare=sync_prepare, rerun=sync_rerun,
             marker='{"path"', window=(0.0, 3.0), during=sync_appender, term_statuses=(0,)),
    Scenario("compact", compact_command, compact_after_kill, compact_after_rerun, prepare=compact_prepare),
]}


# ---------------------------------------------------------------------------- the campaign
@dataclass(slots=True)
class RunResult:
    scenario: str
    engine: str
    run: int
    kill_at: float | None  # None: the calibration run (not killed)
    landed: bool = False  # the command was still running when killed
    acks: int = 0
    seconds: float = 0.0
    error: str | None = None


def survivors(pids: set[int], own_children: set[int]) -> list[str]:
    """Processes of a killed command's tree still alive after ``GRACE`` seconds (then killed).
    ``pids``: its descendants seen just before the kill; adopted orphans are looked for too."""
    me = os.getpid()
    deadline = time.monotonic() + GRACE
    while True:
        adopted = {pid for pid, parent in _ppids().items() if parent == me} - own_children
        alive = sorted(pid for pid in pids | adopted if _alive(pid))
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    found = [f"pid {pid} ({_cmdline(pid)})" for pid in alive]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in alive:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return found


def _stop(running: Running, stop_signal: signal.Signals, landed: bool, statuses: tuple[int, ...]) -> None:
    """Send ``stop_signal``; a SIGTERMed command must end by itself within ``GRACE`` seconds, with
    one of ``statuses`` if it was still running (``landed``)."""
    if stop_signal == signal.SIGKILL:
        running.process.kill()
        running.process.wait()
        return
    running.process.send_signal(stop_signal)
    try:
        code = running.process.wait(GRACE)
    except subprocess.TimeoutExpired:
        raise Failed(f"still running {GRACE:.0f} s after {stop_signal.name}; stderr: "
                     f"{running.stderr[-1500:]!r}") from None
    if landed and code not in statuses:
        raise Failed(f"exit status {code} after {stop_signal.name} (expected one of {statuses})")


def one_run(scenario: Scenario, ctx: Context, result: RunResult,
            stop_signal: signal.Signals = signal.SIGKILL) -> None:
    """Run, stop with ``stop_signal`` (unless calibrating: ``result.kill_at`` is None) and check,
    filling ``result``."""
    kill_at = result.kill_at
    scenario.prepare(ctx)
    stop = threading.Event()
    helper = None
    if scenario.during is not None:
        helper = threading.Thread(target=scenario.during, args=(ctx, stop), daemon=True)
        helper.start()
    me = os.getpid()
    # children this process had already (a test runner's own servers): not the command's orphans
    earlier = {pid for pid, parent in _ppids().items() if parent == me}
    running = Running.start(scenario.command(ctx))
    try:
        if scenario.marker is not None and not running.wait_for(scenario.marker, COMMAND_TIMEOUT):
            raise Failed(f"no {scenario.marker!r} line; stderr: {running.stderr[-1500:]!r}")
        clock = time.monotonic()
        if kill_at is None:
            code = running.finish(COMMAND_TIMEOUT)
            if code != 0:
                raise Failed(f"the calibration run exited {code}: {running.stderr[-2000:]!r}")
            result.seconds = time.monotonic() - clock
        else:
            time.sleep(max(0.0, kill_at - (time.monotonic() - clock)))
            tree = descendants(running.process.pid)
            result.landed = running.process.poll() is None
            _stop(running, stop_signal, result.landed, scenario.term_statuses)
            time.sleep(0.05)
            left = survivors(tree, earlier)
            if left:
                raise Failed(f"processes outlived the killed command by {GRACE:.0f} s: {left}")
    finally:
        stop.set()
        if helper is not None:
            helper.join()
        if running.process.poll() is None:
            running.process.kill()
            running.process.wait()
    stderr = running.stderr.decode("utf-8", "replace")
    if "Traceback" in stderr:
        raise Failed(f"the command printed a traceback: {stderr[-2500:]}")
    lines = list(running.lines)
    result.acks = sum(line.startswith(("ack ", '{"path"', '{"sessionId"', "committed")) for line in lines)
    verify_clean(ctx.url, cli=False)
    if kill_at is None:  # the calibration ran to its end: its result is final
        scenario.after_rerun(ctx, lines)
        return
    scenario.after_kill(ctx, lines)
    again = run_to_end((scenario.rerun or scenario.command)(ctx), f"re-running {scenario.name}")
    verify_clean(ctx.url)
    scenario.after_rerun(ctx, again.lines)


def run_matrix(*, runs: int, seed: int, engines: list[str], scenarios: list[str], calibrate: bool = True,
               stop_signal: signal.Signals = signal.SIGKILL, log: Callable[[str], None] = print) -> list[RunResult]:
    """``runs`` kills of each scenario on each engine, after a calibration run unless
    ``calibrate`` is false (then kill times come from each scenario's ``expected``); ``stop_signal``:
    SIGKILL, or SIGTERM (see the module's text; its kill times are drawn apart from SIGKILL's)."""
    salt = "" if stop_signal == signal.SIGKILL else f":{stop_signal.name}"
    become_subreaper()
    results: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="pi-crash-") as scratch:
        shared = Path(scratch) / "shared"
        shared.mkdir()
        if "import" in scenarios:
            big_session(shared / "big.jsonl")
        for engine in engines:
            for name in scenarios:
                scenario = SCENARIOS[name]
                duration = scenario.expected
                # a command that never ends has fixed kill times, no calibration
                first = int(not calibrate or scenario.window is not None)
                for run in range(first, runs + 1):
                    rng = random.Random(f"{seed}:{name}:{engine}:{run}{salt}")
                    if run == 0:
                        kill_at = None
                    elif scenario.window is not None:
                        kill_at = rng.uniform(*scenario.window)
                    else:
                        kill_at = rng.uniform(0.0, max(duration, 0.2))
                    folder = Path(scratch) / f"{engine}-{name}-{run}"
                    folder.mkdir()
                    started = time.monotonic()
                    with store_url(engine, folder, f"{name}{run}") as url:
                        ctx = Context(url, folder, shared, rng)
                        result = RunResult(name, engine, run, kill_at)
                        try:
                            one_run(scenario, ctx, result, stop_signal)
                        except Failed as exc:
                            result.error = str(exc)
                        except Exception as exc:  # a check crashed: a failure too, with its cause
                            result.error = f"{type(exc).__name__}: {exc}"
                    if kill_at is None and result.seconds:
                        duration = result.seconds
                    result.seconds = time.monotonic() - started
                    results.append(result)
                    what = "calibration" if kill_at is None else f"kill at {kill_at:.2f} s"
                    status = f"FAILURE: {result.error}" if result.error else (
                        f"ok ({'landed' if result.landed or kill_at is None else 'after the end'}, "
                        f"{result.acks} acknowledged)")
                    log(f"{engine} {name} run {run} ({what}, {result.seconds:.1f} s): {status}")
                    shutil.rmtree(folder, ignore_errors=True)
    return results


def summary(results: list[RunResult]) -> str:
    kills = [r for r in results if r.kill_at is not None]
    failures = [r for r in results if r.error]
    landed = sum(r.landed for r in kills)
    return (f"crash-matrix: {len(kills)} kills ({landed} landed mid-run), {len(failures)} failures "
            f"of {len(results)} runs")


def _details(results: list[RunResult]) -> Iterator[str]:
    for engine in sorted({r.engine for r in results}):
        for name in SCENARIOS:
            mine = [r for r in results if r.engine == engine and r.scenario == name]
            if mine:
                yield (f"  {engine} {name}: {len(mine)} runs, {sum(r.landed for r in mine)} kills landed, "
                       f"{sum(bool(r.error) for r in mine)} failures, {sum(r.seconds for r in mine):.1f} s")


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["writer"]:
        parser = argparse.ArgumentParser(prog="crash_matrix.py writer")
        parser.add_argument("kind", choices=sorted(WRITERS))
        parser.add_argument("--db", required=True)
        parser.add_argument("--count", type=int, required=True)
        args = parser.parse_args(argv[1:])
        WRITERS[args.kind](args.db, args.count)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="Kills per scenario and engine (after a calibration).")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--engine", choices=["sqlite", "postgresql", "both"], default="sqlite")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="Only these scenarios (repeatable; default: all).")
    parser.add_argument("--signal", choices=["KILL", "TERM"], default="KILL",
                        help="Stop the commands with SIGKILL (default) or SIGTERM.")
    parser.add_argument("--no-calibration", action="store_true",
                        help="Draw kill times from each scenario's expected duration instead of a first, unkilled run.")
    args = parser.parse_args(argv)
    engines = ["sqlite", "postgresql"] if args.engine == "both" else [args.engine]
    started = time.perf_counter()
    results = run_matrix(runs=args.runs, seed=args.seed, engines=engines, scenarios=args.scenario or list(SCENARIOS),
                         calibrate=not args.no_calibration, stop_signal=signal.Signals[f"SIG{args.signal}"])
    for line in _details(results):
        print(line)
    print(f"  seed {args.seed}, SIG{args.signal}, {time.perf_counter() - started:.1f} s wall")
    print(summary(results))
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
