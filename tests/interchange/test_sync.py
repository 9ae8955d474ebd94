"""Sync semantics: unchanged files are skipped, grown files are read from the stored offset (and
the lines they add correct earlier rows), other changes are conflicts unless ``replace``; real
processes: a ``kill -9`` mid-file then a resume, two concurrent syncs, ``--watch``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from store.db.engine import read_transaction
from store.db.schema import entries, sessions
from store.interchange import syncing
from store.interchange.importing import ImportConflict, import_file
from store.interchange.syncing import import_paths
from store.session_store import SessionStore
from tests.interchange.test_oddities import HEADER, entry
from tests.interchange.test_round_trip import table_rows
from tests.oracle_support import load_fixture_cases

FIXTURES = {c.name: c.source_path for c in load_fixture_cases() if c.kind != "corpus"}
GROWN = ["small-seed1-0", "small-seed2-0", "medium-seed1-0", "edge-duplicate-ids", "edge-dup-id-tree-cycle",
         "edge-parent-cycle", "edge-self-parent", "edge-missing-parent", "edge-two-headers",
         "edge-non-object-lines-truthy", "edge-malformed-middle", "edge-crlf"]


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def cli(db: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "store.cli", "--db", db, *args]


@pytest.mark.parametrize("name", GROWN)
def test_a_grown_file_is_read_from_the_stored_offset(tmp_path: Path, name: str) -> None:
    """Import the first k lines, let the file grow to all of them: the store then equals a
    store that imported the whole file at once (rows, derived columns, session row)."""
    full = lines_of(FIXTURES[name])
    with SessionStore.connect(f"sqlite:///{tmp_path / 'whole.db'}") as whole:
        import_file(whole, FIXTURES[name])
        expected = table_rows(whole)
    for k in sorted({1, 2, len(full) // 2, len(full) - 1}):
        path = tmp_path / f"{name}-{k}.jsonl"
        path.write_bytes(b"".join(full[:k]))
        with SessionStore.connect(f"sqlite:///{tmp_path / f'grown{k}.db'}") as store:
            first = import_file(store, path)
            version = _row_version(store, first.session_id)
            path.write_bytes(b"".join(full))
            grown = import_file(store, path)
            assert first.status == "imported" and grown.status == "appended", k
            assert grown.bytes == len(b"".join(full[k:])) and grown.lines == len(full) - k
            assert table_rows(store) == expected, (name, k)
            assert _row_version(store, grown.session_id) == version + 1  # managers open on it see the change
            assert b"".join(store.iter_export(grown.session_id)) == b"".join(full)
            assert import_file(store, path).status == "unchanged"


def _row_version(store: SessionStore, session_id: str) -> int:
    with read_transaction(store.engine) as conn:
        return conn.execute(select(sessions.c.row_version).where(sessions.c.session_id == session_id)).scalar_one()


def test_appended_duplicate_ids_correct_earlier_rows(store: SessionStore, tmp_path: Path) -> None:
    """a <- b <- c stored; the file then gets a second "aaaaaaaa" (under c) and d under it: Pi's
    lookup of a now ends at the new row, so b hangs below it — a cycle b -> a' -> c -> b, cut at
    b — and the first a is superseded."""
    path = tmp_path / "s.jsonl"
    stored = HEADER + b"\n" + entry("aaaaaaaa", None) + b"\n" + entry("bbbbbbbb", "aaaaaaaa") + b"\n" + \
        entry("cccccccc", "bbbbbbbb") + b"\n"
    path.write_bytes(stored)
    import_file(store, path)
    sm = store.open(json.loads(HEADER)["id"])
    assert sm.get_branch_ids() == ["aaaaaaaa", "bbbbbbbb", "cccccccc"]
    path.write_bytes(stored + entry("aaaaaaaa", "cccccccc") + b"\n" + entry("dddddddd", "aaaaaaaa") + b"\n")
    report = import_file(store, path)
    assert report.status == "appended" and report.lines == 2
    assert any(":2: duplicate id 'aaaaaaaa'" in w for w in report.warnings)
    assert any(":3: parent cycle through 3 entries" in w for w in report.warnings)
    sm = store.open(json.loads(HEADER)["id"])
    assert sm.get_leaf_id() == "dddddddd"
    assert sm.get_branch_ids() == ["bbbbbbbb", "cccccccc", "aaaaaaaa", "dddddddd"]
    assert [e["id"] for e in sm.get_children("aaaaaaaa")] == ["bbbbbbbb", "dddddddd"]  # by parentId text, as Pi
    with SessionStore.connect(f"sqlite:///{tmp_path / 'whole.db'}") as whole:
        import_file(whole, path)
        assert interchange_rows(store) == interchange_rows(whole)  # as if the file had been imported whole


def interchange_rows(store: SessionStore) -> list[tuple]:
    """The stored lines and their derived tree columns, comparable across engines."""
    c = entries.c
    with read_transaction(store.engine) as conn:
        return [tuple(int(v) if isinstance(v, bool) else v for v in row) for row in conn.execute(
            select(c.seq, c.kind, c.entry_id, c.parent_id, c.line, c.raw, c.eol, c.parent_seq, c.depth, c.run_start,
                   c.compaction_seq, c.thinking_seq, c.model_seq, c.superseded).order_by(c.seq))]


def test_changes_that_are_not_appends(store: SessionStore, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    original = FIXTURES["small-seed3-0"].read_bytes()
    path.write_bytes(original)
    first = import_file(store, path)
    edited = original.replace(b'"role":"user"', b'"role":"USER"', 1)
    for changed, words in ((edited, "differ from the"), (original[: len(original) // 2] + b"x\n", "fewer than")):
        path.write_bytes(changed)
        with pytest.raises(ImportConflict, match=words):
            import_file(store, path)
        assert b"".join(store.iter_export(first.session_id)) == original  # nothing changed
    path.write_bytes(original[: len(original) // 3])  # an older copy: the store holds all of it
    assert import_file(store, path).status == "unchanged"
    path.write_bytes(edited)
    replaced = import_file(store, path, replace=True)
    assert replaced.status == "replaced" and replaced.revision == 3
    assert b"".join(store.iter_export(first.session_id)) == edited
    assert len(store.list_all()) == 1


def test_another_file_with_the_same_session_id_is_a_conflict_that_names_the_stored_file(
        store: SessionStore, tmp_path: Path) -> None:
    original = FIXTURES["small-seed3-0"].read_bytes()
    (tmp_path / "a.jsonl").write_bytes(original)
    (tmp_path / "b.jsonl").write_bytes(original.replace(b'"role":"user"', b'"role":"USER"', 1))
    import_file(store, tmp_path / "a.jsonl")
    with pytest.raises(ImportConflict, match=r"stored from another file, .*a\.jsonl, and this one does not"):
        import_file(store, tmp_path / "b.jsonl")


def test_a_file_pi_migrated_is_a_conflict(store: SessionStore, tmp_path: Path) -> None:
    case = next(c for c in load_fixture_cases(("legacy",)) if c.name == "legacy-v1")
    path = tmp_path / "v1.jsonl"
    path.write_bytes(case.source_path.read_bytes())
    import_file(store, path)
    path.write_text(case.describe["fileAfterOpen"]["content"], encoding="utf-8")  # Pi's rewrite on open
    with pytest.raises(ImportConflict, match="Pi migrates a v1 file to v3"):
        import_file(store, path)


def test_an_unfinished_last_line_is_stored_again_whole(store: SessionStore, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    data = FIXTURES["small-seed4-0"].read_bytes()
    cut = data.rindex(b"\n", 0, len(data) - 1) + 20  # in the middle of the last line
    path.write_bytes(data[:cut])
    first = import_file(store, path)
    assert any("no newline at the end" in w for w in first.warnings)
    path.write_bytes(data)
    assert import_file(store, path).status == "rebuilt"
    assert b"".join(store.iter_export(first.session_id)) == data
    assert store.open(first.session_id).get_leaf_id() == json.loads(data.splitlines()[-1])["id"]


def test_sync_folder_is_idempotent_and_counts(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    for name in ("small-seed5-0", "small-seed6-0", "edge-empty"):
        target = folder / "--w--" / f"{name}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(FIXTURES[name].read_bytes())
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        assert [r.status for r in store.import_path(folder, keep_non_sessions=True)] == ["imported"] * 3
        assert [r.status for r in import_paths(store, [folder, folder / "--w--" / "edge-empty.jsonl"],
                                               keep_non_sessions=True)] == [
            "unchanged"] * 3  # each file once


# ---------------------------------------------------------------------------------------------
# real processes


def _big_session(path: Path, entries: int) -> None:
    """A linear session of ~1 KB entries (the kill test needs a file that takes a while)."""
    with path.open("wb") as out:
        out.write(HEADER.replace(b"0000000a", b"0000000b") + b"\n")
        parent = None
        for index in range(entries):
            entry_id = f"{index:08x}"
            out.write(entry(entry_id, parent, message={"role": "user", "content": "x" * 1000,
                                                       "timestamp": index}) + b"\n")
            parent = entry_id


def test_kill_9_mid_file_then_resume(tmp_path: Path) -> None:
    folder = tmp_path / "sessions" / "--w--"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_bytes(FIXTURES["small-seed7-0"].read_bytes())
    _big_session(folder / "b.jsonl", 6000)
    (folder / "c.jsonl").write_bytes(FIXTURES["small-seed8-0"].read_bytes())
    db = f"sqlite:///{tmp_path / 's.db'}"
    size = (folder / "b.jsonl").stat().st_size
    sync = subprocess.Popen(cli(db, "sync", str(tmp_path / "sessions"), "--json", "--progress", "json"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed_at = None
    before_b = (folder / "a.jsonl").stat().st_size  # progress counts the bytes of all files
    assert sync.stderr is not None
    for line in sync.stderr:
        event = json.loads(line).get("progress", {}) if line.startswith("{") else {}
        if event.get("path", "").endswith("b.jsonl") and 0 < event["bytes"] - before_b < size // 2:
            os.kill(sync.pid, signal.SIGKILL)  # b is half read: its rows so far are in an open transaction
            killed_at = event["bytes"] - before_b
            break
    sync.wait(timeout=60)
    assert killed_at is not None and sync.returncode == -signal.SIGKILL
    with SessionStore.connect(db) as store:  # nothing of b (nor c): a alone, whole
        assert [s.id for s in store.list_all()] == [json.loads(lines_of(folder / "a.jsonl")[0])["id"]]
    resumed = subprocess.run(cli(db, "sync", str(tmp_path / "sessions"), "--json"), capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    *files, summary = map(json.loads, resumed.stdout.splitlines())
    assert [f["status"] for f in files] == ["unchanged", "imported", "imported"]
    assert summary["summary"]["sessions"] == 2
    with SessionStore.connect(db) as store:
        for report in files:
            assert b"".join(store.iter_export(report["sessionId"])) == Path(report["path"]).read_bytes()


def test_two_concurrent_syncs_of_one_folder(db_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    names = [n for n in FIXTURES if n.startswith("small-seed")][:16]
    for name in names:
        (folder / "--w--").mkdir(parents=True, exist_ok=True)
        (folder / "--w--" / f"{name}.jsonl").write_bytes(FIXTURES[name].read_bytes())
    SessionStore.connect(db_url).close()  # the schema first (each process would race to create it)
    runs = [subprocess.Popen(cli(db_url, "sync", str(folder), "--json"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err for _, err in outputs]
    statuses: dict[str, list[str]] = {}
    for out, _ in outputs:
        for line in out.splitlines()[:-1]:
            report = json.loads(line)
            statuses.setdefault(report["path"], []).append(report["status"])
    assert len(statuses) == len(names)
    assert all(sorted(s) == ["imported", "unchanged"] for s in statuses.values()), statuses
    with SessionStore.connect(db_url) as store:
        assert len(store.list_all()) == len(names)
        for path in statuses:
            session_id = json.loads(Path(path).read_bytes().splitlines()[0])["id"]
            assert b"".join(store.iter_export(session_id)) == Path(path).read_bytes()


class _Watch:
    """``sync --watch --json`` on a folder holding the first 5 lines of a live session file."""

    def __init__(self, tmp_path: Path) -> None:
        folder = tmp_path / "sessions" / "--w--"
        folder.mkdir(parents=True)
        self.path = folder / "live.jsonl"
        self.full = lines_of(FIXTURES["small-seed9-0"])
        self.path.write_bytes(b"".join(self.full[:5]))
        self.db = str(tmp_path / "s.db")
        self.process = subprocess.Popen(
            cli(self.db, "sync", str(tmp_path / "sessions"), "--watch", "--interval", "0.1", "--json"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None

    def next_status(self) -> str:
        return json.loads(self.process.stdout.readline())["status"]

    def stop(self) -> dict:
        """Ctrl-C; the summary (the watch must end with exit 0)."""
        self.process.send_signal(signal.SIGINT)
        out, err = self.process.communicate(timeout=60)
        assert self.process.returncode == 0, err
        return json.loads(out.splitlines()[-1])["summary"]


def test_watch_follows_a_live_folder(tmp_path: Path) -> None:
    watch = _Watch(tmp_path)
    path, full, db = watch.path, watch.full, f"sqlite:///{watch.db}"
    try:
        assert watch.next_status() == "imported"
        with path.open("ab") as out:  # Pi appends lines
            out.write(b"".join(full[5:]))
        assert watch.next_status() == "appended"
    finally:
        summary = watch.stop()
    assert (summary["files"], summary["statuses"]) == (1, {"appended": 1})  # one file, by its last outcome
    assert summary["bytes"] == len(b"".join(full)) and summary["sessions"] == 1  # what each import read
    with SessionStore.connect(db) as store:
        session_id = json.loads(full[0])["id"]
        assert b"".join(store.iter_export(session_id)) == b"".join(full)


def test_watch_counts_each_file_by_its_last_outcome(tmp_path: Path) -> None:
    """A file imported, rewritten (a conflict), settled by ``import --prefer file`` in another
    process, then appended to: the summary counted events, "3 files (1 appended, 1 conflict,
    1 imported)", and the watch ended with exit 1 for one file whose last outcome was fine."""
    watch = _Watch(tmp_path)
    path, full, db = watch.path, watch.full, watch.db
    try:
        assert watch.next_status() == "imported"
        rewritten = full[:4] + full[5:7]  # line 5 left out: not what is stored, nor its start
        path.write_bytes(b"".join(rewritten))
        assert watch.next_status() == "conflict"
        settled = subprocess.run(cli(db, "import", "--prefer", "file", str(path), "--json"), capture_output=True,
                                 text=True, timeout=120)
        assert json.loads(settled.stdout.splitlines()[0])["status"] == "replaced", settled.stderr
        with path.open("ab") as out:  # Pi appends lines
            out.write(b"".join(full[7:]))
        assert watch.next_status() == "appended"
    finally:
        summary = watch.stop()
    assert (summary["files"], summary["statuses"], summary["failed"]) == (1, {"appended": 1}, 0)
    with SessionStore.connect(f"sqlite:///{db}") as store:
        assert b"".join(store.iter_export(json.loads(full[0])["id"])) == b"".join(rewritten + full[7:])


