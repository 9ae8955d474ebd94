"""Files that are not sessions are never stored as sessions (unless asked), and no single file —
however odd — stops an import run or ``sync --watch``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from store.interchange.syncing import import_paths, watch
from store.session_store import SessionStore
from tests.interchange.test_oddities import HEADER, SID, entry
from tests.oracle_support import load_fixture_cases

ELF = b"\x7fELF\x02\x01\x01\x00" + bytes(8) + b"\x02\x00\x3e\x00\x01\x00\x00\x00\n\x00\x10\xff\xfe"
JUNK = {
    "empty.jsonl": (b"", "an empty file"),
    "binary.jsonl": (bytes(range(256)) * 4, "no line of it is JSON"),
    "program.jsonl": (ELF, "no line of it is JSON"),
    "data.jsonl": (b'{"name":"x","value":1}\n[1,2]\n', 'line 1) is an object without a type'),
    "other-typed.jsonl": (b'\n\n{"type":"message","id":"a"}\n', 'line 3) is an object of type "message"'),
    "numeric-id.jsonl": (b'{"type":"session","id":7}\n', 'a "session" line whose id is not a string (7)'),
    "bom.jsonl": (b"\xef\xbb\xbf" + HEADER.replace(b"0000000a", b"000000b0") + b"\n", "byte order mark"),
}
SESSIONS = {  # what Pi opens: garbage before the header, a v1 header (no version), a header alone
    "garbage-first.jsonl": b"not json\n\n" + HEADER + b"\n" + entry("aaaaaaaa", None) + b"\n",
    "v1.jsonl": b'{"type":"session","id":"v1-session","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w"}\n'
                b'{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"a"}}\n',
    "falsy-first.jsonl": b"null\n0\n" + HEADER.replace(b"0000000a", b"0000000f") + b"\n",
}
SURROGATE_HEADER = HEADER.replace(b'"id":"019a0000-0000-7000-8000-00000000000a"', b'"id":"s-\\ud800"')


def _folder(tmp_path: Path, files: dict[str, bytes]) -> Path:
    folder = tmp_path / "sessions" / "--w--"
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder.parent


def test_junk_is_not_a_session_and_stores_nothing(store: SessionStore, tmp_path: Path) -> None:
    folder = _folder(tmp_path, {**{name: data for name, (data, _) in JUNK.items()}, **SESSIONS})
    reports = {Path(r.path).name: r for r in store.import_path(folder)}
    for name, (_, reason) in JUNK.items():
        report = reports[name]
        assert (report.status, report.session_id, report.imported, report.error) == ("not-session", None, False, None)
        assert report.note.startswith(f"{folder / '--w--' / name}: not a Pi session: ") and reason in report.note
    assert {name: r.status for name, r in reports.items() if name in SESSIONS} == dict.fromkeys(SESSIONS, "imported")
    assert sorted(s.id for s in store.list_all()) == sorted(r.session_id for n, r in reports.items() if n in SESSIONS)
    kept = store.import_path(folder, keep_non_sessions=True)  # asked for: stored as sessions Pi does not list
    assert sorted(r.status for r in kept) == ["imported"] * len(JUNK) + ["unchanged"] * len(SESSIONS)
    assert b"".join(store.iter_export(next(r.session_id for r in kept if r.path.endswith("program.jsonl")))) == ELF


def test_not_session_agrees_with_pi_on_every_fixture(tmp_path: Path) -> None:
    """Pi opens a file (or, for an empty one, writes a header into it) unless its first JSON line
    is not a header; found in a folder, the store refuses exactly those and the empty file."""
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        for case in load_fixture_cases(("sessions", "legacy")):
            refused = "not a valid pi session" in ((case.describe.get("openError") or {}).get("message") or "")
            folder = tmp_path / case.name
            folder.mkdir()
            shutil.copyfile(case.source_path, folder / case.source_path.name)
            report = store.import_path(folder)[0]
            assert (report.status == "not-session") == (refused or case.describe["inputBytes"] == 0), case.name


def test_a_file_named_itself_is_stored_even_when_not_a_session(store: SessionStore, tmp_path: Path) -> None:
    """Naming a file is the explicit choice: it is stored, byte for byte, with a note saying that
    Pi neither opens nor lists it; the same file found in a folder is refused."""
    folder = _folder(tmp_path, {"data.jsonl": JUNK["data.jsonl"][0]})
    [found] = store.import_path(folder)
    assert found.status == "not-session"
    [named] = store.import_path(folder / "--w--" / "data.jsonl")
    assert named.status == "imported" and "not a Pi session" in named.note
    assert b"".join(store.iter_export(named.session_id)) == JUNK["data.jsonl"][0]


def test_cli_reports_not_sessions_and_exits_0(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"empty.jsonl": b"", "data.jsonl": JUNK["data.jsonl"][0],
                                "s.jsonl": HEADER + b"\n" + entry("aaaaaaaa", None) + b"\n"})
    db = f"sqlite:///{tmp_path / 's.db'}"
    done = subprocess.run([sys.executable, "-m", "store.cli", "--db", db, "import", str(folder), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    *files, summary = map(json.loads, done.stdout.splitlines())
    assert summary["summary"]["statuses"] == {"not-session": 2, "imported": 1}
    assert all("not a Pi session" in f["note"] for f in files if f["status"] == "not-session")
    human = subprocess.run([sys.executable, "-m", "store.cli", "--db", db, "import", str(folder)],
                           capture_output=True, text=True, timeout=120)
    assert "note: " in human.stderr and "data.jsonl: not a Pi session" in human.stderr
    assert "(2 not-session, 1 unchanged)" in human.stderr
    listed = subprocess.run([sys.executable, "-m", "store.cli", "--db", db, "list", "--json"],
                            capture_output=True, text=True, timeout=120)
    assert len(json.loads(listed.stdout)) == 1


def test_a_lone_surrogate_session_id_is_stored_and_the_run_goes_on(store: SessionStore, tmp_path: Path) -> None:
    """JSON allows "\\ud800" in the header id; UTF-8 cannot encode it: the id is stored as its
    escape text, like entry ids, and looked up either way."""
    data = SURROGATE_HEADER + b"\n" + entry("aaaaaaaa", None) + b"\n"
    folder = _folder(tmp_path, {"a.jsonl": data, "b.jsonl": HEADER + b"\n" + entry("bbbbbbbb", None) + b"\n"})
    assert [(r.status, r.session_id) for r in store.import_path(folder)] == [
        ("imported", "s-\\ud800"), ("imported", SID)]
    assert store.open("s-\ud800").get_leaf_id() == "aaaaaaaa"
    assert b"".join(store.iter_export("s-\ud800")) == data
    assert [r.status for r in store.import_path(folder)] == ["unchanged"] * 2
    v1 = _folder(tmp_path / "v1", {"v1.jsonl": SESSIONS["v1.jsonl"].replace(b'"v1-session"', b'"v\\udc00"')})
    assert [r.status for r in store.import_path(v1)] == ["imported"]  # migration ids hash the id too


def test_an_unexpected_error_fails_one_file_and_watch_goes_on(store: SessionStore, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever one file raises — here the OS, made to fail for that file only — is that file's
    failed report; the run and ``sync --watch`` go on."""
    folder = _folder(tmp_path, {"a-bad.jsonl": HEADER + b"\n", "b.jsonl": SURROGATE_HEADER + b"\n"})
    real_fstat = os.fstat

    def fstat(fd: int) -> os.stat_result:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("a-bad.jsonl"):
            raise RuntimeError("the disk said no")
        return real_fstat(fd)

    monkeypatch.setattr(os, "fstat", fstat)
    reports = list(import_paths(store, [folder]))
    assert [r.status for r in reports] == ["failed", "imported"]
    assert reports[0].error == f"{folder / '--w--' / 'a-bad.jsonl'}: unexpected RuntimeError (please report it): " \
                               "the disk said no"
    seen: list[str] = []
    rounds: list[int] = []
    watch(store, folder, interval=0, on_report=lambda r: seen.append(r.status),
          stop=lambda: len(rounds) == 2, after_round=lambda: rounds.append(1))
    assert seen == ["failed", "unchanged"]  # a failed file is not retried until it changes


