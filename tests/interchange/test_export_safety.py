"""Exports that cannot destroy data: every file is written whole or not at all, and ``export
--all`` names stay inside the target folder, never clash and always fit the file system."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from store.errors import ExportRefused, SessionNotFound
from store.format import js_stringify
from store.interchange.exporting import NAME_MAX, export_all, pi_relative_path, write_atomically
from store.interchange.importing import import_file
from store.session_store import SessionStore
from tests.interchange.sqlite_damage import damage_page_of
from tests.interchange.test_sync import _as_nobody

PRECIOUS = b'{"precious":true}\n'
STAMP = "2026-01-02T03:04:05.678Z"


def pi_store(db: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "store.cli", "--db", db, *args], capture_output=True, text=True,
                          timeout=120, **kwargs)


def session_file(folder: Path, session_id: str, cwd: str = "/w", timestamp: str = STAMP, lines: int = 1,
                 name: str | None = None) -> Path:
    """A small Pi session file with this id, cwd and header timestamp (``lines`` messages)."""
    rows = [{"type": "session", "version": 3, "id": session_id, "timestamp": timestamp, "cwd": cwd}]
    for n in range(lines):
        rows.append({"type": "message", "id": f"{n:08x}", "parentId": f"{n - 1:08x}" if n else None,
                     "timestamp": timestamp, "message": {"role": "user", "content": f"line {n} " + "x" * 200,
                                                         "timestamp": 1}})
    path = folder / (name or f"{abs(hash(session_id))}.jsonl")
    path.write_bytes(b"".join(js_stringify(row).encode() + b"\n" for row in rows))
    return path


def leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A SQLite store holding one session ``s1`` (a file of about 200 KB), as URL and file."""
    db_file = tmp_path / "s.db"
    with SessionStore.connect(f"sqlite:///{db_file}") as store:
        import_file(store, session_file(tmp_path, "s1", lines=900))
    yield f"sqlite:///{db_file}", db_file


# ---------------------------------------------------------------------------------------------
# whole or not at all


def test_export_of_a_missing_session_leaves_the_file_alone(store: SessionStore, tmp_path: Path) -> None:
    target = tmp_path / "precious.jsonl"
    target.write_bytes(PRECIOUS)
    with pytest.raises(SessionNotFound):
        store.export_jsonl("NO_SUCH_ID", target)
    assert target.read_bytes() == PRECIOUS and leftovers(tmp_path) == []


def test_cli_export_errors_leave_the_file_alone(sqlite_db: tuple[str, Path], tmp_path: Path) -> None:
    db, db_file = sqlite_db
    target = tmp_path / "out" / "precious.jsonl"
    target.parent.mkdir()
    target.write_bytes(PRECIOUS)
    missing = pi_store(db, "export", "NO_SUCH_ID", "-o", str(target))
    assert missing.returncode == 1 and "no session 'NO_SUCH_ID'" in missing.stderr
    assert "Traceback" not in missing.stderr

    def full_disk() -> None:  # writes past 64 KiB fail with EFBIG (SIGXFSZ ignored): what a full disk does
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    full = pi_store(db, "export", "s1", "-o", str(target), "--force", preexec_fn=full_disk)
    assert full.returncode == 1 and "File too large" in full.stderr and "Traceback" not in full.stderr
    assert f"{target} is unchanged" in full.stderr
    damage_page_of(db_file, "entries", offset=0, nth=3)  # the page header: reading fails
    broken = pi_store(db, "export", "s1", "-o", str(target), "--force")
    assert broken.returncode == 1 and "malformed" in broken.stderr and "Traceback" not in broken.stderr
    assert target.read_bytes() == PRECIOUS and leftovers(tmp_path) == []


