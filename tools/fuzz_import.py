#!/usr/bin/env python3
"""Fuzzing import: seeded mutations of real session files, each imported into a store that already
holds other sessions, and the promise "nothing lost, nothing broken" checked after each one.

    python tools/fuzz_import.py --count 2000 --seed 1 [--engine sqlite|postgresql|both] [--cli-every 20]
    python tools/fuzz_import.py --seed 1 --case 137 --write /tmp/case137.jsonl   # reproduce one case

Sources: the oracle fixtures (``tests/fixtures/oracle/sessions``) and the corpus
(``../shared/corpus``, read in place). Case ``i`` draws its source and one to three mutations from
``Random(f"{seed}:{i}")`` alone, so any case can be reproduced by its number: bytes flipped, lines
cut / duplicated / reordered, truncation mid-line, invalid UTF-8, NUL bytes, CR/CRLF mixes, deep
nesting (1,100 and 50,000 levels), huge lines (2–6 MB), duplicate ids, missing parents, parent
cycles, lone-surrogate ids, header mutations (missing, duplicated, moved, non-string id, odd
versions), numbers at the edges of JS doubles.

Every ``--cycle`` cases get a fresh store (SQLite file / PostgreSQL scratch database) holding three
"other" sessions; about a third of the mutations start from one of them (so conflicts, appends and
rebuilds of stored sessions are exercised). Each case runs in a worker process the harness kills
after ``--timeout`` seconds (a hang is a failure); one in ``--cli-every`` goes through the real
``pi-store import`` subprocess instead of ``SessionStore.import_path``. Checks, per case:

* no traceback: the API returns a report whose failures come from ``StoreError`` subclasses (an
  internal exception reported as ``failed`` counts as a failure); the CLI exits 0/1 without
  "Traceback" on stderr;
* an accepted file (imported / appended / rebuilt / replaced) exports byte-identical and verifies
  (bytes and tree); ``unchanged`` leaves every session's export as it was;
* a refused file (conflict / refused / failed) leaves the store unchanged: row counts of
  sessions, entries and imports, and the sha256 of every session's export;
* every other session's export is unchanged either way.

A headerless file that gets stored is counted apart ("headerless stored"): each case names its
file, and import stores a file named itself even when it is not a Pi session (an explicit
choice; only files found in folders are refused as ``not-session``). Ends with
``fuzz-import: A accepted, R refused, F failures of N``; exit status 1 on any failure. Failing
inputs are kept in ``--failures`` with a JSON note each.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from tests.oracle_support import SHARED  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "oracle" / "sessions"
CORPUS = Path(os.environ.get("PI_STORE_CORPUS") or SHARED / "corpus")
PG_ADMIN_URL = os.environ.get("PI_STORE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
ACCEPTED = ("imported", "appended", "rebuilt", "replaced")
REFUSED = ("conflict", "refused", "failed")
BIG_SOURCE = 1 << 20  # sources above this are drawn rarely (they cost the most per case)


# ---------------------------------------------------------------------------- sources
@dataclass(frozen=True, slots=True)
class Source:
    name: str
    data: bytes


def load_sources(corpus: Path | None = CORPUS) -> list[Source]:
    """Every fixture and corpus session file, sorted by name (the order seeds depend on)."""
    paths = sorted(FIXTURES.glob("*.jsonl"))
    if corpus is not None and corpus.is_dir():
        paths += sorted(corpus.rglob("*.jsonl"))
    return [Source(str(p.relative_to(p.parents[1])), p.read_bytes()) for p in paths]


def pick_source(sources: list[Source], rng: random.Random) -> Source:
    small = [s for s in sources if len(s.data) <= BIG_SOURCE]
    return rng.choice(sources if rng.random() < 0.05 or not small else small)


# ---------------------------------------------------------------------------- mutations
def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _join(lines: list[bytes]) -> bytes:
    return b"\n".join(lines)


def _body_indices(lines: list[bytes]) -> list[int]:
    """Lines with content (the last, empty piece after a final newline excluded)."""
    return [i for i, line in enumerate(lines) if line.strip()]


def _objects(lines: list[bytes]) -> list[tuple[int, dict]]:
    """(index, value) of the lines that parse as JSON objects."""
    found = []
    for i in _body_indices(lines):
        try:
            value = orjson.loads(lines[i])
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            found.append((i, value))
    return found


def _entries(lines: list[bytes]) -> list[tuple[int, dict]]:
    return [(i, v) for i, v in _objects(lines) if v.get("type") != "session" and isinstance(v.get("id"), str)]


def _header(lines: list[bytes]) -> tuple[int, dict] | None:
    return next(((i, v) for i, v in _objects(lines) if v.get("type") == "session"), None)


def _dump(value: Any) -> bytes:
    return orjson.dumps(value)


def flip_bytes(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8) if buf else 0):
        buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    return bytes(buf)


def cut_lines(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    for _ in range(rng.randint(1, 3)):
        body = _body_indices(lines)
        if body:
            del lines[rng.choice(body)]
    return _join(lines)


def duplicate_lines(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    body = _body_indices(lines)
    if not body:
        return data
    line = lines[rng.choice(body)]
    where = rng.choice(["after", "end", "anywhere"])
    if where == "end":  # a file that extends the original: an append of an old line
        lines.insert(len(lines) - 1 if lines[-1] == b"" else len(lines), line)
    else:
        lines.insert(rng.randrange(len(lines) + 1) if where == "anywhere" else body[-1] + 1, line)
    return _join(lines)


def reorder_lines(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    body = _body_indices(lines)
    if len(body) < 2:
        return data
    if rng.random() < 0.5:
        a, b = rng.sample(body, 2)
        lines[a], lines[b] = lines[b], lines[a]
    else:
        start = rng.randrange(len(body) - 1)
        window = body[start:start + rng.randint(2, 6)]
        picked = [lines[i] for i in window]
        rng.shuffle(picked)
        for i, line in zip(window, picked, strict=True):
            lines[i] = line
    return _join(lines)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(len(data))] if data else data


_BAD_UTF8 = [b"\xff", b"\xfe\xff", b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80",
             b"\xe2\x82", b"\xf0\x9f\x98", b"\xc3"]


def invalid_utf8(data: bytes, rng: random.Random) -> bytes:
    quotes = [m.end() for m in re.finditer(rb'"', data[:1 << 20])]
    for _ in range(rng.randint(1, 3)):
        pos = rng.choice(quotes) if quotes and rng.random() < 0.7 else rng.randrange(len(data) + 1)
        data = data[:pos] + rng.choice(_BAD_UTF8) + data[pos:]
    return data


def nul_bytes(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    choice = rng.random()
    items = _objects(lines)
    if choice < 0.5 and items:  # an escaped NUL inside a string value: valid JSON
        i, value = rng.choice(items)
        key = rng.choice([k for k, v in value.items() if isinstance(v, str)] or ["x"])
        value[key] = f"{value.get(key, '')}\u0000tail" if rng.random() < 0.5 else "\u0000"
        lines[i] = _dump(value)
        return _join(lines)
    for _ in range(rng.randint(1, 4)):  # raw NUL bytes anywhere
        pos = rng.randrange(len(data) + 1)
        data = data[:pos] + b"\x00" + data[pos:]
    return data


def crlf_mix(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    out = bytearray()
    for i, line in enumerate(lines):
        out += line
        if i < len(lines) - 1:
            roll = rng.random()
            out += b"\r\n" if roll < 0.4 else (b"\r" if roll < 0.5 else b"\n")
    return bytes(out)


def _nested(depth: int, rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        return b"[" * depth + b"1" + b"]" * depth
    return b'{"a":' * depth + b"null" + b"}" * depth


def _new_entry(lines: list[bytes], rng: random.Random) -> dict:
    items = _entries(lines)
    parent = items[-1][1]["id"] if items else None
    return {"type": "custom", "customType": "fuzz", "id": f"{rng.getrandbits(32):08x}", "parentId": parent,
            "timestamp": "2026-01-01T00:00:00.000Z"}


def _insert_line(lines: list[bytes], line: bytes, rng: random.Random) -> None:
    end = len(lines) - 1 if lines and lines[-1] == b"" else len(lines)
    lines.insert(end if rng.random() < 0.6 else rng.randint(min(1, end), end), line)


def deep_nesting(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    depth = rng.choice([1100, 50_000])
    nested = _nested(depth, rng)
    if rng.random() < 0.7:
        entry = _dump(_new_entry(lines, rng))
        line = entry[:-1] + b',"data":' + nested + b"}"
    else:
        line = nested
    _insert_line(lines, line, rng)
    return _join(lines)


def huge_line(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    entry = _new_entry(lines, rng)
    entry.update(type="message", message={"role": "user", "content": "x" * rng.randint(2 << 20, 6 << 20)})
    entry.pop("customType")
    _insert_line(lines, _dump(entry), rng)
    return _join(lines)


def duplicate_ids(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    items = _entries(lines)
    if len(items) < 2:
        return data
    (_, a), (j, b) = rng.sample(items, 2)
    b["id"] = a["id"]
    lines[j] = _dump(b)
    return _join(lines)


def missing_parent(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    items = _entries(lines)
    if not items:
        return data
    i, value = rng.choice(items)
    value["parentId"] = rng.choice([f"{rng.getrandbits(32):08x}", "", 7, None, ["x"]])
    lines[i] = _dump(value)
    return _join(lines)


def parent_cycle(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    items = _entries(lines)
    if not items:
        return data
    if len(items) < 2 or rng.random() < 0.3:
        i, value = rng.choice(items)
        value["parentId"] = value["id"]
        lines[i] = _dump(value)
        return _join(lines)
    chosen = sorted(rng.sample(range(len(items)), min(len(items), rng.randint(2, 4))))
    ring = [items[k] for k in chosen]
    for (i, value), (_, nxt) in zip(ring, ring[1:] + ring[:1], strict=True):
        value["parentId"] = nxt["id"]
        lines[i] = _dump(value)
    return _join(lines)


def surrogate_ids(data: bytes, rng: random.Random) -> bytes:
    """An id (of the header or an entry) holding a lone surrogate escape, as JS would write it."""
    lines = _lines(data)
    items = _entries(lines) + ([h] if (h := _header(lines)) else [])
    if not items:
        return data
    i, value = rng.choice(items)
    marker = f"@@{rng.getrandbits(32):08x}@@"
    old = value["id"] if isinstance(value.get("id"), str) else None
    value["id"] = marker
    escape = rng.choice([b"\\ud800", b"\\udfff", b"\\ud83d", b"x\\udc00y"])
    lines[i] = _dump(value).replace(marker.encode(), escape)
    if old is not None and rng.random() < 0.5:  # children keep naming it: now a missing parent
        for j, child in _entries(lines):
            if child.get("parentId") == old:
                lines[j] = _dump(child).replace(b'"parentId":"' + old.encode() + b'"',
                                                b'"parentId":"' + escape + b'"')
    return _join(lines)


_ODD_IDS: list[Any] = [42, None, {"x": 1}, [], "", True, 1e308, "a" * 5000, "../../etc/passwd", "id\nwith newline"]
_ODD_VERSIONS: list[Any] = ["3", 3.5, -1, 0, 1, 2, 4, 99, 1e308, None, True, "v3", [3]]


def header_mutation(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    found = _header(lines)
    if found is None:
        return data
    i, head = found
    kind = rng.choice(["drop", "duplicate", "move", "id", "version", "no-version", "type", "no-id"])
    if kind == "drop":
        del lines[i]
    elif kind == "duplicate":
        lines.insert(rng.randint(i, len(lines) - 1), lines[i])
    elif kind == "move":
        line = lines.pop(i)
        _insert_line(lines, line, rng)
    else:
        if kind == "id":
            head["id"] = rng.choice(_ODD_IDS)
        elif kind == "version":
            head["version"] = rng.choice(_ODD_VERSIONS)
        elif kind == "no-version":
            head.pop("version", None)
        elif kind == "no-id":
            head.pop("id", None)
        else:
            head["type"] = rng.choice(["Session", "sessions", "message", 3])
        lines[i] = _dump(head)
    return _join(lines)


_EDGE_NUMBERS = [b"1e309", b"-1e309", b"-0", b"9007199254740993", b"-9007199254740993", b"1e-400", b"5e-324",
                 b"1.7976931348623157e308", b"123456789012345678901234567890", b"-9223372036854775809",
                 b"0.1e-999999", b"1E400", b"-1e-7", b"0.30000000000000004", b"1e21", b"8.64e15", b"8640000000000001"]
_NUMBER = re.compile(rb"(?<![\w.\"])-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w.\"])")


def edge_numbers(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    body = _body_indices(lines)
    for _ in range(rng.randint(1, 3)):
        if not body:
            break
        i = rng.choice(body)
        matches = list(_NUMBER.finditer(lines[i]))
        if matches and rng.random() < 0.7:
            m = rng.choice(matches)
            lines[i] = lines[i][:m.start()] + rng.choice(_EDGE_NUMBERS) + lines[i][m.end():]
        else:  # a number where a timestamp, id or parent is expected
            try:
                value = orjson.loads(lines[i])
            except orjson.JSONDecodeError:
                continue
            if isinstance(value, dict):
                key = rng.choice(["timestamp", "id", "parentId"])
                marker = b'"@@NUM@@"'
                value[key] = "@@NUM@@"
                lines[i] = _dump(value).replace(marker, rng.choice(_EDGE_NUMBERS))
    return _join(lines)


def non_string_ids(data: bytes, rng: random.Random) -> bytes:
    """Some ids made numbers (``1``, ``1.0``, ``-3``, ``1e3``) or ``true``, and the parentIds that
    named them alike: no Pi writes them, but Pi's ``byId`` Map links them, and so must the store."""
    lines = _lines(data)
    items = _entries(lines)
    if not items:
        return data
    chosen = rng.sample(items, min(len(items), rng.randint(1, 8)))
    renamed: dict[str, Any] = {}
    for n, (_, value) in enumerate(chosen, start=1):
        renamed[value["id"]] = rng.choice([n, float(n), -n, n * 1000.0, True if not renamed else n])
    for i, value in _objects(lines):
        changed = False
        for key in ("id", "parentId"):
            if isinstance(value.get(key), str) and value[key] in renamed:
                value[key] = renamed[value[key]]
                changed = True
        if changed:
            lines[i] = _dump(value)
    return _join(lines)