def test_watch_forgets_a_conflict_whose_file_is_gone(tmp_path: Path) -> None:
    """A file rewritten (a conflict), then deleted (Pi deletes sessions): the watch ended with
    exit 1 and "1 conflict" for a file that was no more."""
    watch = _Watch(tmp_path)
    other = watch.path.with_name("other.jsonl")
    try:
        assert watch.next_status() == "imported"
        watch.path.write_bytes(b"".join(watch.full[:4] + watch.full[5:7]))  # not what is stored, nor its start
        assert watch.next_status() == "conflict"
        watch.path.unlink()
        other.write_bytes(FIXTURES["small-seed5-0"].read_bytes())  # a later look has seen the folder without it
        assert watch.next_status() == "imported"
    finally:
        summary = watch.stop()
    assert (summary["files"], summary["statuses"], summary["failed"]) == (1, {"imported": 1}, 0)


def test_watch_imports_a_claimed_sessions_lines_once_the_claim_ends(tmp_path: Path) -> None:
    """A file that grew while a writer held a claim on its session is a conflict that may pass:
    the watch looks at it again each round (it used to mark it seen until the file changed
    again), tells it once, and appends the lines once the claim has expired."""
    folder = tmp_path / "sessions" / "--w--"
    folder.mkdir(parents=True)
    path = folder / "live.jsonl"
    full = lines_of(FIXTURES["small-seed9-0"])
    path.write_bytes(b"".join(full[:5]))
    now = [1_767_225_600_000.0]
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}", clock=lambda: now[0]) as store:
        session_id = import_file(store, path).session_id
        store.claim(session_id, "host-a", ttl_ms=60_000)
        path.write_bytes(b"".join(full))  # Pi appends lines while host-a holds the session
        reports: list = []
        rounds = [0]

        def after_round() -> None:
            rounds[0] += 1
            if rounds[0] == 3:
                now[0] += 120_000  # the claim expires

        syncing.watch(store, tmp_path / "sessions", interval=0.01, on_report=reports.append,
                      stop=lambda: rounds[0] >= 5, after_round=after_round)
        assert [(r.status, r.retry) for r in reports] == [("conflict", True), ("appended", False)]
        assert "claimed by 'host-a'" in reports[0].error
        assert b"".join(store.iter_export(session_id)) == b"".join(full)


