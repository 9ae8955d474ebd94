"""Many writers, one truth: optimistic writes (``SessionChanged``), writer claims with fencing
tokens (``SessionClaimed``), and the mark a store write leaves on a session imported from a file.

Real processes where the rule is about processes: two managers in two processes, a claim holder
paused with SIGSTOP past its expiry, racing writers (some on the async API) with readers looping beside them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select, text

from store.db.schema import entries, sessions
from store.errors import SessionChanged, SessionClaimed, SessionNotFound
from store.session_store import SessionStore
from tests.async_as_sync import async_store
from tests.conftest import Clock
from tests.oracle_support import FIXTURES

SAMPLE = FIXTURES / "sessions" / "small-seed1-0.jsonl"

pytestmark = pytest.mark.both_apis  # the tests on the `store` fixture: on the sync API, then the async one


def _row_count(store: SessionStore, session_id: str) -> int:
    with store.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(entries).join(sessions)
                            .where(sessions.c.session_id == session_id)).scalar_one()


def _session_row(store: SessionStore, session_id: str):
    with store.engine.connect() as conn:
        return conn.execute(select(sessions).where(sessions.c.session_id == session_id)).one()


def _conversation(store: SessionStore):
    sm = store.create("/w")
    root = sm.append_message({"role": "user", "content": "question"})
    sm.append_message({"role": "assistant", "content": [{"type": "text", "text": "answer"}]})
    return sm, root


# ---------------------------------------------------------------------------------------------
# optimistic writes


def test_a_stale_manager_writes_nothing_until_it_refreshes(store: SessionStore) -> None:
    first, root = _conversation(store)
    session_id = first.get_session_id()
    second = store.open(session_id)
    second.branch(root)
    other = second.append_message({"role": "assistant", "content": [{"type": "text", "text": "another"}]})
    before = _row_count(store, session_id)
    version = first.get_version()
    with pytest.raises(SessionChanged) as raised:
        first.append_message({"role": "user", "content": "under a leaf the store moved on from"})
    assert (raised.value.session_id, raised.value.expected, raised.value.found) == (session_id, version, version + 1)
    assert _row_count(store, session_id) == before  # nothing written
    assert first.get_version() == version
    first.refresh()  # the leaf follows Pi's rule: the last entry in file order
    assert first.get_leaf_id() == other and first.get_version() == version + 1
    after = first.append_message({"role": "user", "content": "now on the current view"})
    assert store.open(session_id).get_branch_ids() == [root, other, after]


def test_a_refused_single_append_draws_the_same_on_both_engines(db_url: str, api: str) -> None:
    """A single append draws its entry id and timestamp before it writes, on either engine: a
    ``SessionChanged`` leaves one id and one clock reading unused on SQLite as on PostgreSQL
    (whose one-statement append needs them before it learns the session moved on), so a run with
    injected ids and clock writes the same entries on both."""
    drawn: list[str] = []

    def ids(kind: str) -> str:
        drawn.append(kind)
        return f"{len(drawn):08x}-0000-4000-8000-000000000000"

    clock = Clock()
    with (async_store(db_url, clock=clock, ids=ids) if api == "async"
          else SessionStore.connect(db_url, clock=clock, ids=ids)) as store:
        first, _ = _conversation(store)
        store.open(first.get_session_id()).append_custom_entry("elsewhere", {})
        before = (len(drawn), clock.now)
        with pytest.raises(SessionChanged):
            first.append_message({"role": "user", "content": "under a leaf the store moved on from"})
        assert (len(drawn) - before[0], clock.now - before[1]) == (1, 1)
        first.refresh()
        after = first.append_message({"role": "user", "content": "now on the current view"})
    assert after == f"{len(drawn):08x}"


def test_a_stale_batch_writes_nothing(store: SessionStore) -> None:
    first, _ = _conversation(store)
    second = store.open(first.get_session_id())
    second.append_custom_entry("elsewhere", {})
    before = _row_count(store, first.get_session_id())
    leaf = first.get_leaf_id()
    with pytest.raises(SessionChanged), first.batch():
        first.append_custom_entry("never stored", {})
    assert _row_count(store, first.get_session_id()) == before and first.get_leaf_id() == leaf


def test_the_writer_itself_stays_current(store: SessionStore) -> None:
    """A manager's own writes (single appends, batches, navigation) never make its view stale."""
    sm, root = _conversation(store)
    for i in range(5):
        sm.append_custom_entry("tick", {"i": i})
    with sm.batch():
        sm.append_custom_entry("a", {})
        sm.append_custom_entry("b", {})
    sm.branch(root)
    sm.append_message({"role": "assistant", "content": [{"type": "text", "text": "again"}]})
    sm.branch_with_summary(root, "left the other branch")
    assert sm.get_version() == _session_row(store, sm.get_session_id()).row_version