def test_watch_tries_again_after_a_fault_that_may_pass(store: SessionStore, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose import failed for the database or the file system (locked, unreachable,
    unreadable) was never looked at again until it changed: its lines were missing from the store
    for as long as Pi left the file alone. Such a failure is reported once and retried each round."""
    folder = _folder(tmp_path, {"a.jsonl": HEADER + b"\n" + entry("aaaaaaaa", None) + b"\n"})
    real_fstat = os.fstat
    faults = [3]  # the file cannot be read for three rounds

    def fstat(fd: int) -> os.stat_result:
        if faults[0] and os.readlink(f"/proc/self/fd/{fd}").endswith("a.jsonl"):
            faults[0] -= 1
            raise PermissionError(13, "Permission denied")
        return real_fstat(fd)

    monkeypatch.setattr(os, "fstat", fstat)
    reports: list = []
    rounds: list[int] = []
    watch(store, folder, interval=0, on_report=reports.append, stop=lambda: len(rounds) == 5,
          after_round=lambda: rounds.append(1))
    assert [(r.status, r.retry) for r in reports] == [("failed", True), ("imported", False)]
    assert str(folder / "--w--" / "a.jsonl") in reports[0].error and reports[0].to_json()["retry"] is True
    assert len(store.list_all()) == 1


def test_a_header_version_beyond_32_bits_is_stored(store: SessionStore, tmp_path: Path) -> None:
    """Found by tools/fuzz_import.py (seed 2026, case 1218, PostgreSQL): a header ``version`` of
    9007199254740993 overflowed the ``sessions.version`` INTEGER column and failed the import.
    The column leaves such a number out (NULL); the header line keeps it byte for byte."""
    data = (b'{"type":"session","version":9007199254740993,"id":"big-version","timestamp":'
            b'"2026-01-01T00:00:00.000Z","cwd":"/w"}\n' + entry("aaaaaaaa", None) + b"\n")
    path = tmp_path / "big-version.jsonl"
    path.write_bytes(data)
    [report] = store.import_path(path)
    assert report.status == "imported", report.error
    assert b"".join(store.iter_export("big-version")) == data


def test_a_fifo_named_directly_fails_at_once(store: SessionStore, tmp_path: Path) -> None:
    """Opening a FIFO for reading waits for a writer: ``import pipe.jsonl`` hung for good. It is
    not a regular file, and says so at once (a FIFO inside a folder was already skipped)."""
    from store.errors import ImportFailed

    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ImportFailed, match="not a regular file"):
        store.import_file(fifo)
    assert store.list_all() == []


# (a new file rewritten before its rows are read is read as the new file: a consistent snapshot)
@pytest.mark.parametrize(("stored", "change"), [("new", "truncated"), ("grown", "truncated"), ("grown", "rewritten")])
def test_a_file_changed_while_it_is_read_stores_nothing(store: SessionStore, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, change: str,
                                                        stored: str) -> None:
    """A file truncated or rewritten in place while it was imported was stored short (with the
    size read before: verify then called it damaged, the next sync a conflict) or as a mix of
    two files (an append reading the new part of another file; verify said identical). Such an
    import now stores nothing and says so; a watch tries it again (``retry``)."""
    from store.interchange import importing

    lines = [HEADER, *(entry(f"{n:08x}", f"{n - 1:08x}" if n else None) for n in range(40))]
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(lines[:10]) + b"\n")
    if stored == "grown":
        assert store.import_file(path).status == "imported"
        path.write_bytes(b"\n".join(lines) + b"\n")
    before = b"".join(store.iter_export(SID)) if stored == "grown" else None
    other = b"\n".join([HEADER, *(entry(f"{n:08x}", None) for n in range(100, 140))]) + b"\n"
    real_decide = importing._decide

    def decide_then_change(*args, **kwargs):  # the file changes after its size was taken
        plan = real_decide(*args, **kwargs)
        with path.open("r+b") as out:
            out.truncate(len(lines[0]) + 1) if change == "truncated" else out.write(other)
        return plan

    monkeypatch.setattr(importing, "_decide", decide_then_change)
    [report] = import_paths(store, [path])
    assert report.status == "failed" and report.retry and "rewritten or truncated while it was read" in report.error
    monkeypatch.undo()
    if stored == "new":
        assert store.list_all() == []
    else:
        assert b"".join(store.iter_export(SID)) == before
