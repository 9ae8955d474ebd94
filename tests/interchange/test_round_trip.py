"""Import then export gives back the same bytes, for every file Pi wrote and every legacy/edge
file (read in this process and by the worker process); migrated files can also be exported as Pi
rewrites them; re-imports are idempotent and conflicts are refused with a clear error."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from store.errors import ImportFailed, SessionExists, SessionNotFound
from store.format import CURRENT_SESSION_VERSION, iter_lines, session_version
from store.interchange.importing import import_file
from store.interchange.verifying import verify_session
from store.loading import head_of
from store.session_store import SessionStore
from tests.oracle_support import CORPUS_DIR, load_fixture_cases

FILES = [c.source_path for c in load_fixture_cases() if c.kind != "corpus"]
CORPUS = sorted(CORPUS_DIR.glob("*.jsonl")) if CORPUS_DIR.is_dir() else []

pytestmark = pytest.mark.both_apis  # the tests on the `store` fixture: on the sync API, then the async one


def _needs_migration(path: Path) -> bool:
    with path.open("rb") as stream:
        head = head_of(iter_lines(stream))
    return head.header is not None and not session_version(head.header) >= CURRENT_SESSION_VERSION


MIGRATED = [c for c in load_fixture_cases(("legacy",)) if _needs_migration(c.source_path)]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_round_trip_is_byte_identical(tmp_path: Path, path: Path) -> None:
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        session_id = store.import_jsonl(path, keep_non_sessions=True)  # files Pi rejects round-trip too
        out = tmp_path / "out.jsonl"
        store.export_jsonl(session_id, out)
        assert sha(out.read_bytes()) == sha(path.read_bytes())


def test_the_worker_process_reads_like_this_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Big files are read by a forked worker; force it on small ones: same rows, same bytes."""
    import store.interchange.importing as importing

    monkeypatch.setattr(importing, "WORKER_MIN_BYTES", 0)
    for index, path in enumerate(p for p in FILES if p.name.startswith(("edge-", "legacy-", "small-seed1-"))):
        with SessionStore.connect(f"sqlite:///{tmp_path / f'w{index}.db'}") as parallel, \
                SessionStore.connect(f"sqlite:///{tmp_path / f's{index}.db'}") as serial:
            ours = import_file(parallel, path, parallel=True, keep_non_sessions=True)
            theirs = import_file(serial, path, parallel=False, keep_non_sessions=True)
            assert (ours.session_id, ours.lines, ours.warnings, ours.sha256) == (
                theirs.session_id, theirs.lines, theirs.warnings, theirs.sha256)
            assert b"".join(parallel.iter_export(ours.session_id)) == path.read_bytes()
            assert table_rows(parallel) == table_rows(serial), path.name


def table_rows(store: SessionStore) -> list[tuple]:
    """Every stored row of every session, without keys and without ``row_version`` (a count of
    the writes that made the rows, not part of them), for comparing two stores."""
    from sqlalchemy import select

    from store.db.engine import read_transaction
    from store.db.schema import entries, sessions

    skip = {"pk", "session_pk"}
    session_skip = skip | {"source_path", "source_mtime_ms", "row_version"}
    with read_transaction(store.engine) as conn:
        session_rows = [tuple(v for k, v in row._mapping.items() if k not in session_skip)
                        for row in conn.execute(select(sessions).order_by(sessions.c.session_id))]
        entry_rows = [tuple(v for k, v in row._mapping.items() if k not in skip)
                      for row in conn.execute(select(entries).order_by(entries.c.session_pk, entries.c.seq))]
    return session_rows + entry_rows


@pytest.mark.skipif(not CORPUS, reason=f"corpus absent: {CORPUS_DIR} (../shared is not checked out here)")
def test_corpus_round_trips_byte_identical(tmp_path: Path) -> None:
    for index, path in enumerate(CORPUS):  # a database each: some corpus files share a session id
        with SessionStore.connect(f"sqlite:///{tmp_path / f's{index}.db'}") as store:
            session_id = store.import_jsonl(path)
            assert sha(b"".join(store.iter_export(session_id))) == sha(path.read_bytes()), path.name


@pytest.mark.parametrize("case", MIGRATED, ids=lambda c: c.name)
def test_export_as_migrated_equals_what_pi_rewrites(tmp_path: Path, case) -> None:
    after = case.describe["fileAfterOpen"]["content"]
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        session_id = store.import_jsonl(case.source_path)
        ours = b"".join(store.iter_export(session_id, as_migrated=True)).decode("utf-8")
    assert case.describe["fileAfterOpen"]["changed"]
    # ids differ (Pi draws random ones): compare line by line with ids mapped by position
    theirs_lines, our_lines = after.splitlines(), ours.splitlines()
    assert len(theirs_lines) == len(our_lines)
    mapping = {}
    for mine, theirs in zip(our_lines, theirs_lines, strict=True):
        a, b = json.loads(mine), json.loads(theirs)
        if isinstance(a, dict) and isinstance(b, dict) and "id" in a and a.get("type") != "session":
            mapping[a["id"]] = b["id"]
    for mine, theirs in zip(our_lines, theirs_lines, strict=True):
        for ours_id, their_id in mapping.items():
            mine = mine.replace(f'"{ours_id}"', f'"{their_id}"')
        assert mine == theirs


