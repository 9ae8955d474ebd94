"""Every oddity of a session file is stored byte for byte and reported as a warning naming the file,
the line and the reason; ``strict`` refuses such a file and stores nothing of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from store.db.engine import read_transaction
from store.db.schema import entries, imports, sessions
from store.interchange.importing import import_file
from store.interchange.reading import StrictRefusal
from store.session_store import SessionStore

SID = "019a0000-0000-7000-8000-00000000000a"
HEADER = json.dumps({"type": "session", "version": 3, "id": SID, "timestamp": "2026-01-01T00:00:00.000Z",
                     "cwd": "/w"}, separators=(",", ":")).encode()


def entry(entry_id: str, parent: str | None, **more: object) -> bytes:
    value = {"type": "message", "id": entry_id, "parentId": parent, "timestamp": "2026-01-01T00:00:01.000Z",
             "message": {"role": "user", "content": "hi", "timestamp": 1}}
    value.update(more)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


A, B, C = entry("aaaaaaaa", None), entry("bbbbbbbb", "aaaaaaaa"), entry("cccccccc", "bbbbbbbb")

# name: (file bytes, the line warned about, words of the reason)
ODDITIES: dict[str, tuple[bytes, int, str]] = {
    "malformed JSON": (HEADER + b"\n" + A + b"\n" + b'{"type":"message","id":\n' + B + b"\n", 3, "not JSON"),
    "glued JSON objects": (HEADER + b"\n" + A + B + b"\n", 2, "two JSON values glued together"),
    "blank line": (HEADER + b"\n\n" + A + b"\n", 2, "empty line"),
    "whitespace line": (HEADER + b"\n \t \n" + A + b"\n", 2, "blank line"),
    "CRLF": (HEADER + b"\r\n" + A + b"\r\n", 1, "CRLF line endings (2 lines"),
    "no final newline": (HEADER + b"\n" + A, 2, "no newline at the end"),
    "BOM": (b"\xef\xbb\xbf" + HEADER + b"\n" + A + b"\n", 1, "byte order mark"),
    "invalid UTF-8": (HEADER + b"\n" + A.replace(b'"hi"', b'"h\xff\xfei"') + b"\n", 2, "invalid UTF-8"),
    "NUL byte": (HEADER + b"\n" + A + b"\n" + B.replace(b'"hi"', b'"h\x00i"') + b"\n", 3, "not JSON"),
    "non-object JSON": (HEADER + b"\n" + A + b"\n[1,2]\n", 3, "not an object"),
    "falsy JSON": (HEADER + b"\n" + A + b"\nnull\n", 3, "falsy"),
    "second header": (HEADER + b"\n" + A + b"\n" + HEADER + b"\n", 3, "second session header"),
    "duplicate id": (HEADER + b"\n" + A + b"\n" + B + b"\n" + entry("aaaaaaaa", "bbbbbbbb") + b"\n", 2,
                     "duplicate id 'aaaaaaaa'"),
    "parent cycle": (HEADER + b"\n" + entry("aaaaaaaa", "bbbbbbbb") + b"\n" + B + b"\n", 2, "parent cycle"),
    "self parent": (HEADER + b"\n" + entry("aaaaaaaa", "aaaaaaaa") + b"\n", 2, "parent cycle through 1"),
    "missing parent": (HEADER + b"\n" + A + b"\n" + entry("bbbbbbbb", "ffffffff") + b"\n", 3, "names no entry"),
    "unknown type": (HEADER + b"\n" + A + b'\n{"type":"future","id":"dddddddd","parentId":"aaaaaaaa"}\n', 3,
                     "unknown entry type"),
    "unknown field": (HEADER + b"\n" + entry("aaaaaaaa", None, mood="ok") + b"\n", 2, "unknown field 'mood'"),
    "unknown role": (HEADER + b"\n" + entry("aaaaaaaa", None, message={"role": "alien", "content": ""}) + b"\n", 2,
                     "unknown message role"),
    "duplicate keys": (HEADER + b"\n" + A[:-1] + b',"type":"message"}\n', 2, "duplicate key 'type'"),
    "not a session": (A + b"\n" + HEADER + b"\n", 1, "not a session header"),
}


@pytest.mark.parametrize("name", ODDITIES)
def test_each_oddity_is_kept_and_reported(tmp_path: Path, name: str) -> None:
    data, line, reason = ODDITIES[name]
    path = tmp_path / "odd.jsonl"
    path.write_bytes(data)
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        report = import_file(store, path, keep_non_sessions=True)  # two of them are files Pi rejects
        assert report.status == "imported"
        assert any(w.startswith(f"{path}:{line}: ") and reason in w for w in report.warnings), report.warnings
        assert report.warning_count == len(report.warnings)
        assert b"".join(store.iter_export(report.session_id)) == data  # every byte kept


@pytest.mark.parametrize("name", ["glued JSON objects", "duplicate id", "missing parent", "CRLF"])
def test_strict_refuses_and_stores_nothing(store: SessionStore, tmp_path: Path, name: str) -> None:
    data, line, reason = ODDITIES[name]
    path = tmp_path / "odd.jsonl"
    path.write_bytes(data)
    with pytest.raises(StrictRefusal, match=f"odd.jsonl:{line}: .*{reason[:12]}"):
        import_file(store, path, strict=True)
    with read_transaction(store.engine) as conn:
        for table in (sessions, entries, imports):
            assert conn.execute(table.select()).first() is None
    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(HEADER + b"\n" + A + b"\n" + B + b"\n")
    assert import_file(store, clean, strict=True).warnings == []  # strict passes a clean file


def test_strict_in_the_worker_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import store.interchange.importing as importing

    monkeypatch.setattr(importing, "WORKER_MIN_BYTES", 0)
    path = tmp_path / "odd.jsonl"
    path.write_bytes(ODDITIES["blank line"][0])
    with SessionStore.connect(f"sqlite:///{tmp_path / 's.db'}") as store:
        with pytest.raises(StrictRefusal, match=r"odd\.jsonl:2: empty line"):
            import_file(store, path, strict=True)
        assert store.list_all() == []


def test_cli_strict_and_json_report(tmp_path: Path) -> None:
    folder = tmp_path / "sessions" / "--w--"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_bytes(HEADER + b"\n" + A + b"\n")
    (folder / "b.jsonl").write_bytes(ODDITIES["glued JSON objects"][0].replace(SID.encode(), b"other-session"))
    cli = [sys.executable, "-m", "store.cli", "--db", f"sqlite:///{tmp_path / 'cli.db'}"]
    done = subprocess.run([*cli, "import", str(tmp_path / "sessions"), "--json", "--strict"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    *files, summary = map(json.loads, done.stdout.splitlines())
    assert [(f["sessionId"], f["status"]) for f in files] == [(SID, "imported"), (None, "refused")]
    assert "b.jsonl:2: two JSON values glued together" in files[1]["error"]
    assert summary["summary"]["statuses"] == {"imported": 1, "refused": 1}
    listed = subprocess.run([*cli, "list", "--json"], capture_output=True, text=True, timeout=120)
    assert [s["id"] for s in json.loads(listed.stdout)] == [SID]


def test_text_no_database_can_hold_is_stored_on_both_engines(store: SessionStore, tmp_path: Path) -> None:
    """NUL (PostgreSQL text cannot hold it) and lone surrogates (UTF-8 cannot) in ids, parents,
    label targets and names: the lines are kept byte for byte, the columns hold the JSON escape
    text, and the tree, labels and name read back the same on SQLite and PostgreSQL."""
    nul, lone = "a\u0000b", "c\ud800d"

    def line(value: dict) -> bytes:  # JSON.stringify's escapes: \u0000 and \ud800 as text
        return json.dumps(value, separators=(",", ":")).encode()

    data = b"\n".join([
        line({"type": "session", "version": 3, "id": SID, "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w\u0000"}),
        line({"type": "message", "id": nul, "parentId": None, "timestamp": "2026-01-01T00:00:01.000Z",
              "message": {"role": "user", "content": "h\u0000i", "timestamp": 1}}),
        line({"type": "message", "id": lone, "parentId": nul, "timestamp": "2026-01-01T00:00:02.000Z",
              "message": {"role": "assistant", "content": [], "timestamp": 2}}),
        line({"type": "label", "id": "eeeeeeee", "parentId": lone, "timestamp": "2026-01-01T00:00:03.000Z",
              "targetId": nul, "label": "start"}),
        line({"type": "session_info", "id": "ffffffff", "parentId": "eeeeeeee",
              "timestamp": "2026-01-01T00:00:04.000Z", "name": "n\u0000ame"}),
    ]) + b"\n"
    path = tmp_path / "unstorable.jsonl"
    path.write_bytes(data)
    report = import_file(store, path)
    assert report.status == "imported"
    assert b"".join(store.iter_export(SID)) == data
    sm = store.open(SID)
    assert sm.get_leaf_id() == "ffffffff"
    assert len(sm.get_branch()) == 4
    # the ids themselves, as Pi returns them: a column holding an escape is read from the line
    assert sm.get_branch_ids("ffffffff")[:2] == [nul, lone]
    assert sm.get_label(nul) == "start"
    assert sm.get_session_name() == "n\u0000ame"  # read from the line: exact
    sm.append_session_info("again\u0000")  # through the API too
    assert [s.name for s in store.list_all()] == ["again\u0000"]  # as Pi lists it (it was the escape text)
    assert [s.cwd for s in store.list_all()] == ["/w\u0000"]


def test_a_file_whose_name_is_not_utf8(store: SessionStore, tmp_path: Path) -> None:
    """Python names it with surrogates (os.fsdecode), which neither database holds: the import
    failed ("unexpected UnicodeEncodeError") where the path is recorded. It is recorded in the
    stored form (store.db.stored_text), found again by a second import."""
    name = os.fsdecode(b"n\xff\xfe.jsonl")
    path = tmp_path / name
    path.write_bytes(HEADER + b"\n" + entry("aaaaaaaa", None) + b"\n")
    assert import_file(store, path).status == "imported"
    assert import_file(store, path).status == "unchanged"
    assert b"".join(store.iter_export(SID)) == path.read_bytes()