def test_cli_export_into_a_missing_folder_names_the_folder(sqlite_db: tuple[str, Path], tmp_path: Path) -> None:
    """It said "export failed (missing/dir/x.jsonl is unchanged): FileNotFoundError: ... No such
    file or directory: '.../missing/dir/.pi-store-93577615e2f5a280.tmp'": a file that does not
    exist called unchanged, and a temporary file the user never asked for named."""
    db, _ = sqlite_db
    target = tmp_path / "missing" / "dir" / "x.jsonl"
    done = pi_store(db, "export", "s1", "-o", str(target))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"folder {target.parent} does not exist" in done.stderr, done.stderr
    assert ".pi-store-" not in done.stderr and "unchanged" not in done.stderr
    assert not (tmp_path / "missing").exists()


def test_cli_export_into_a_read_only_folder_names_the_folder(shared_tmp: Path) -> None:
    """The same for a folder the user may not write in ("PermissionError: ... '.pi-store-...tmp'"):
    "cannot write in folder X", and "is unchanged" only of a file that is there."""
    database = shared_tmp / "s.db"
    with SessionStore.connect(f"sqlite:///{database}") as store:
        import_file(store, session_file(shared_tmp, "s1"))
    database.chmod(0o666)
    folder = shared_tmp / "read-only"
    folder.mkdir()
    (folder / "old.jsonl").write_bytes(PRECIOUS)
    (folder / "old.jsonl").chmod(0o666)
    folder.chmod(0o555)
    for name, existing in (("new.jsonl", False), ("old.jsonl", True)):
        target = folder / name
        done = subprocess.run(_as_nobody([sys.executable, "-m", "store.cli", "--db", str(database), "export", "s1",
                                          "-o", str(target), "--force"]),
                              capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(shared_tmp)})
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert f"cannot write in folder {folder}: Permission denied" in done.stderr, done.stderr
        assert ".pi-store-" not in done.stderr and (f"{target} is unchanged" in done.stderr) == existing
    assert sorted(p.name for p in folder.iterdir()) == ["old.jsonl"] and (folder / "old.jsonl").read_bytes() == PRECIOUS


def test_cli_export_replaces_the_file_once_complete(sqlite_db: tuple[str, Path], tmp_path: Path) -> None:
    db, _ = sqlite_db
    target = tmp_path / "precious.jsonl"
    target.write_bytes(PRECIOUS)
    target.chmod(0o640)
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    refused = pi_store(db, "export", "s1", "-o", str(link))
    assert refused.returncode == 1 and "--force" in refused.stderr and "Traceback" not in refused.stderr
    assert target.read_bytes() == PRECIOUS and leftovers(tmp_path) == []
    done = pi_store(db, "export", "s1", "-o", str(link), "--force")
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and target.read_bytes().startswith(b'{"type":"session"')
    assert target.stat().st_mode & 0o777 == 0o640 and leftovers(tmp_path) == []


def _pi_appends(path: Path, lines: int) -> bytes:
    """What Pi, pointed at an exported folder, adds to a session file: more lines after its own."""
    extra = b"".join(js_stringify({"type": "custom", "customType": "pi", "data": {"n": n}, "id": f"p{n:07d}",
                                   "parentId": None, "timestamp": STAMP}).encode() + b"\n" for n in range(lines))
    with path.open("ab") as out:
        out.write(extra)
    return path.read_bytes()


def test_export_never_cuts_back_a_file_that_holds_more(store: SessionStore, tmp_path: Path) -> None:
    """An export replaces a file that is the session as stored, or an older (shorter) export of
    it; a file that holds anything the store does not — lines Pi wrote after the export, another
    file — is refused (``ExportRefused``, the file and folder as they were) unless forced."""
    source = session_file(tmp_path, "s1", lines=30)
    import_file(store, source)
    target = tmp_path / "out.jsonl"
    assert store.export_jsonl("s1", target) == source.stat().st_size  # a new file
    assert store.export_jsonl("s1", target) == source.stat().st_size  # the same bytes again
    target.write_bytes(source.read_bytes()[:1000])  # an older export: the store has more
    store.export_jsonl("s1", target)
    assert target.read_bytes() == source.read_bytes()
    for kept in (_pi_appends(target, 3), b"x" + source.read_bytes()[1:], PRECIOUS):
        target.write_bytes(kept)
        with pytest.raises(ExportRefused) as refused:
            store.export_jsonl("s1", target)
        assert str(target) in str(refused.value) and "--force" in str(refused.value)
        assert target.read_bytes() == kept and leftovers(tmp_path) == []
    store.export_jsonl("s1", target, force=True)
    assert target.read_bytes() == source.read_bytes()