def test_a_replaced_import_makes_open_managers_stale(store: SessionStore, tmp_path: Path) -> None:
    """The tester's repro: a manager opened before ``import --replace`` of its session would
    have appended rows whose tree columns follow the new rows under a parent of the old ones."""
    session_id = store.import_jsonl(SAMPLE)
    manager = store.open(session_id)
    edited = tmp_path / "edited.jsonl"
    lines = SAMPLE.read_bytes().splitlines(keepends=True)
    edited.write_bytes(b"".join(lines[:-2]) + lines[-1])  # a line taken out: not an append, a replacement
    [report] = store.import_path(edited, replace=True)
    assert report.status == "replaced"
    with pytest.raises(SessionChanged):
        manager.append_message({"role": "user", "content": "stale"})
    manager.refresh()
    manager.append_message({"role": "user", "content": "fresh"})
    assert store.open(session_id).get_branch()[-1]["message"]["content"] == "fresh"


def test_a_deleted_session_is_not_written_through_an_old_manager(store: SessionStore) -> None:
    sm, _ = _conversation(store)
    store.delete(sm.get_session_id())  # the public delete (store.retention), as another process would
    replacement = store.create("/w")  # on SQLite it may get the deleted row's key
    replacement.append_message({"role": "user", "content": "someone else's"})
    with pytest.raises(SessionChanged) as raised:
        sm.append_message({"role": "user", "content": "into a deleted session"})
    assert raised.value.found is None
    with pytest.raises(SessionNotFound):
        sm.refresh()
    assert len(store.open(replacement.get_session_id()).get_branch()) == 1


STALE_WRITER = textwrap.dedent("""
    import json, sys
    from store.errors import SessionChanged
    from store.session_store import SessionStore
    store = SessionStore.connect(sys.argv[1])
    sm = store.open(sys.argv[2])
    print("opened", flush=True)
    sys.stdin.readline()  # the other process writes meanwhile
    report = {}
    try:
        sm.append_message({"role": "user", "content": "stale"})
        report["stale"] = "written"
    except SessionChanged as exc:
        report["stale"] = [exc.expected, exc.found]
    sm.refresh()
    report["leaf"] = sm.get_leaf_id()
    report["fresh"] = sm.append_message({"role": "user", "content": "fresh"})
    print(json.dumps(report), flush=True)
""")