def odd_file(data: bytes, rng: random.Random) -> bytes:
    return rng.choice([b"", b"\n", b"  \n\n", b"\xef\xbb\xbf" + data, data + b"\n\n\n", data.rstrip(b"\n"),
                       b"null\n", b'"just a string"\n', b"[]\n" + data, b"\x00" * 64])


Mutator = Callable[[bytes, random.Random], bytes]
MUTATORS: list[tuple[Mutator, float]] = [
    (flip_bytes, 3), (cut_lines, 2), (duplicate_lines, 2), (reorder_lines, 2), (truncate, 2), (invalid_utf8, 2),
    (nul_bytes, 2), (crlf_mix, 2), (deep_nesting, 1), (huge_line, 0.3), (duplicate_ids, 2), (missing_parent, 2),
    (parent_cycle, 2), (surrogate_ids, 1.5), (header_mutation, 3), (edge_numbers, 2), (odd_file, 0.5),
    (non_string_ids, 1.5),
]


@dataclass(frozen=True, slots=True)
class Case:
    index: int
    source: str
    mutations: tuple[str, ...]
    data: bytes
    via_cli: bool


def make_case(seed: int, index: int, sources: list[Source], others: list[Source], cli_every: int) -> Case:
    """Case ``index`` of campaign ``seed``: a function of the two numbers (and the sources) only."""
    rng = random.Random(f"{seed}:{index}")
    base = rng.choice(others) if others and rng.random() < 0.33 else pick_source(sources, rng)
    names, weights = zip(*MUTATORS, strict=True)
    data = base.data
    applied = []
    for mutator in rng.choices(names, weights, k=rng.choice([1, 1, 2, 3])):
        data = mutator(data, rng)
        applied.append(mutator.__name__)
    return Case(index, base.name, tuple(applied), data, cli_every > 0 and index % cli_every == cli_every - 1)