def test_a_folder_that_disappears_while_it_is_walked_is_passed_over(tmp_path: Path) -> None:
    """sync --watch ended ("Error: No such file or directory") when a project folder was deleted
    while a round looked for session files: Path.rglob raises for a folder that vanishes."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.jsonl").write_bytes(b"")
    (tmp_path / "z" / "deep").mkdir(parents=True)
    (tmp_path / "z" / "deep" / "y.jsonl").write_bytes(b"")
    walking = syncing._jsonl_below(tmp_path, None)
    first = next(walking)  # a's file: the walk has not reached z yet
    shutil.rmtree(tmp_path / "z")
    assert [first, *walking] == [tmp_path / "a" / "x.jsonl"]


def test_project_folders_that_are_symbolic_links_are_imported_once(tmp_path: Path) -> None:
    """Pi's ``SessionManager.listAll()`` lists a project folder that is a symbolic link; os.walk
    did not follow it: ``import``/``sync`` skipped its sessions without a word (``--watch`` never
    saw them). A link back up (``loop -> ..``) or to a folder walked already adds nothing."""
    sessions = tmp_path / "agent" / "sessions"
    (sessions / "--a--").mkdir(parents=True)
    (tmp_path / "ext" / "--b--").mkdir(parents=True)
    shutil.copy(FIXTURES["small-seed1-0"], sessions / "--a--" / "x.jsonl")
    shutil.copy(FIXTURES["small-seed2-0"], tmp_path / "ext" / "--b--" / "y.jsonl")
    (sessions / "--b--").symlink_to(Path("..", "..", "ext", "--b--"))
    (tmp_path / "ext" / "--b--" / "loop").symlink_to("..")
    (sessions / "--a--" / "again").symlink_to(Path("..", "--b--"))
    (sessions / "--c--").symlink_to("--a--")
    (sessions / "--d--").symlink_to("missing")  # a link to nothing: nothing to list
    assert syncing.session_files([sessions]) == [sessions / "--a--" / "x.jsonl", sessions / "--b--" / "y.jsonl"]
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        reports = store.import_path(sessions)
        assert [(r.status, r.path) for r in reports] == [("imported", str(sessions / "--a--" / "x.jsonl")),
                                                         ("imported", str(sessions / "--b--" / "y.jsonl"))]


def test_a_file_deleted_before_it_is_read_is_passed_over(db_url: str, tmp_path: Path) -> None:
    """Pi deletes session files itself; one deleted between the folder's listing and its import
    was a failure ("cannot read: No such file or directory", exit 1) where a folder that vanished
    is passed over. A file named itself that is not there is still a failure."""
    folder = tmp_path / "sessions" / "--a--"
    folder.mkdir(parents=True)
    names = ["small-seed1-0", "small-seed2-0", "small-seed3-0"]
    for name in names:
        shutil.copy(FIXTURES[name], folder / f"{name}.jsonl")
    deleted = folder / "small-seed2-0.jsonl"

    def on_file(index: int, path: Path) -> None:
        if path == deleted:
            path.unlink()  # as Pi's session selector does, just before it is opened

    with SessionStore.connect(db_url) as store:
        reports = list(import_paths(store, [tmp_path / "sessions"], on_file=on_file))
        assert [(r.status, r.path) for r in reports] == [("imported", str(folder / f"{name}.jsonl"))
                                                         for name in names if name != "small-seed2-0"]
        (named,) = store.import_path(deleted)
        assert named.status == "failed" and "No such file or directory" in named.error


def test_watch_forgets_a_file_it_was_retrying_once_it_is_gone(shared_tmp: Path) -> None:
    """An unreadable file (failed, tried again) and one Pi is still writing (busy), both then
    deleted: the watch's summary still counted them ("1 busy, 1 failed", exit 1)."""
    folder = shared_tmp / "sessions" / "--a--"
    folder.mkdir(parents=True)
    for inner in (folder.parent, folder):
        inner.chmod(0o777)
    unreadable, busy, later = (folder / f"{name}.jsonl" for name in ("a", "b", "c"))
    shutil.copy(FIXTURES["small-seed1-0"], unreadable)
    unreadable.chmod(0)
    busy.write_bytes(FIXTURES["small-seed2-0"].read_bytes().rstrip(b"\n"))  # no final newline yet
    soon = time.time() + 3600
    os.utime(busy, (soon, soon))  # written "just now" however slowly the watch starts
    watcher = _watch_as_nobody(shared_tmp, folder.parent)
    try:
        told = [json.loads(watcher.stdout.readline()) for _ in range(2)]
        assert [(r["status"], r["path"]) for r in told] == [("failed", str(unreadable)), ("busy", str(busy))]
        unreadable.unlink()
        busy.unlink()
        shutil.copy(FIXTURES["small-seed3-0"], shared_tmp / "c.jsonl")
        os.replace(shared_tmp / "c.jsonl", later)  # whole at once; its import: a round that saw the others gone
        assert json.loads(watcher.stdout.readline())["status"] == "imported"
    finally:
        watcher.send_signal(signal.SIGINT)
        out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["summary"]["statuses"] == {"imported": 1}


