"""``pi-store serve`` when the session or the database is not what the pages expect: a usage
whose token count is not a number, a database file damaged, deleted or dropped while serving,
a writer's commits still in the WAL when the viewer stops. A page says what is wrong in one line
(503 for a database fault) and the viewer writes nothing, also not on its way out."""

from __future__ import annotations

import hashlib
import signal
from pathlib import Path

import httpx
import pytest
from markupsafe import escape
from sqlalchemy import create_engine, make_url, text

from store.session_store import SessionStore
from tests.conftest import PG_URL, scratch_pg_database
from tests.web import sessions
from tests.web.conftest import pi_store, start_server, stop

ODD_ID = "0190c0de-0000-7000-8000-0000000000dd"


def odd_usage(path: Path) -> Path:
    """A session whose last answer reports its total tokens as a string, another as a list."""
    entries = [sessions._user("u1", None, 1, "question")]
    for n, total in ((2, "5"), (3, [5])):
        answer = sessions._assistant(f"a{n}", entries[-1]["id"], n, "answer")
        answer["message"]["usage"]["totalTokens"] = total
        entries.append(answer)
    return sessions.write(path, ODD_ID, entries)


def served_file(tmp_path: Path) -> tuple[Path, str]:
    db_file = tmp_path / "store.db"
    url = f"sqlite:///{db_file}"
    pi_store(url, "import", str(odd_usage(tmp_path / "odd.jsonl")))
    return db_file, url


def stderr_of(process) -> str:
    stop(process)
    return process.stderr.read()


def test_a_token_count_that_is_not_a_number_is_shown_as_written(tmp_path: Path) -> None:
    _, url = served_file(tmp_path)
    process, base = start_server(url)
    try:
        for leaf in ("a2", "a3"):
            page = httpx.get(f"{base}/sessions/{ODD_ID}?leaf={leaf}", timeout=60)
            assert page.status_code == 200, page.text[-500:]
            assert "Token estimate" in page.text
        assert httpx.get(f"{base}/api/sessions/{ODD_ID}/context", timeout=60).status_code == 200
    finally:
        assert "Traceback" not in stderr_of(process)


@pytest.mark.parametrize("fault", ["damaged", "deleted"])
def test_a_damaged_or_deleted_file_is_a_one_line_503_and_nothing_is_created(tmp_path: Path, fault: str) -> None:
    """The file goes bad before the viewer's first read (its first connection meets it). A
    deleted file was once made again, empty, by that connection (in WAL mode), and the page was
    a bare 500 with a traceback on the terminal."""
    db_file, url = served_file(tmp_path)
    process, base = start_server(url)  # answers from its static files: no read of the store yet
    try:
        for suffix in ("-wal", "-shm"):
            db_file.with_name(db_file.name + suffix).unlink(missing_ok=True)
        if fault == "damaged":
            db_file.write_bytes(b"not a database " * 10_000)
        else:
            db_file.unlink()
        api = httpx.get(base + "/api/sessions", timeout=60)
        assert api.status_code == 503, api.text
        message = api.json()["error"]
        assert message.endswith(f" ({url})") and "\n" not in message, message
        page = httpx.get(base + "/", timeout=60)
        assert page.status_code == 503 and str(escape(message)) in page.text
    finally:
        err = stderr_of(process)
    assert "Traceback" not in err, err
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == (["odd.jsonl", "store.db"] if fault == "damaged" else ["odd.jsonl"])  # nothing made


def test_stopping_the_viewer_leaves_the_file_as_the_writers_left_it(tmp_path: Path) -> None:
    """SQLite checkpoints when the last connection to a database closes: the viewer's, once the
    writers are gone. A read-only connection does not."""
    db_file, url = served_file(tmp_path)
    process, base = start_server(url)
    try:
        assert httpx.get(base + "/", timeout=60).status_code == 200  # the viewer's connection is open
        with SessionStore.connect(url) as store:
            store.open(ODD_ID).append_message({"role": "user", "content": "after", "timestamp": 9})
        wal = db_file.with_name(db_file.name + "-wal")
        assert wal.stat().st_size > 0  # the viewer's connection kept the writer from checkpointing
        before = hashlib.sha256(db_file.read_bytes()).hexdigest()
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C
        assert process.wait(timeout=60) in (0, 130) and "Traceback" not in process.stderr.read()
    assert hashlib.sha256(db_file.read_bytes()).hexdigest() == before and wal.stat().st_size > 0
    with SessionStore.connect(url) as store:  # nothing lost: the commit is read from the WAL
        assert store.open(ODD_ID).get_entries()[-1]["message"]["content"] == "after"


def test_a_dropped_postgresql_database_is_a_one_line_503(tmp_path: Path) -> None:
    with scratch_pg_database("pi_store_serve_gone") as url:
        pi_store(url, "import", str(odd_usage(tmp_path / "odd.jsonl")))
        process, base = start_server(url)
        try:
            assert httpx.get(base + "/", timeout=60).status_code == 200
            admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE "{make_url(url).database}" WITH (FORCE)'))
            admin.dispose()
            api = httpx.get(base + "/api/sessions", timeout=60)
            assert api.status_code == 503, api.text
            assert api.json()["error"].startswith("cannot connect to postgresql")
            assert httpx.get(base + "/", timeout=60).status_code == 503
        finally:
            err = stderr_of(process)
        assert "Traceback" not in err, err