def test_a_migrated_session_the_store_wrote_to_exports_in_its_migrated_form(store: SessionStore) -> None:
    """A v1 file's lines hold no ids; the rows the store appends name the ids the migration gave
    its entries. Exported after the file's own bytes, they named nothing once Pi migrated the file
    again (with new ids): a compaction kept nothing. Once written to, it exports as Pi rewrites it."""
    path = next(p for p in FILES if p.name == "legacy-v1.jsonl")
    session_id = store.import_file(path).session_id
    assert b"".join(store.iter_export(session_id)) == path.read_bytes()  # the file's bytes until then
    sm = store.open(session_id)
    first_kept = sm.get_branch()[-2]["id"]
    sm.append_compaction("summary", first_kept, 1000)
    exported = b"".join(store.iter_export(session_id))
    assert exported == b"".join(store.iter_export(session_id, as_migrated=True))
    lines = [json.loads(line) for line in exported.decode().splitlines()]
    assert lines[0]["version"] == CURRENT_SESSION_VERSION and lines[-1]["type"] == "compaction"
    ids = {line.get("id") for line in lines[1:]}
    assert lines[-1]["firstKeptEntryId"] in ids and all(line["parentId"] in ids | {None} for line in lines[1:])
    health = verify_session(store, session_id)
    assert (health.verdict, health.size, health.sha256) == ("diverged", len(exported),
                                                            hashlib.sha256(exported).hexdigest())


def test_both_engines_round_trip_and_reimport(store: SessionStore, tmp_path: Path) -> None:
    path = next(p for p in FILES if p.name == "edge-duplicate-ids.jsonl")
    report = store.import_file(path)
    assert report.imported and report.warnings
    again = store.import_file(path)
    assert not again.imported and again.session_id == report.session_id
    assert len(store.list_all()) == 1
    assert b"".join(store.iter_export(report.session_id)) == path.read_bytes()
    changed = tmp_path / path.name
    changed.write_bytes(path.read_bytes()[:-10] + b'{"type":"custom","customType":"x"}\n')
    with pytest.raises(SessionExists, match=re.escape(str(changed))):
        store.import_file(changed)


def test_errors_name_the_problem(store: SessionStore, tmp_path: Path) -> None:
    with pytest.raises(ImportFailed, match=r"missing\.jsonl"):
        store.import_jsonl(tmp_path / "missing.jsonl")
    with pytest.raises(SessionNotFound):
        store.export_jsonl("nope", tmp_path / "x.jsonl")
    with pytest.raises(SessionNotFound):
        store.open("nope")


def test_api_sessions_export_as_pi_writes_them(store: SessionStore) -> None:
    sm = store.create("/w")
    sm.append_model_change("anthropic", "claude")
    sm.append_message({"role": "user", "content": "héllo \u2028 😀", "timestamp": 5})
    sm.append_custom_entry("ext", {"b": 1, "10": 2, "a": 0.1 + 0.2})
    data = b"".join(store.iter_export(sm.get_session_id())).decode("utf-8")
    lines = data.split("\n")
    assert lines[-1] == "" and len(lines) == 5
    header = json.loads(lines[0])
    assert list(header) == ["type", "version", "id", "timestamp", "cwd"]
    assert lines[3].startswith('{"type":"custom","customType":"ext","data":{"10":2,"b":1,"a":0.30000000000000004}')
    assert "héllo \u2028 😀" in lines[2]


def test_cli_import_list_inspect_export(tmp_path: Path) -> None:
    path = next(p for p in FILES if p.name == "small-seed1-0.jsonl")
    cli = [sys.executable, "-m", "store.cli", "--db", f"sqlite:///{tmp_path / 'cli.db'}"]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120)

    imported = run("import", str(path), "--json")
    assert imported.returncode == 0, imported.stderr
    report, summary = map(json.loads, imported.stdout.splitlines())
    session_id = report["sessionId"]
    assert report["status"] == "imported" and summary["summary"]["sessions"] == 1
    listed = json.loads(run("list", "--json").stdout)
    assert [s["id"] for s in listed] == [session_id]
    doc = json.loads(run("inspect", session_id, "--all-leaves").stdout)
    assert doc["leafId"] and doc["branchIds"][-1] == doc["leafId"] and doc["allLeaves"]
    assert run("export", session_id, "-o", str(tmp_path / "o.jsonl")).returncode == 0
    assert (tmp_path / "o.jsonl").read_bytes() == path.read_bytes()
    missing = run("inspect", "no-such-session")
    assert missing.returncode == 1 and "no-such-session" in missing.stderr