def _as_nobody(command: list[str]) -> list[str]:
    """``command`` as a user whom file modes bind (root reads a folder of mode 000 all the same)."""
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a folder cannot be made unreadable to the test")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]


def _watch_as_nobody(shared_tmp: Path, sessions: Path) -> subprocess.Popen:
    """``sync --watch --json`` of ``sessions`` as :func:`_as_nobody`, its store in ``shared_tmp``."""
    watcher = subprocess.Popen(_as_nobody(cli(str(shared_tmp / "w.db"), "sync", str(sessions), "--watch",
                                              "--interval", "0.1", "--json")),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "HOME": str(shared_tmp)})
    assert watcher.stdout is not None
    return watcher


@pytest.mark.parametrize(("mode", "command"), [(0, "sync"), (0o644, "import"), (0o644, "sync")])
def test_a_folder_that_cannot_be_read_is_a_failure_that_names_it(shared_tmp: Path, mode: int, command: str) -> None:
    """Mode 000: os.walk dropped it without a word (exit 0, "1 file (1 imported)", its sessions
    missing). Mode r-- (no x): its names are listed, but Python 3.11's ``Path.is_file()`` raised
    PermissionError on each, which ended the whole run ("Error: Permission denied", exit 1,
    nothing imported, ``sync --watch`` gone). Either way: one failed line for the folder."""
    sessions = shared_tmp / "sessions"
    for project, name in (("--a--", "small-seed1-0"), ("--b--", "small-seed2-0")):
        (sessions / project).mkdir(parents=True)
        shutil.copy(FIXTURES[name], sessions / project / f"{name}.jsonl")
    for folder in (sessions, sessions / "--a--", sessions / "--b--"):
        folder.chmod(0o777)
    (sessions / "--b--").chmod(mode)
    done = subprocess.run(_as_nobody(cli(str(shared_tmp / "s.db"), command, str(sessions), "--json")),
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(shared_tmp)})
    assert done.returncode == 1, done.stderr
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    imported = str(sessions / "--a--" / "small-seed1-0.jsonl")
    assert [(r["status"], r["path"]) for r in reports[:-1]] == [("failed", str(sessions / "--b--")),
                                                               ("imported", imported)]
    assert "the folder could not be read" in reports[0]["error"] and reports[-1]["summary"]["failed"] == 1


