"""``export --all`` writes Pi's folder layout; ``verify`` re-exports, re-derives the tree and
reports what it finds; streaming pieces agree with their whole-file references."""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import update

from store.db.engine import write_transaction
from store.db.schema import entries, sessions
from store.format import iter_lines, migrate_entries
from store.interchange.exporting import pi_relative_path, pi_session_dir_name
from store.interchange.importing import ImportConflict, import_file
from store.interchange.verifying import verify_all, verify_session
from store.loading import LineReader, head_of, migration_ids, plan_v1_migration
from store.session_store import SessionStore
from store.tree_columns import NONE, StoredTree, TreeBuilder, derive_child
from tests.interchange.test_round_trip import FILES, MIGRATED


def test_pi_layout_names() -> None:
    assert pi_session_dir_name("/home/me/my:proj") == "--home-me-my-proj--"
    assert pi_session_dir_name("/a/b/../c/") == "--a-c--"
    assert pi_relative_path("019a", "/w", "2026-01-02T03:04:05.678Z", True) == Path(
        "--w--/2026-01-02T03-04-05-678Z_019a.jsonl")
    assert pi_relative_path("../x", "", None, False) == Path("---x.jsonl")  # no leading dots: no hidden files


def test_export_all_in_pis_layout_round_trips(tmp_path: Path) -> None:
    picked = [p for p in FILES if p.name in ("small-seed1-0.jsonl", "legacy-v1.jsonl", "edge-not-session.jsonl",
                                             "edge-empty.jsonl", "edge-crlf.jsonl")]
    db = f"sqlite:///{tmp_path / 's.db'}"
    with SessionStore.connect(db) as store:
        ids = {import_file(store, path, keep_non_sessions=True).session_id: path for path in picked}
        sm = store.create("/home/me/proj")  # a session made through the API: written as Pi writes it
        sm.append_message({"role": "user", "content": "hello", "timestamp": 1})
        ids[sm.get_session_id()] = None
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "store.cli", "--db", db, "export", "--all", str(out), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    *items, summary = map(json.loads, done.stdout.splitlines())
    assert summary == {"summary": {"files": len(ids), "failed": 0, "renamed": 0}}
    written = {item["sessionId"]: Path(item["path"]) for item in items}
    assert written.keys() == ids.keys()
    for session_id, source in ids.items():
        target = written[session_id]
        if source is not None:
            assert target.read_bytes() == source.read_bytes()
        head = json.loads(target.read_bytes().splitlines()[0]) if target.stat().st_size else None
        if head is not None and head.get("type") == "session" and target.parent != out:
            stamp = head["timestamp"].replace(":", "-").replace(".", "-")
            assert target.relative_to(out) == Path(pi_session_dir_name(head["cwd"])) / f"{stamp}_{session_id}.jsonl"
        else:
            assert target.parent == out  # Pi could not have written it: not in a cwd folder
    api = written[sm.get_session_id()]
    assert api.parent.name == "--home-me-proj--"
    migrated = subprocess.run([sys.executable, "-m", "store.cli", "--db", db, "export", "--all", str(tmp_path / "m"),
                               "--as-migrated"], capture_output=True, text=True, timeout=120)
    assert migrated.returncode == 0
    legacy = next(sid for sid, source in ids.items() if source is not None and source.name == "legacy-v1.jsonl")
    exported = next((tmp_path / "m").rglob(f"*{legacy}.jsonl")).read_text()
    assert '"version":3' in exported.splitlines()[0]


def test_verify_reports_health_and_finds_damage(store: SessionStore) -> None:
    reports = {}
    for path in sorted(FILES, key=lambda p: p.name != "edge-duplicate-ids.jsonl"):
        if path.name.startswith(("edge-", "legacy-", "small-seed1-")):
            with contextlib.suppress(ImportConflict):  # several edge files share a session id
                report = import_file(store, path, keep_non_sessions=True)
                reports.setdefault(report.session_id, report)
    sm = store.create("/w")
    sm.append_message({"role": "user", "content": "hi", "timestamp": 1})
    healths = {h.session_id: h for h in verify_all(store)}
    assert all(h.ok for h in healths.values()), [h.to_json() for h in healths.values() if not h.ok]
    assert healths[sm.get_session_id()].canonical_ok is True and healths[sm.get_session_id()].bytes_ok is None
    edge = next(sid for sid, r in reports.items() if r.path.endswith("edge-duplicate-ids.jsonl"))
    assert healths[edge].duplicate_ids == 2 and healths[edge].bytes_ok is True
    with write_transaction(store.engine) as conn:  # damage: a derived column and a line
        spk = conn.execute(sessions.select().where(sessions.c.session_id == edge)).first().pk
        conn.execute(update(entries).where(entries.c.session_pk == spk, entries.c.seq == 3).values(depth=99))
        conn.execute(update(entries).where(entries.c.session_pk == spk, entries.c.seq == 1)
                     .values(line=entries.c.line + " "))
    damaged = verify_session(store, edge)
    assert not damaged.ok and damaged.bytes_ok is False and damaged.tree_ok is False
    assert any("line(s) 4" in d for d in damaged.details)