def cycle_others(seed: int, cycle: int, sources: list[Source]) -> list[Source]:
    """The three sessions stored before the cycle's cases (small files, distinct)."""
    rng = random.Random(f"{seed}:cycle:{cycle}")
    by_id: dict[str, Source] = {}
    for source in sources:  # one file per session id (the edge fixtures share one)
        head = _header(_lines(source.data)[:1])
        if head is not None and 200 < len(source.data) <= 200_000 and isinstance(head[1].get("id"), str):
            by_id.setdefault(head[1]["id"], source)
    return rng.sample(sorted(by_id.values(), key=lambda s: s.name), 3)


# ---------------------------------------------------------------------------- checking (worker side)
@dataclass(slots=True)
class Snapshot:
    counts: dict[str, int]
    exports: dict[str, tuple[str, int]]  # session id -> (sha256, bytes) of its export


def snapshot(store: Any) -> Snapshot:
    from sqlalchemy import func, select

    from store.db.schema import entries, imports, sessions

    with store.engine.connect() as conn:
        counts = {t.name: conn.execute(select(func.count()).select_from(t)).scalar() for t in (sessions, entries,
                                                                                                 imports)}
        ids = list(conn.execute(select(sessions.c.session_id).order_by(sessions.c.pk)).scalars())
    exports = {}
    for session_id in ids:
        hasher, size = hashlib.sha256(), 0
        for chunk in store.iter_export(session_id):
            hasher.update(chunk)
            size += len(chunk)
        exports[session_id] = (hasher.hexdigest(), size)
    return Snapshot(counts, exports)