def test_the_api_reports_a_file_it_cannot_look_at(shared_tmp: Path) -> None:
    """``import_path`` of a file inside a folder of mode r-- raised PermissionError (a traceback)
    from its check of which paths were named: now that file's failed report."""
    folder = shared_tmp / "closed"
    folder.mkdir()
    shutil.copy(FIXTURES["small-seed1-0"], folder / "x.jsonl")
    folder.chmod(0o644)
    code = ("import json, sys\nfrom store.session_store import SessionStore\n"
            "with SessionStore.connect(sys.argv[1]) as store:\n"
            "    print(json.dumps([r.to_json() for r in store.import_path(sys.argv[2])]))")
    done = subprocess.run(_as_nobody([sys.executable, "-c", code, f"sqlite:///{shared_tmp / 's.db'}",
                                      str(folder / "x.jsonl")]),
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(shared_tmp)})
    assert done.returncode == 0, done.stderr
    (report,) = json.loads(done.stdout)
    assert report["status"] == "failed" and "Permission denied" in report["error"], report


def test_watch_counts_a_file_once_by_its_outcome(shared_tmp: Path) -> None:
    """A file unreadable at first, imported once it could be read: the summary said "2 files
    (1 failed, 1 imported)" and the watch ended with exit 1. A folder unreadable at first and
    readable later is no failure at the end either."""
    folder = shared_tmp / "sessions" / "--a--"
    closed = shared_tmp / "sessions" / "--b--"
    folder.mkdir(parents=True)
    closed.mkdir()
    for inner in (folder.parent, folder):
        inner.chmod(0o777)
    closed.chmod(0)
    path = folder / "late.jsonl"
    shutil.copy(FIXTURES["small-seed1-0"], path)
    path.chmod(0)
    watcher = _watch_as_nobody(shared_tmp, folder.parent)
    try:
        told = [json.loads(watcher.stdout.readline()) for _ in range(2)]  # each told once, tried again
        assert [(r["status"], r["path"]) for r in told] == [("failed", str(closed)), ("failed", str(path))]
        closed.chmod(0o777)
        path.chmod(0o644)
        assert json.loads(watcher.stdout.readline())["status"] == "imported"
        time.sleep(0.5)  # the end of that round
    finally:
        watcher.send_signal(signal.SIGINT)
        out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["summary"]["statuses"] == {"imported": 1}
