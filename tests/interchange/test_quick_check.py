"""The quick check of import and sync (migration 0019): a file whose stat (device, inode, size,
modification and change times) is the one recorded when its bytes were read is ``unchanged``
without being read or looked up one by one; every other file is read and compared as before,
and ``checksum`` reads them all. Reports are the same either way."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, event, select

from store.cli.app import main
from store.db.engine import read_transaction
from store.db.schema import imports
from store.interchange import importing
from store.interchange.syncing import import_paths
from store.session_store import SessionStore
from tests.oracle_support import load_fixture_cases

FIXTURES = {c.name: c.source_path for c in load_fixture_cases() if c.kind != "corpus"}
NAMES = ("small-seed5-0", "small-seed6-0", "medium-seed1-0", "legacy-v1")


@contextmanager
def statements() -> Iterator[list[str]]:
    """Every SQL statement any engine of this process runs meanwhile."""
    seen: list[str] = []

    def note(conn, cursor, statement, parameters, context, executemany) -> None:
        seen.append(statement)

    event.listen(Engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", note)


def looked_up(seen: list[str]) -> int:
    """Statements that look a session up by its id: one per file the import reads."""
    return sum("session_ids" in statement for statement in seen)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name in NAMES:
        target = tmp_path / "sessions" / "--w--" / f"{name}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(FIXTURES[name], target)
    return tmp_path / "sessions"


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files count as still at once (else only files unchanged for 2 s get a recorded stat)."""
    monkeypatch.setattr(importing, "STABLE_NS", -1)


def reports(store: SessionStore, folder: Path, **options: bool) -> list[dict]:
    return [report.to_json() for report in import_paths(store, [folder], **options)]


@pytest.mark.usefixtures("settled")
def test_an_unchanged_folder_is_answered_without_reading_its_files(store: SessionStore, folder: Path) -> None:
    assert {r["status"] for r in reports(store, folder)} == {"imported"}
    diverged = store.open(store.list_all()[0].id)  # the store writes to one: its report carries a note
    diverged.append_message({"role": "user", "content": "from the API", "timestamp": 1})
    with statements() as slow:
        read = reports(store, folder, checksum=True)
    with statements() as quick:
        trusted = reports(store, folder)
    assert trusted == read
    assert [r["status"] for r in read] == ["unchanged"] * len(NAMES)
    assert sum(r.get("note", "").startswith("the store changed this session") for r in read) == 1
    assert looked_up(slow) == len(NAMES) and looked_up(quick) == 0
    assert sum("imports" in statement for statement in quick) == 1  # one query for the whole folder


@pytest.mark.usefixtures("settled")
def test_a_file_whose_stat_changed_is_read_again(store: SessionStore, folder: Path) -> None:
    reports(store, folder)
    grown, touched, rewritten = (folder / "--w--" / f"{name}.jsonl" for name in NAMES[:3])
    with grown.open("ab") as out:
        out.write(FIXTURES["small-seed5-0"].read_bytes().splitlines(keepends=True)[-1])
    info = touched.stat()
    os.utime(touched, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    data, before = rewritten.read_bytes(), rewritten.stat()
    rewritten.write_bytes(data.replace(b'"role":"user"', b'"role":"USER"', 1))  # the same size,
    os.utime(rewritten, ns=(before.st_atime_ns, before.st_mtime_ns))  # the same times but its change time
    with statements() as seen:
        statuses = {Path(r["path"]).stem: (r["status"], r["revision"]) for r in reports(store, folder)}
    assert statuses == {"small-seed5-0": ("appended", 2), "small-seed6-0": ("unchanged", 1),
                        "medium-seed1-0": ("conflict", 0), "legacy-v1": ("unchanged", 1)}
    assert looked_up(seen) == 3
    rewritten.write_bytes(data)  # back as stored: its new stat is recorded too
    with statements() as again:
        assert {r["status"] for r in reports(store, folder)} == {"unchanged"}
    assert looked_up(again) == 1  # only the file put back was read (the touched one's stat was recorded)
    with statements() as last:
        assert {r["status"] for r in reports(store, folder)} == {"unchanged"}
    assert looked_up(last) == 0


@pytest.mark.usefixtures("settled")
def test_a_path_whose_session_now_holds_another_files_bytes_is_read(store: SessionStore, folder: Path,
                                                                    tmp_path: Path) -> None:
    reports(store, folder)
    original = folder / "--w--" / "small-seed6-0.jsonl"
    other = tmp_path / "other.jsonl"
    other.write_bytes(original.read_bytes().replace(b'"role":"user"', b'"role":"USER"', 1))
    assert store.import_file(other, prefer="file").status == "replaced"
    with statements() as seen:
        statuses = {Path(r["path"]).stem: r["status"] for r in reports(store, folder)}
    assert statuses["small-seed6-0"] == "conflict" and looked_up(seen) == 1


def test_a_file_changed_just_before_it_was_read_gets_no_stat(store: SessionStore, folder: Path) -> None:
    """The files were written a moment ago: a write in the same clock tick as the read would
    leave the stat unchanged, so none is recorded and the next run reads them all."""
    reports(store, folder)
    with read_transaction(store.engine) as conn:
        assert conn.execute(select(imports.c.source_stat)).scalars().all() == [None] * len(NAMES)
    with statements() as seen:
        assert {r["status"] for r in reports(store, folder)} == {"unchanged"}
    assert looked_up(seen) == len(NAMES)


@pytest.mark.usefixtures("settled")
@pytest.mark.parametrize("command", ["import", "sync"])
def test_the_cli_checksum_option_reads_every_file(tmp_path: Path, folder: Path, command: str) -> None:
    db = str(tmp_path / "s.db")
    runner = CliRunner()
    assert runner.invoke(main, ["--db", db, command, str(folder)]).exit_code == 0
    for options, reads in (([], 0), (["--checksum"], len(NAMES))):
        with statements() as seen:
            result = runner.invoke(main, ["--db", db, command, *options, str(folder), "--json"])
        assert result.exit_code == 0, result.output
        assert result.output.count('"status":"unchanged"') == len(NAMES)
        assert looked_up(seen) == reads


@pytest.mark.usefixtures("settled")
def test_the_quick_check_asks_for_the_files_at_hand_in_batches(store: SessionStore, folder: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the records of the files being imported are read (a store's other files are not),
    ``KNOWN_BATCH`` paths a query."""
    reports(store, folder)
    monkeypatch.setattr(importing, "KNOWN_BATCH", 3)
    with statements() as seen:
        assert {r["status"] for r in reports(store, folder)} == {"unchanged"}
    assert looked_up(seen) == 0 and sum("imports" in statement for statement in seen) == 2  # 4 files, 3 a query
    one = folder / "--w--" / f"{NAMES[0]}.jsonl"
    with read_transaction(store.engine) as conn:
        assert list(importing.known_files(conn, [str(one)])) == [(str(one), importing.file_stat(one.stat()))]