def _store_error_names() -> set[str]:
    import store.errors
    import store.interchange.importing
    import store.interchange.reading

    names = set()
    for module in (store.errors, store.interchange.importing, store.interchange.reading):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, store.errors.StoreError):
                names.add(value.__name__)
    return names


def _cli_import(url: str, path: Path, timeout: float) -> tuple[str, str | None, str | None]:
    """(status, session id, error) of ``pi-store import PATH --json`` run for real."""
    cli = Path(sys.executable).with_name("pi-store")
    command = [str(cli)] if cli.exists() else [sys.executable, "-m", "store.cli"]
    done = subprocess.run([*command, "--db", url, "import", str(path), "--json", "--progress", "none"],
                          capture_output=True, timeout=timeout, cwd=ROOT)
    stderr = done.stderr.decode("utf-8", "replace")
    if "Traceback" in stderr:
        raise AssertionError(f"pi-store import printed a traceback (exit {done.returncode}):\n{stderr[-3000:]}")
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith(b'{"path"')]
    if len(reports) != 1:
        raise AssertionError(f"pi-store import exit {done.returncode}, {len(reports)} reports; "
                             f"stderr: {stderr[-1500:]}")
    report = reports[0]
    if done.returncode != (1 if report["status"] in REFUSED else 0):
        raise AssertionError(f"pi-store import exit {done.returncode} for status {report['status']}: {stderr[-1500:]}")
    return report["status"], report["sessionId"], report.get("error")