@pytest.mark.parametrize("last", ["complete", "cut"])
@pytest.mark.parametrize("write", ["single", "batch"])
def test_a_write_after_a_file_without_final_newline_starts_a_line(store: SessionStore, tmp_path: Path,
                                                                  last: str, write: str) -> None:
    """Pi ends a file's unterminated last line when it opens the file, then appends; the store's
    first write did not, so the export glued the new entry onto that line and Pi, reading it back,
    lost the entry. The file's part still verifies against the file."""
    lines = (Path(FILES[0]).parent / "small-seed1-0.jsonl").read_bytes().splitlines(keepends=True)
    body = b"".join(lines[:6]).rstrip(b"\n") if last == "complete" else b"".join(lines[:5]) + lines[5][:40]
    path = tmp_path / "s.jsonl"
    path.write_bytes(body)
    session_id = import_file(store, path).session_id
    sm = store.open(session_id)
    if write == "single":
        entry_id = sm.append_message({"role": "user", "content": "from the API", "timestamp": 1})
    else:
        with sm.batch():
            entry_id = sm.append_message({"role": "user", "content": "from the API", "timestamp": 1})
            sm.append_session_info("named")
    exported = b"".join(store.iter_export(session_id))
    assert exported.startswith(body + b"\n") and b"\n{" in exported[len(body):]
    read_back = [json.loads(line) for line in exported.splitlines()[6:]]  # after the file's six lines
    assert read_back[0]["id"] == entry_id
    health = verify_session(store, session_id)
    assert health.ok and health.verdict == "diverged" and health.bytes_ok is True, health.to_json()
    sm.append_message({"role": "user", "content": "and again", "timestamp": 2})  # ended once
    assert b"".join(store.iter_export(session_id)).startswith(exported)