def test_export_all_leaves_files_pi_wrote_on_and_reports_them(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    with SessionStore.connect(db) as store:
        stored = session_file(tmp_path, "s1", lines=5).read_bytes()
        import_file(store, tmp_path / f"{abs(hash('s1'))}.jsonl")
        import_file(store, session_file(tmp_path, "s2", lines=5, cwd="/v"))
    out = tmp_path / "out"
    first = pi_store(db, "export", "--all", str(out))
    assert first.returncode == 0, first.stderr
    grown = next(out.rglob("*_s1.jsonl"))
    after_pi = _pi_appends(grown, 2)
    again = pi_store(db, "export", "--all", str(out))
    assert again.returncode == 1 and "Traceback" not in again.stderr + again.stdout
    assert f"failed s1 -> {grown}" in again.stdout and "--force" in again.stdout
    assert "s2 -> " in again.stdout and grown.read_bytes() == after_pi
    forced = pi_store(db, "export", "--all", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert after_pi.startswith(stored) and grown.read_bytes() == stored


def test_an_interrupted_write_leaves_the_file_alone(tmp_path: Path) -> None:
    target = tmp_path / "precious.jsonl"
    target.write_bytes(PRECIOUS)

    def interrupted() -> Iterator[bytes]:
        yield b"half of it\n" * 1000
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(target, interrupted(), force=True)
    assert target.read_bytes() == PRECIOUS and os.listdir(tmp_path) == ["precious.jsonl"]
    assert write_atomically(tmp_path / "new.jsonl", [b"a\n", b"b\n"]) == 4
    assert (tmp_path / "new.jsonl").read_bytes() == b"a\nb\n"
    assert (tmp_path / "new.jsonl").stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------------------------------------
# names below the export folder


@pytest.mark.parametrize(("session_id", "cwd"), [
    ("..", "/w"), ("../../../etc/passwd", "/w"), ("/etc/passwd", "/w"), ("a\0b", "/w"), ("a/b\\c", "/w"),
    (".hidden", "/w"), ("...", "/w"), ("s", ".."), ("s", "/"), ("s", "/x\0y/../../.."), ("s", "~"),
    ("é" * 200, "/w"), ("s", "/" + "ü" * 300), ("\ud800", "/w"),
], ids=["dotdot", "climb", "absolute", "nul", "separators", "dot", "dots", "cwd-dotdot", "cwd-root",
        "cwd-nul", "cwd-home", "long-id", "long-cwd", "lone-surrogate"])
@pytest.mark.parametrize("has_header", [True, False])
def test_names_stay_inside_the_folder_and_fit(tmp_path: Path, session_id: str, cwd: str, has_header: bool) -> None:
    relative = pi_relative_path(session_id, cwd, STAMP, has_header)
    assert not relative.is_absolute() and 1 <= len(relative.parts) <= (2 if has_header else 1)
    for part in relative.parts:
        assert part not in (".", "..") and not part.startswith(".") and "\0" not in part
        assert len(part.encode("utf-8")) <= NAME_MAX
    assert relative.name.endswith(".jsonl")
    assert relative == pi_relative_path(session_id, cwd, STAMP, has_header)  # deterministic
    written = tmp_path / "out" / relative
    written.parent.mkdir(parents=True)
    written.write_bytes(b"x")  # the file system takes it
    assert written.resolve().is_relative_to((tmp_path / "out").resolve())


def test_ordinary_names_are_pis(tmp_path: Path) -> None:
    session_id = "019a0c8e-51b0-7c3d-9f2e-3b8a1d2c4e5f"
    assert pi_relative_path(session_id, "/home/me/proj", STAMP, True) == Path(
        f"--home-me-proj--/2026-01-02T03-04-05-678Z_{session_id}.jsonl")


def test_export_all_never_maps_two_sessions_to_one_file(tmp_path: Path) -> None:
    """``a/b`` and ``a-b`` (same cwd and timestamp) and ``A-B`` (same name on a case-insensitive
    file system) get three files; the one whose id needed no change keeps the plain name."""
    db = f"sqlite:///{tmp_path / 's.db'}"
    with SessionStore.connect(db) as store:
        for session_id in ("a/b", "a-b", "A-B", "x" * 300):
            import_file(store, session_file(tmp_path, session_id))
    runs = [pi_store(db, "export", "--all", str(tmp_path / name), "--json") for name in ("out", "again")]
    assert all(run.returncode == 0 for run in runs), runs[0].stderr
    *files, summary = [json.loads(line) for line in runs[0].stdout.splitlines()]
    assert summary == {"summary": {"files": 4, "failed": 0, "renamed": 3}}
    paths = {item["sessionId"]: Path(item["path"]) for item in files}
    assert len({str(p).casefold() for p in paths.values()}) == 4
    assert paths["a-b"].name == "2026-01-02T03-04-05-678Z_a-b.jsonl"
    assert "a-b" in " ".join(next(i for i in files if i["sessionId"] == "a/b")["notes"])
    for session_id, path in paths.items():
        assert json.loads(path.read_bytes().splitlines()[0])["id"] == session_id
        assert len(path.name.encode()) <= NAME_MAX
    again = {json.loads(line).get("sessionId"): json.loads(line).get("path") for line in runs[1].stdout.splitlines()}
    assert {sid: Path(p).relative_to(tmp_path / "again") for sid, p in again.items() if sid} == {
        sid: p.relative_to(tmp_path / "out") for sid, p in paths.items()}
    text_run = pi_store(db, "export", "--all", str(tmp_path / "text"))
    assert text_run.stdout.count("note: ") == 3 and "4 files written, 0 failed, 3 renamed" in text_run.stderr


def test_export_all_reports_a_failing_session_and_goes_on(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    with SessionStore.connect(db) as store:
        for session_id in ("one", "two", "three"):
            import_file(store, session_file(tmp_path, session_id))
        blocked = tmp_path / "out" / pi_relative_path("two", "/w", STAMP, True)
    blocked.mkdir(parents=True)  # a folder where the file should go: that session cannot be written
    run = pi_store(db, "export", "--all", str(tmp_path / "out"))
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "failed two -> " in run.stdout and "IsADirectoryError" in run.stdout
    assert "2 files written, 1 failed" in run.stderr
    assert sorted(p.name.split("_")[-1] for p in (tmp_path / "out").rglob("*.jsonl") if p.is_file()) == [
        "one.jsonl", "three.jsonl"]
    assert leftovers(tmp_path / "out") == []


def test_export_all_reports_instead_of_raising(store: SessionStore, tmp_path: Path) -> None:
    sm = store.create("/home/me/proj")
    sm.append_message({"role": "user", "content": "hello", "timestamp": 1})
    (tmp_path / "out").write_bytes(PRECIOUS)  # the folder is a file: nothing can be written
    done = export_all(store, tmp_path / "out")
    assert [d.error is not None for d in done] == [True] and (tmp_path / "out").read_bytes() == PRECIOUS


def test_a_write_that_fails_midway_ends_the_reading_it_drives(tmp_path: Path) -> None:
    """A failed write (a full disk, Ctrl-C) stops the export between two chunks: the generator
    reading them is closed there, inside the read transaction that feeds it, not when the
    garbage collector gets to it after the database closed (which printed a traceback from its
    cursor's ``close()`` on Ctrl-C during ``export --all``). The target is left as it was."""
    ended: list[bool] = []

    def chunks():
        try:
            yield "not bytes"  # the write of this chunk fails
            yield b"never read"
        finally:
            ended.append(True)

    target = tmp_path / "out.jsonl"
    target.write_bytes(b"before\n")
    with pytest.raises(TypeError) as raised:
        write_atomically(target, chunks(), force=True)
    assert ended == [True] and raised.value is not None  # the failure is still held: closed all the same
    assert target.read_bytes() == b"before\n" and [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]