def test_two_processes_a_stale_append_writes_nothing(db_url: str) -> None:
    with SessionStore.connect(db_url) as store:
        sm, root = _conversation(store)
        session_id = sm.get_session_id()
        proc = subprocess.Popen([sys.executable, "-c", STALE_WRITER, db_url, session_id], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "opened", proc.stderr.read()
            sm.branch(root)  # this process branches and appends while the other one holds its view
            other = sm.append_message({"role": "assistant", "content": [{"type": "text", "text": "other"}]})
            rows = _row_count(store, session_id)
            out, err = proc.communicate("go\n", timeout=120)
        finally:
            proc.kill()
        report = json.loads(out)
        assert report["stale"] == [sm.get_version() - 1, sm.get_version()], err
        assert report["leaf"] == other
        assert _row_count(store, session_id) == rows + 1  # only the append made after refresh()
        assert store.open(session_id).get_branch_ids() == [root, other, report["fresh"]]


# ---------------------------------------------------------------------------------------------
# the file and the store


def test_store_writes_mark_an_imported_session_as_diverged(store: SessionStore) -> None:
    session_id = store.import_jsonl(SAMPLE)
    row = _session_row(store, session_id)
    assert row.diverged_seq is None
    sm = store.open(session_id)
    sm.append_custom_entry("note", {"by": "the store"})
    sm.append_custom_entry("note", {"by": "the store again"})
    assert _session_row(store, session_id).diverged_seq == row.last_seq + 1  # the first row the store wrote


def test_api_sessions_never_diverge(store: SessionStore) -> None:
    sm, _ = _conversation(store)
    sm.append_custom_entry("note", {})
    assert _session_row(store, sm.get_session_id()).diverged_seq is None


# ---------------------------------------------------------------------------------------------
# claims


def test_a_live_claim_refuses_other_writers(store: SessionStore) -> None:
    holder, _ = _conversation(store)
    session_id = holder.get_session_id()
    claim = holder.claim("host-a", ttl_ms=60_000)
    assert claim.token == 1 and [c.owner for c in store.claims()] == ["host-a"]
    holder.append_custom_entry("mine", {})
    other = store.open(session_id)
    with pytest.raises(SessionClaimed, match="host-a"):
        other.append_custom_entry("not mine", {})
    with pytest.raises(SessionClaimed):
        store.claim(session_id, "host-b")
    holder.release_claim()
    assert store.claims() == []
    other.refresh()
    other.append_custom_entry("now anyone may", {})


def test_a_taken_over_claim_fences_its_old_holder(store: SessionStore, clock) -> None:
    holder, _ = _conversation(store)
    session_id = holder.get_session_id()
    old = holder.claim("host-a", ttl_ms=1_000)
    clock.now += 5_000  # the claim expired: another host may take over (and gets a higher token)
    new = store.claim(session_id, "host-b", ttl_ms=1_000)
    assert new.token == old.token + 1
    before = _row_count(store, session_id)
    with pytest.raises(SessionClaimed, match="taken over"):
        holder.append_custom_entry("late", {})
    with pytest.raises(SessionClaimed):
        holder.renew_claim()
    assert _row_count(store, session_id) == before
    holder.release_claim()  # not ours any more: the new holder keeps it
    assert [(c.owner, c.token) for c in store.claims()] == [("host-b", new.token)]


def test_an_expired_claim_still_fences_nobody_else_took(store: SessionStore, clock) -> None:
    """Expiry only allows a takeover; until one happens the holder's token is still current."""
    holder, _ = _conversation(store)
    holder.claim("host-a", ttl_ms=1_000)
    clock.now += 5_000
    holder.append_custom_entry("still mine", {})
    holder.renew_claim(ttl_ms=1_000)
    other = store.open(holder.get_session_id())
    with pytest.raises(SessionClaimed):
        other.append_custom_entry("refused again", {})


CLAIM_HOLDER = textwrap.dedent("""
    import sys
    from store.errors import SessionClaimed
    from store.session_store import SessionStore
    store = SessionStore.connect(sys.argv[1])
    sm = store.open(sys.argv[2])
    sm.claim("paused-host", ttl_ms=int(sys.argv[3]))
    sm.append_custom_entry("before the pause", {})
    print("ready", flush=True)
    sys.stdin.readline()  # SIGSTOP arrives here; the claim expires and is taken over meanwhile
    try:
        sm.append_custom_entry("after the pause", {})
        print("wrote", flush=True)
    except SessionClaimed as exc:
        print("refused", exc, flush=True)
""")


def test_a_paused_claim_holder_cannot_write_after_a_takeover(db_url: str) -> None:
    with SessionStore.connect(db_url) as store:
        sm, _ = _conversation(store)
        session_id = sm.get_session_id()
        proc = subprocess.Popen([sys.executable, "-c", CLAIM_HOLDER, db_url, session_id, "500"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
            proc.send_signal(signal.SIGSTOP)
            time.sleep(0.8)  # past the claim's expiry, while the holder cannot run at all
            takeover = store.claim(session_id, "new-host", ttl_ms=60_000)
            proc.send_signal(signal.SIGCONT)
            out, err = proc.communicate("go\n", timeout=60)
        finally:
            proc.kill()
        assert out.startswith("refused"), (out, err)
        assert takeover.token == 2
        labels = [e.get("customType") for e in store.open(session_id).get_entries()]
        assert labels.count("before the pause") == 1 and "after the pause" not in labels


# ---------------------------------------------------------------------------------------------
# racing writers and looping readers, in real processes

RACER = textwrap.dedent("""
    import asyncio, json, sys, time
    from pathlib import Path
    from store.aio import AsyncSessionStore
    from store.errors import SessionChanged
    from store.session_store import SessionStore
    url, session_id, root, tag, count, sync, kind = (sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4],
                                                     int(sys.argv[5]), Path(sys.argv[6]), sys.argv[7])

    def ready_go():
        (sync / f"ready-{tag}").touch()
        while not (sync / "go").exists():
            time.sleep(0.001)

    def race():
        store = SessionStore.connect(url)
        ready_go()
        sm = store.open(session_id)
        acked, conflicts = [], 0
        for i in range(count):
            while True:
                sm.branch(acked[-1] if acked else root)  # this writer's own chain
                try:
                    acked.append(sm.append_message({"role": "user", "content": f"{tag} {i}"}))
                    break
                except SessionChanged:
                    conflicts += 1
                    sm.refresh()
        return acked, conflicts

    async def race_async():  # the same writer on the async API
        store = await AsyncSessionStore.connect(url)
        ready_go()
        sm = await store.open(session_id)
        acked, conflicts = [], 0
        for i in range(count):
            while True:
                await sm.branch(acked[-1] if acked else root)
                try:
                    acked.append(await sm.append_message({"role": "user", "content": f"{tag} {i}"}))
                    break
                except SessionChanged:
                    conflicts += 1
                    await sm.refresh()
        await store.close()
        return acked, conflicts

    acked, conflicts = asyncio.run(race_async()) if kind == "async" else race()
    print(json.dumps({"acked": acked, "conflicts": conflicts}))
""")

READER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from store.describe import describe_session
    from store.session_store import SessionStore
    store = SessionStore.connect(sys.argv[1])
    sync = Path(sys.argv[2])
    loops = 0
    while not (sync / "stop").exists():  # list, open, inspect, search
        for info in store.list_all(limit=20):
            store.open(info.id).build_session_context()
            describe_session(store, info.id)
        store.search("racer")
        loops += 1
    print(loops)
""")


def _race(url: str, tmp_path: Path, plan: list[tuple[str, str]], count: int, async_writers: int = 0) -> list[dict]:
    """Run one writer per ``(session_id, root)`` of ``plan`` (the last ``async_writers`` of them on
    ``AsyncSessionStore``) and two readers; return the writers' reports once all are done."""
    kinds = ["sync"] * (len(plan) - async_writers) + ["async"] * async_writers
    procs = [subprocess.Popen([sys.executable, "-c", RACER, url, sid, root, f"racer{i}", str(count), str(tmp_path),
                               kind], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, ((sid, root), kind) in enumerate(zip(plan, kinds, strict=True))]
    readers = [subprocess.Popen([sys.executable, "-c", READER, url, str(tmp_path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    deadline = time.monotonic() + 300  # starting Python and connecting is slow on a loaded machine
    while not all((tmp_path / f"ready-racer{i}").exists() for i in range(len(plan))):
        assert time.monotonic() < deadline, "writers did not start"
        time.sleep(0.01)
    (tmp_path / "go").touch()
    results = [p.communicate(timeout=600) for p in procs]
    (tmp_path / "stop").touch()
    reader_results = [p.communicate(timeout=120) for p in readers]
    for p, (_, err) in zip(procs + readers, results + reader_results, strict=True):
        assert p.returncode == 0, err[-3000:]
    assert all(int(out) > 0 for out, _ in reader_results)
    return [json.loads(out) for out, _ in results]


def _assert_stored_once(store: SessionStore, session_id: str, root: str, reports: list[dict]) -> None:
    sm = store.open(session_id)
    ids = [e["id"] for e in sm.get_entries()]
    assert len(ids) == len(set(ids))
    for report in reports:
        acked = report["acked"]
        assert all(ids.count(entry_id) == 1 for entry_id in acked)
        assert sm.get_branch_ids(acked[-1]) == [root, *acked]  # each writer's chain is intact
    assert len(ids) == 1 + sum(len(r["acked"]) for r in reports)


def _verify_all(url: str) -> None:
    out = subprocess.run([sys.executable, "-m", "store.cli", "--db", url, "verify", "--all"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.slow
def test_four_writers_race_on_one_session(db_url: str, tmp_path: Path) -> None:
    """Every run must lose nothing; a run where the writers never overlapped (no conflict: it
    proved nothing about racing) is run again, up to three times."""
    for attempt in range(3):
        with SessionStore.connect(db_url) as store:
            sm = store.create(f"/race/{attempt}")
            root = sm.append_message({"role": "user", "content": "racer root"})
            session_id = sm.get_session_id()
        run = tmp_path / f"run{attempt}"
        run.mkdir()
        reports = _race(db_url, run, [(session_id, root)] * 4, count=60, async_writers=1)
        with SessionStore.connect(db_url) as store:
            _assert_stored_once(store, session_id, root, reports)
        _verify_all(db_url)
        if sum(r["conflicts"] for r in reports) > 0:  # they did race
            return
    pytest.fail("the four writers never overlapped in three runs: the test proved nothing")


@pytest.mark.slow
def test_sixteen_writers_on_sixteen_sessions(db_url: str, tmp_path: Path) -> None:
    """16 writer processes, 4 of them on the async API, each on a session of its own, with the two
    readers looping beside them."""
    plan = []
    with SessionStore.connect(db_url) as store:
        for i in range(16):
            sm = store.create(f"/race/{i}")
            plan.append((sm.get_session_id(), sm.append_message({"role": "user", "content": f"racer root {i}"})))
    reports = _race(db_url, tmp_path, plan, count=30, async_writers=4)
    assert all(r["conflicts"] == 0 for r in reports)  # nobody shares a session: nobody is stale
    with SessionStore.connect(db_url) as store:
        for (session_id, root), report in zip(plan, reports, strict=True):
            _assert_stored_once(store, session_id, root, [report])
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM sessions")).scalar_one() == 16
    _verify_all(db_url)



def test_claims_command_lists_and_releases(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from store.cli import main

    url = f"sqlite:///{tmp_path / 'store.db'}"
    holder = SessionStore.connect(url)  # open until the end: its manager is the old holder
    sm, _ = _conversation(holder)
    session_id = sm.get_session_id()
    sm.claim("host-a", ttl_ms=None)
    runner = CliRunner()
    listed = runner.invoke(main, ["--db", url, "claims", "--json"])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output) == [{"sessionId": session_id, "owner": "host-a", "token": 1, "expires": None,
                                          "live": True}]
    refused = runner.invoke(main, ["--db", url, "claims", "release", session_id, "--owner", "host-b"])
    assert refused.exit_code == 1 and "claimed by 'host-a'" in refused.output
    released = runner.invoke(main, ["--db", url, "claims", "release", session_id])
    assert released.exit_code == 0 and "released" in released.output
    assert runner.invoke(main, ["--db", url, "claims"]).output.strip() == "no session is claimed"
    with SessionStore.connect(url) as store, holder:
        with pytest.raises(SessionClaimed):  # the old holder stays fenced off after the release
            sm.append_custom_entry("late", {})
        store.open(session_id).append_custom_entry("anyone", {})


def test_compact_then_pi_appends_then_sync_is_a_conflict_and_verify_says_diverged(tmp_path: Path) -> None:
    """The tester's repro end to end through the real CLI: import a Pi file, `pi-store compact`
    writes a compaction entry, Pi then appends a line to the file, `pi-store sync` reports a
    conflict (nothing interleaved) and `verify --all` calls the session diverged, not FAILED."""
    folder = tmp_path / "sessions" / "--work--"
    folder.mkdir(parents=True)
    source = FIXTURES / "sessions" / "medium-seed1-0.jsonl"
    path = folder / source.name
    path.write_bytes(source.read_bytes())
    db = f"sqlite:///{tmp_path / 'store.db'}"

    def cli(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "store.cli", "--db", db, *args], capture_output=True,
                              text=True, timeout=300)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    assert cli("sync", str(tmp_path / "sessions")).returncode == 0
    with SessionStore.connect(db) as store:
        [info] = store.list_all()
        before = _row_count(store, info.id)
    compacted = cli("compact", info.id, "--summarizer", "deterministic", "--keep-recent", "200", "--json")
    assert compacted.returncode == 0 and json.loads(compacted.stdout)["compacted"], compacted.stdout
    pi_line = (b'{"type":"custom","customType":"pi-wrote-this","data":{},"id":"f1f1f1f1","parentId":null,'
               b'"timestamp":"2026-12-01T00:00:00.000Z"}\n')
    with path.open("ab") as stream:  # Pi appends to the file it owns, unaware of the store's entry
        stream.write(pi_line)
    synced = cli("sync", str(tmp_path / "sessions"), "--json")
    assert synced.returncode == 1
    [report] = [json.loads(line) for line in synced.stdout.splitlines() if '"path"' in line]
    assert report["status"] == "conflict" and "the store changed this session after the file" in report["error"], report
    with SessionStore.connect(db) as store:
        assert _row_count(store, info.id) == before + 1  # the compaction, and not Pi's line
        assert "pi-wrote-this" not in b"".join(store.iter_export(info.id)).decode("utf-8", "surrogateescape")
    verified = cli("verify", "--all", "--json")
    assert verified.returncode == 0, verified.stdout
    verdicts = [json.loads(line) for line in verified.stdout.splitlines() if '"sessionId"' in line]
    assert [v["verdict"] for v in verdicts] == ["diverged"] and verdicts[0]["addedRows"] == 1