def test_cli_verify_exit_status(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    path = next(p for p in FILES if p.name == "edge-parent-cycle.jsonl")
    with SessionStore.connect(db) as store:
        session_id = import_file(store, path).session_id
    run = subprocess.run([sys.executable, "-m", "store.cli", "--db", db, "verify", "--all", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    database, health, summary = map(json.loads, run.stdout.splitlines())
    assert database["database"]["ok"] and summary["summary"]["identical"] == 1
    assert health["sessionId"] == session_id and health["verdict"] == "identical" and health["cycles"] == 1


# ---------------------------------------------------------------------------------------------
# streaming pieces against their whole-file references


def derive_whole(entries_: list[tuple[int, object]]) -> dict[int, tuple]:
    """The reference: every row's columns from the whole file at once (Pi's byId: the last row
    with an id wins; a parent cycle is cut at its earliest row)."""
    last: dict[str, int] = {}
    for seq, value in entries_:
        if isinstance(value, dict) and isinstance(value.get("id"), str):
            last[value["id"]] = seq
    parent_of: dict[int, int | None] = {}
    for seq, value in entries_:
        parent_id = value.get("parentId") if isinstance(value, dict) else None
        parent_of[seq] = last.get(parent_id) if isinstance(parent_id, str) and parent_id else None
    state: dict[int, int] = {}
    for start in parent_of:
        walk, node = [], start
        while node is not None and node not in state:
            state[node] = 1
            walk.append(node)
            node = parent_of[node]
        if node is not None and state[node] == 1:
            parent_of[min(walk[walk.index(node):])] = None
        for member in walk:
            state[member] = 2
    values, cols = dict(entries_), {}
    for seq, _ in entries_:
        chain = [seq]
        while chain[-1] not in cols and (parent := parent_of[chain[-1]]) is not None and parent not in cols:
            chain.append(parent)
        for member in reversed(chain):
            if member in cols:
                continue
            parent = parent_of[member]
            cols[member] = derive_child(member, None, values[member], cols[parent] if parent is not None else None)
    return {seq: (c.parent_seq, c.depth, c.run_start, c.compaction_seq, c.thinking_seq, c.model_seq)
            for seq, c in cols.items()}


def derive_streaming(rows: list[object]) -> dict[int, tuple]:
    """TreeBuilder then the relink of late ids, on arrays (what the writer does in the database)."""
    tree = TreeBuilder()
    for seq, value in enumerate(rows):
        if value is None:
            tree.skip()
        else:
            tree.add(seq, value)
    outcome = tree.outcome()
    stored = StoredTree(zip(tree.flags, tree.parent, tree.depth, tree.run, tree.compaction, tree.thinking,
                            tree.model, strict=True))
    naming = {seq: tree.ids.get(value["parentId"]) for seq, value in enumerate(rows)
              if isinstance(value, dict) and value.get("parentId") in outcome.late_ids}
    stored.relink(naming)
    return {seq: tuple(None if x == NONE else x for x in (stored.parent[seq], stored.depth[seq], stored.run[seq],
                                                           stored.compaction[seq], stored.thinking[seq],
                                                           stored.model[seq]))
            for seq in range(len(rows)) if rows[seq] is not None}


@pytest.mark.parametrize("seed", range(60))
def test_streaming_tree_equals_the_whole_file_derivation(seed: int) -> None:
    rng = random.Random(seed)
    ids = [f"{rng.getrandbits(32):08x}" for _ in range(12)] + ["not-hex-id", "ABCDEF12"]
    rows: list[object] = []
    for _ in range(rng.randint(1, 60)):
        roll = rng.random()
        if roll < 0.08:
            rows.append(None)  # a skipped line or the header: no tree row
        elif roll < 0.12:
            rows.append([1, 2])
        else:
            kind = rng.choice(["message", "compaction", "thinking_level_change", "model_change", "label"])
            value = {"type": kind, "id": rng.choice(ids),
                     "parentId": rng.choice([*ids, None, "", "missing0"]) if rows else None}
            if kind == "message":
                value["message"] = {"role": rng.choice(["user", "assistant"])}
            rows.append(value)
    whole = derive_whole([(seq, v) for seq, v in enumerate(rows) if v is not None])
    assert derive_streaming(rows) == whole


@pytest.mark.parametrize("case", MIGRATED, ids=lambda c: c.name)
def test_streaming_migration_equals_migrate_entries(case) -> None:
    """The line-at-a-time migration of imports gives what the whole-file ``migrate_entries``
    gives (both checked against Pi's own rewrite by the round-trip test and conformance C)."""
    with case.source_path.open("rb") as stream:
        lines = list(iter_lines(stream))
    head = head_of(lines)
    plan = plan_v1_migration(lines) if head.needs_plan else None
    reader = LineReader(lambda warning: None, plan=plan)
    rows = [reader.read(raw) for raw in lines]
    assert reader.migrated_from is not None
    originals = [LineReader(lambda warning: None, in_body=True).read(raw).value for raw in lines]
    parsed = [v for v, r in zip(originals, rows, strict=True) if r.kind != "skipped"]
    migrate_entries(parsed, migration_ids(head.header["id"]))
    assert [r.value for r in rows if r.kind != "skipped"] == parsed


def test_verify_of_a_locked_store_is_an_error_not_damage(tmp_path: Path) -> None:
    """A store another process holds locked past the lock timeout was "damaged" (the full-text
    check's write could not start), with advice to rebuild the index: it is the command's error."""
    import os
    import sqlite3

    db = tmp_path / "s.db"
    with SessionStore.connect(str(db)) as store:
        import_file(store, FILES[0])
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        done = subprocess.run([sys.executable, "-m", "store.cli", "--db", str(db), "verify", "--all"],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PI_STORE_LOCK_TIMEOUT": "1"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert done.returncode == 1 and done.stderr.startswith("Error: database is locked"), done.stderr
    assert "damaged" not in done.stdout


def test_verify_of_a_session_behind_a_lock_is_an_error_not_damage(monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL: a session whose rows another transaction holds locked past the lock timeout
    was "damaged" (the database reports an error reading it)."""
    import psycopg
    from sqlalchemy import make_url
    from sqlalchemy.exc import OperationalError

    from tests.conftest import scratch_pg_database

    monkeypatch.setenv("PI_STORE_LOCK_TIMEOUT", "1")
    with scratch_pg_database("pi_store_verify_lock") as url, SessionStore.connect(url) as store:
        session_id = import_file(store, FILES[0]).session_id
        plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(plain) as holder:
            holder.execute("LOCK TABLE entries IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(OperationalError, match="lock timeout"):
                verify_session(store, session_id)
            holder.rollback()
        assert verify_session(store, session_id).ok