class Checker:
    """The worker's state: one store per URL, and what it held after the last case."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.store: Any = None
        self.before: Snapshot | None = None
        self.error_names = _store_error_names()

    def open(self, url: str, others: list[str] | None) -> None:
        from store.session_store import SessionStore

        if self.url != url:
            if self.store is not None:
                self.store.close()
            self.store, self.url = SessionStore.connect(url), url
            for path in others or []:  # given with a cycle's first case only (a replacement worker skips it)
                report = self.store.import_path(path)[0]
                if report.status != "imported":
                    raise AssertionError(f"setting up: {path} was {report.status}: {report.error}")
            self.before = snapshot(self.store)
        elif self.before is None:
            self.before = snapshot(self.store)

    def run(self, path: Path, via_cli: bool, timeout: float) -> tuple[str, str]:
        """(outcome, status) of importing ``path``; raises AssertionError on a failed check."""
        from sqlalchemy import select

        from store.db.schema import sessions
        from store.interchange.verifying import verify_session

        before, data = self.before, path.read_bytes()
        assert before is not None
        self.before = None  # recomputed if this case dies half-way
        if via_cli:
            status, session_id, error = _cli_import(self.url, path, timeout)
        else:
            reports = self.store.import_path(path)
            assert len(reports) == 1, f"{len(reports)} reports for one file"
            status, session_id, error = reports[0].status, reports[0].session_id, reports[0].error
        after = snapshot(self.store)
        problems = []
        if status == "failed" and (error or "").split(":", 1)[0] not in self.error_names:
            problems.append(f"an internal error reported as 'failed': {error}")
        touched = session_id if status in ACCEPTED else None
        for sid, value in before.exports.items():
            if sid != touched and after.exports.get(sid) != value:
                problems.append(f"session {sid!r} changed (export {value} -> {after.exports.get(sid)})")
        outcome = "accepted"
        if status in ACCEPTED:
            expected = (hashlib.sha256(data).hexdigest(), len(data))
            if after.exports.get(session_id) != expected:
                problems.append(f"accepted ({status}) but the export of {session_id!r} is "
                                f"{after.exports.get(session_id)}, the file {expected}")
            new = set(after.exports) - set(before.exports)
            if new - {session_id} or after.counts["sessions"] != before.counts["sessions"] + len(new):
                problems.append(f"sessions appeared besides {session_id!r}: {sorted(new - {session_id})}")
            if session_id in after.exports:
                health = verify_session(self.store, session_id)
                if not health.ok:
                    problems.append(f"verify {session_id!r}: {health.details[:5]}")
                with self.store.engine.connect() as conn:
                    header_seq = conn.execute(select(sessions.c.header_seq)
                                              .where(sessions.c.session_id == session_id)).scalar()
                if header_seq is None:
                    outcome = "headerless"
        elif status == "unchanged":
            for table in ("sessions", "entries"):
                if after.counts[table] != before.counts[table]:
                    problems.append(f"'unchanged' but {table} rows {before.counts[table]} -> {after.counts[table]}")
        elif status in REFUSED:
            outcome = "refused"
            if after.counts != before.counts:
                problems.append(f"refused ({status}) but rows changed: {before.counts} -> {after.counts}")
            if set(after.exports) != set(before.exports):
                problems.append(f"refused ({status}) but sessions appeared: {set(after.exports) - set(before.exports)}")
        else:
            problems.append(f"unexpected status {status!r}: {error}")
        self.before = after
        if problems:
            raise AssertionError(f"status {status}: " + "; ".join(problems))
        return outcome, status


def _worker(connection: Any) -> None:
    checker = Checker()
    while True:
        try:
            request = connection.recv()
        except EOFError:
            return
        started = time.perf_counter()
        try:
            checker.open(request["url"], request.get("others"))
            outcome, status = checker.run(Path(request["path"]), request["via_cli"], request["timeout"])
            connection.send({"outcome": outcome, "status": status, "seconds": time.perf_counter() - started})
        except AssertionError as exc:
            connection.send({"outcome": "failure", "status": "check", "error": str(exc),
                             "seconds": time.perf_counter() - started})
        except BaseException:  # what the API raised (or a check crashed on): a failure with its traceback
            connection.send({"outcome": "failure", "status": "exception", "error": traceback.format_exc(),
                             "seconds": time.perf_counter() - started})


class Worker:
    """A forked process running :class:`Checker` requests, killed and replaced after a timeout."""

    def __init__(self) -> None:
        self.process: Any = None
        self.connection: Any = None

    def ask(self, request: dict, timeout: float) -> dict:
        if self.process is None:
            context = multiprocessing.get_context("fork")
            self.connection, child = context.Pipe()
            self.process = context.Process(target=_worker, args=(child,), daemon=True)
            self.process.start()
            child.close()
        self.connection.send(request)
        if self.connection.poll(timeout):
            try:
                return self.connection.recv()
            except EOFError:
                pass
            code = self.stop()
            return {"outcome": "failure", "status": "died", "error": f"the worker died (exit code {code})",
                    "seconds": timeout}
        self.stop()
        return {"outcome": "failure", "status": "hang", "error": f"no answer within {timeout:.0f} s (killed)",
                "seconds": timeout}

    def stop(self) -> int | None:
        if self.process is None:
            return None
        self.connection.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        code, self.process = self.process.exitcode, None
        return code


# ---------------------------------------------------------------------------- stores and the campaign
@contextmanager
def store_url(engine: str, folder: Path, name: str) -> Iterator[str]:
    """A fresh database: a SQLite file in ``folder``, or a scratch PostgreSQL database (dropped after)."""
    if engine == "sqlite":
        yield f"sqlite:///{folder / (name + '.db')}"
        return
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    database = f"pi_fuzz_{name}_{uuid.uuid4().hex[:8]}".lower()
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{database}"'))
        yield make_url(PG_ADMIN_URL).set(database=database).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin.dispose()


@dataclass(slots=True)
class Result:
    engine: str
    case: Case
    outcome: str
    status: str
    seconds: float
    error: str | None = None


@dataclass(slots=True)
class Campaign:
    results: list[Result] = field(default_factory=list)

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.outcome == "failure"]

    def summary(self) -> str:
        outcomes = Counter(r.outcome for r in self.results)
        accepted = outcomes["accepted"] + outcomes["headerless"]
        return (f"fuzz-import: {accepted} accepted, {outcomes['refused']} refused, {outcomes['failure']} failures "
                f"of {len(self.results)}")

    def details(self) -> list[str]:
        lines = []
        for engine in sorted({r.engine for r in self.results}):
            mine = [r for r in self.results if r.engine == engine]
            statuses = Counter(r.status for r in mine)
            headerless = sum(r.outcome == "headerless" for r in mine)
            seconds = sorted(r.seconds for r in mine)
            lines.append(f"  {engine}: {len(mine)} files; statuses {dict(sorted(statuses.items()))}; "
                         f"{headerless} headerless stored (named files are kept); {sum(r.case.via_cli for r in mine)} "
                         f"through the CLI; {sum(seconds):.1f} s, median {seconds[len(seconds) // 2]:.3f} s, "
                         f"slowest {seconds[-1]:.2f} s")
        return lines


def run_campaign(*, count: int, seed: int, engines: list[str], cycle: int = 25, cli_every: int = 20,
                 timeout: float = 60.0, failures_dir: Path | None = None, only: int | None = None,
                 corpus: Path | None = CORPUS, log: Callable[[str], None] = print) -> Campaign:
    """Run ``count`` cases (or case ``only``) on each engine; see the module docstring."""
    sources = load_sources(corpus)
    campaign = Campaign()
    indices = [only] if only is not None else list(range(count))
    with tempfile.TemporaryDirectory(prefix="pi-fuzz-") as scratch:
        folder = Path(scratch)
        for engine in engines:
            worker = Worker()
            try:
                for start in range(0, len(indices), cycle) if only is None else [0]:
                    chunk = indices[start:start + cycle]
                    cycle_no = chunk[0] // cycle
                    others = cycle_others(seed, cycle_no, sources)
                    other_paths = []
                    for k, other in enumerate(others):
                        path = folder / f"other-{cycle_no}-{k}.jsonl"
                        path.write_bytes(other.data)
                        other_paths.append(str(path))
                    with store_url(engine, folder, f"c{cycle_no}") as url:
                        setup = other_paths
                        for index in chunk:
                            case = make_case(seed, index, sources, others, cli_every)
                            path = folder / f"case-{index}.jsonl"
                            path.write_bytes(case.data)
                            answer = worker.ask({"url": url, "others": setup, "path": str(path),
                                                 "via_cli": case.via_cli, "timeout": timeout}, timeout)
                            setup = None
                            result = Result(engine, case, answer["outcome"], answer["status"], answer["seconds"],
                                            answer.get("error"))
                            campaign.results.append(result)
                            if result.outcome == "failure":
                                log(f"FAILURE {engine} case {index} ({case.source}; {', '.join(case.mutations)}"
                                    f"{'; via the CLI' if case.via_cli else ''}): {_brief(result.error or '')}")
                                if failures_dir is not None:
                                    _keep(failures_dir, seed, result, path)
                            path.unlink()
                        worker.stop()  # the worker's engine must let go of a PostgreSQL database before its drop
            finally:
                worker.stop()
    return campaign


def _brief(error: str, keep: int = 1200) -> str:
    return error if len(error) <= 2 * keep else f"{error[:keep]}\n  [...]\n{error[-keep:]}"


def _keep(folder: Path, seed: int, result: Result, path: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{result.engine}-seed{seed}-case{result.case.index}"
    shutil.copyfile(path, folder / f"{name}.jsonl")
    (folder / f"{name}.json").write_text(json.dumps({
        "engine": result.engine, "seed": seed, "case": result.case.index, "source": result.case.source,
        "mutations": result.case.mutations, "viaCli": result.case.via_cli, "status": result.status,
        "error": result.error, "reproduce": f"python tools/fuzz_import.py --seed {seed} --case {result.case.index} "
                                            f"--engine {result.engine}"}, indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200, help="Mutated files per engine.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--engine", choices=["sqlite", "postgresql", "both"], default="sqlite")
    parser.add_argument("--cycle", type=int, default=25, help="Cases per fresh store.")
    parser.add_argument("--cli-every", type=int, default=20, help="One case in this many runs the real CLI (0: none).")
    parser.add_argument("--timeout", type=float, default=60.0, help="Seconds per case before it counts as a hang.")
    parser.add_argument("--case", type=int, help="Run only this case (reproduce a failure).")
    parser.add_argument("--write", type=Path, help="With --case: write its mutated file here and stop.")
    parser.add_argument("--failures", type=Path, default=Path(tempfile.gettempdir()) / "pi-fuzz-failures",
                        help="Where failing inputs are kept.")
    parser.add_argument("--no-corpus", action="store_true", help="Mutate the oracle fixtures only.")
    args = parser.parse_args(argv)
    corpus = None if args.no_corpus else CORPUS
    if args.write is not None:
        if args.case is None:
            parser.error("--write needs --case")
        sources = load_sources(corpus)
        others = cycle_others(args.seed, args.case // args.cycle, sources)
        case = make_case(args.seed, args.case, sources, others, args.cli_every)
        args.write.write_bytes(case.data)
        print(f"case {case.index}: {case.source}; {', '.join(case.mutations)}; {len(case.data)} bytes -> {args.write}")
        return 0
    engines = ["sqlite", "postgresql"] if args.engine == "both" else [args.engine]
    started = time.perf_counter()
    campaign = run_campaign(count=args.count, seed=args.seed, engines=engines, cycle=args.cycle,
                            cli_every=args.cli_every, timeout=args.timeout, failures_dir=args.failures,
                            only=args.case, corpus=corpus)
    for line in campaign.details():
        print(line)
    print(f"  seed {args.seed}, {time.perf_counter() - started:.1f} s wall")
    print(campaign.summary())
    return 1 if campaign.failures else 0


if __name__ == "__main__":
    sys.exit(main())
