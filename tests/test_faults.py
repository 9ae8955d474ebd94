"""Faults through the real command line: a full disk, a read-only store, a locked database, a
server that never answers, secrets in URLs, odd timestamps, unexpected errors. Every command
answers or fails with one line; none shows a traceback or hangs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy.engine import make_url

from store.cli import main
from store.session_store import SessionStore
from tests.conftest import scratch_pg_database
from tests.oracle_support import FIXTURES, js_diff, oracle_available, run_describe

SESSION = FIXTURES / "sessions" / "small-seed1-0.jsonl"
OTHER = FIXTURES / "sessions" / "small-seed2-0.jsonl"
PASSWORD = "s3cretPassw0rd"


@dataclass
class Run:
    """What one ``pi-store`` command printed and its exit status."""

    returncode: int
    stdout: str
    stderr: str
    stdout_bytes: bytes


def pi_store(db: str, *args: str, env: dict[str, str] | None = None) -> Run:
    """Run ``pi-store --db DB ARGS`` in this process (click's runner: stdout and stderr apart)."""
    result = CliRunner().invoke(main, ["--db", db, *args], env=env)
    return Run(result.exit_code, result.stdout, result.stderr, result.stdout_bytes)


def pi_store_process(db: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The same in a process of its own (what a user's shell sees, tracebacks included)."""
    return subprocess.run([sys.executable, "-m", "store.cli", "--db", db, *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


NO_HITS = "no entries match"  # search's own line when nothing matched (an index not brought up to date finds less)


def one_error_line(done: Run | subprocess.CompletedProcess[str]) -> str:
    """The single ``Error: ...`` line a failed command printed (and nothing else on stderr)."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    return lines[0]


def session_id(path: Path) -> str:
    return json.loads(path.read_text("utf-8").splitlines()[0])["id"]


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs (a disk that can really fill up, or be made read-only), unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def stored_without_index(folder: Path) -> str:
    """A store in ``folder`` holding SESSION, imported through the library: the SQLite full-text
    index has not caught up with it (the CLI's import would have synced it)."""
    url = f"sqlite:///{folder / 's.db'}"
    with SessionStore.connect(url) as store:
        store.import_file(SESSION)
    return url


def fill(folder: Path) -> None:
    """Fill the tmpfs to the last page (it allocates whole 4 KiB pages)."""
    with (folder / "filler").open("wb", buffering=0) as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 4096)


STALE = "warning: the full-text index could not be brought up to date"


# ----------------------------------------------------------------------------- 1. a full disk
def test_full_disk_reads_answer_while_another_connection_is_open(tmpfs: Path) -> None:
    url = stored_without_index(tmpfs)
    keeper = sqlite3.connect(tmpfs / "s.db")  # keeps the -wal and -shm files in place
    keeper.execute("SELECT count(*) FROM sessions").fetchall()
    fill(tmpfs)
    try:
        for args in (["search", "the"], ["sql", "SELECT count(*) AS n FROM sessions"]):
            done = pi_store(url, *args)
            assert done.returncode == 0, done.stderr
            assert "Traceback" not in done.stderr
            warnings = [line for line in done.stderr.splitlines() if not line.startswith(NO_HITS)]
            assert len(warnings) == 1 and warnings[0].startswith(STALE), done.stderr
            assert "disk full" in warnings[0]
        assert "1" in pi_store(url, "sql", "SELECT count(*) AS n FROM sessions").stdout.splitlines()[2]
        done = pi_store(url, "import", str(OTHER))
        assert done.returncode == 1 and "Traceback" not in done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "disk full: database or disk is full" in errors[0], done.stderr
        assert "[SQL" not in done.stderr and url.removeprefix("sqlite:///") in errors[0]
    finally:
        keeper.close()
        (tmpfs / "filler").unlink()
    listed = pi_store(url, "list", "--json")
    assert [s["id"] for s in json.loads(listed.stdout)] == [session_id(SESSION)]  # nothing half-written
    assert pi_store(url, "verify", "--all").returncode == 0


def test_full_disk_with_no_shm_file_reads_read_only_and_writes_fail(tmpfs: Path) -> None:
    url = stored_without_index(tmpfs)
    assert not (tmpfs / "s.db-wal").exists()  # the last connection closed: SQLite removed them
    fill(tmpfs)
    sid = session_id(SESSION)
    assert sid in pi_store(url, "list").stdout
    done = pi_store(url, "search", "the")
    assert done.returncode == 0 and done.stderr.startswith(STALE), done.stderr
    inspect = pi_store(url, "inspect", sid)
    assert inspect.returncode == 0 and json.loads(inspect.stdout)["sessionId"] == sid
    exported = pi_store(url, "export", sid)
    assert exported.returncode == 0 and exported.stdout_bytes == SESSION.read_bytes()
    line = one_error_line(pi_store(url, "import", str(OTHER)))
    assert line.startswith("Error: disk full: ") and str(tmpfs / "s.db") in line


# ----------------------------------------------------------------------- 2. a read-only store
def test_read_only_folder(tmpfs: Path) -> None:
    url = stored_without_index(tmpfs)
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    sid = session_id(SESSION)
    assert pi_store(url, "list").returncode == 0
    assert sid in pi_store(url, "list").stdout
    assert json.loads(pi_store(url, "inspect", sid).stdout)["sessionId"] == sid
    done = pi_store(url, "search", "the")
    warnings = [line for line in done.stderr.splitlines() if not line.startswith(NO_HITS)]
    assert done.returncode == 0 and len(warnings) == 1
    assert done.stderr.startswith(STALE) and "readonly" in done.stderr
    assert pi_store(url, "export", sid).stdout_bytes == SESSION.read_bytes()
    counted = pi_store(url, "sql", "SELECT count(*) AS n FROM sessions", "--json")  # mode=ro cannot make -shm
    assert (counted.returncode, counted.stdout) == (0, '[{"n":1}]\n'), counted.stderr
    for args in (["delete", sid, "--dry-run"], ["prune", "--older-than", "0d"],  # dry runs only read
                 ["compact", sid, "--dry-run", "--summarizer", "deterministic"]):
        assert pi_store(url, *args).returncode == 0, args
    claims = pi_store(url, "claims")  # listing claims only reads
    assert (claims.returncode, claims.stdout) == (0, "no session is claimed\n"), claims.stderr
    verified = pi_store(url, "verify", "--all")  # FTS5's integrity-check is a write: not run, not "damaged"
    assert verified.returncode == 0, verified.stdout
    assert verified.stdout.startswith("database: ok (quick_check, fts5 integrity-check not run: read-only database)")
    for args in (["import", str(OTHER)], ["fts", "rebuild"], ["compact", sid, "--summarizer", "deterministic"]):
        line = one_error_line(pi_store(url, *args))
        assert line == f"Error: cannot write to {url}: the database file is read-only", line


@pytest.mark.parametrize("side", ["-wal", "-shm"])
def test_a_wal_or_shm_file_this_user_cannot_write(tmp_path: Path, side: str) -> None:
    """The database file is writable, but its ``-wal`` or ``-shm`` file — shared by every process
    that has the database open, made by the first with its owner's umask — is not: the write
    failed per file as "attempt to write a readonly database". The command now names the file and
    its owner before it starts. (Made unwritable with ``chattr +i``, which binds root too.)"""
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    assert pi_store(url, "import", str(SESSION)).returncode == 0
    holder = sqlite3.connect(db)  # another process of the store's, as it were: its -wal and -shm stay
    try:
        holder.execute("SELECT count(*) FROM sessions").fetchone()
        shared = Path(f"{db}{side}")
        assert shared.exists()
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(shared)],
                                                            capture_output=True).returncode != 0:
            pytest.skip(f"cannot make {shared} immutable here (chattr, or its file system, refused)")
        try:
            # processes of their own: within one process SQLite shares the -shm mapping of the holder
            line = one_error_line(pi_store_process(url, "import", str(OTHER)))
            read = pi_store_process(url, "list")
        finally:
            subprocess.run(["chattr", "-i", str(shared)], check=True)
    finally:
        holder.close()
    assert line.startswith(f"Error: cannot write to {url}: its file {shared} cannot be written here (owner: "), line
    assert read.returncode == 0 and session_id(SESSION) in read.stdout  # reading still works
    assert pi_store(url, "import", str(OTHER)).returncode == 0  # and writing, once it can


def test_the_viewer_reads_a_store_in_a_read_only_folder(tmpfs: Path) -> None:
    """``list`` opened such a store (``mode=ro`` cannot make the ``-shm`` file: ``immutable``),
    but ``serve`` built its engine with ``mode=ro`` alone and every page was a 503 "attempt to
    write a readonly database"."""
    import httpx

    from tests.web.conftest import start_server, stop

    url = stored_without_index(tmpfs)
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    process, base = start_server(url)
    try:
        listed = httpx.get(base + "/api/sessions", timeout=60)
        page = httpx.get(base + "/", timeout=60)
    finally:
        stop(process)
    assert listed.status_code == 200, listed.text
    assert session_id(SESSION) in listed.text and page.status_code == 200


# ------------------------------------------------------------------------ a database that is locked
def test_locked_database(tmp_path: Path) -> None:
    url = stored_without_index(tmp_path)
    holder = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, held past the timeout below
    try:
        env = {"PI_STORE_LOCK_TIMEOUT": "1"}
        done = pi_store(url, "search", "the", env=env)
        assert done.returncode == 0 and done.stderr.startswith(STALE) and "database is locked" in done.stderr
        started = time.monotonic()
        done = pi_store(url, "import", str(OTHER), env=env)
        assert done.returncode == 1 and "Traceback" not in done.stderr and "[SQL" not in done.stderr
        assert "database is locked" in done.stderr
        # the 1 s the user allowed, once: not once per retry (it took 20 such waits)
        assert time.monotonic() - started < 10
    finally:
        holder.rollback()
        holder.close()


def test_read_commands_leave_the_journal_mode_as_they_find_it(tmp_path: Path) -> None:
    """Read commands only read: a SQLite database that is not a store, or a store someone
    switched out of WAL mode, comes out byte for byte as it was (the connection setup once
    switched every file it opened to WAL, even one the command then refused)."""
    foreign = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
    before = foreign.read_bytes()
    for args in (["list"], ["serve", "--port", "0"], ["sql", "SELECT 1"]):
        assert "holds no store yet" in one_error_line(pi_store(str(foreign), *args)), args
    assert foreign.read_bytes() == before
    store = tmp_path / "s.db"
    assert pi_store(str(store), "import", str(SESSION)).returncode == 0
    with contextlib.closing(sqlite3.connect(store)) as conn:
        assert conn.execute("PRAGMA journal_mode=DELETE").fetchone() == ("delete",)
    before = store.read_bytes()
    for args in (["list"], ["search", "branch"], ["inspect", session_id(SESSION)], ["stats"], ["verify", "--all"]):
        assert pi_store(str(store), *args).returncode == 0, args
    assert store.read_bytes() == before
    assert pi_store(str(store), "import", str(OTHER)).returncode == 0  # a write command puts it in WAL mode
    with contextlib.closing(sqlite3.connect(store)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_lock_timeout_zero_waits_as_long_as_it_takes(tmp_path: Path, monkeypatch) -> None:
    """``PI_STORE_LOCK_TIMEOUT=0`` is "no limit" on SQLite too (SQLite's own busy timeout 0 would
    fail at once): an append waits for a writer that holds the lock for a while, then lands."""
    monkeypatch.setenv("PI_STORE_LOCK_TIMEOUT", "0")
    db = tmp_path / "s.db"
    with SessionStore.connect(f"sqlite:///{db}") as store:
        sm = store.create("/w")
        first = sm.append_message({"role": "user", "content": "one", "timestamp": 1})
        holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        release = threading.Timer(1.5, holder.rollback)
        release.start()
        try:
            second = sm.append_message({"role": "user", "content": "two", "timestamp": 2})
        finally:
            release.join()
            holder.close()
        assert sm.get_branch_ids(second) == [first, second]


def test_corrupt_database_says_so(tmp_path: Path) -> None:
    db = tmp_path / "bad.db"
    db.write_bytes(b"this is not a database at all, " * 200)
    line = one_error_line(pi_store_process(f"sqlite:///{db}", "list"))
    assert line == f"Error: file is not a database (sqlite:///{db})"
    debug = pi_store_process(f"sqlite:///{db}", "list", env={"PI_STORE_DEBUG": "1"})
    assert debug.returncode == 1 and "Traceback" in debug.stderr


@pytest.mark.parametrize("closed", [1, 2])
def test_a_command_started_with_stdout_or_stderr_closed(tmp_path: Path, closed: int) -> None:
    """``pi-store list >&-``: Python starts with ``sys.stdout`` None, and the command failed with
    "AttributeError: 'NoneType' object has no attribute 'isatty'" (``serve`` too, in uvicorn's
    logging set-up, once it had printed its address). What is written to it is dropped, as
    Python's print drops it."""
    url = stored_without_index(tmp_path)
    command = [sys.executable, "-m", "store.cli", "--db", url, "list"]
    done = subprocess.run(command, capture_output=True, timeout=120, preexec_fn=lambda: os.close(closed))
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == (b"", b"") if closed == 1 else b" messages " in done.stdout


def test_bad_timeout_setting() -> None:
    line = one_error_line(pi_store("sqlite://", "list", env={"PI_STORE_LOCK_TIMEOUT": "soon"}))
    assert line == "Error: PI_STORE_LOCK_TIMEOUT must be a number of seconds (0: no limit), not 'soon'"


# ------------------------------------------------------------- 3. a server that never answers
@pytest.fixture
def silent_server() -> Iterator[tuple[int, list[socket.socket]]]:
    """A port on 127.0.0.1 that accepts connections and never says a word (and what it accepted)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        server.close()


@pytest.mark.parametrize("given", ["variable", "URL"])
def test_connect_timeout(silent_server: tuple[int, list[socket.socket]], given: str) -> None:
    """The URL's ``connect_timeout`` (libpq's option) wins over the variable, as the README's
    other settings do; it was once overridden by the variable's default, 10 s."""
    port = silent_server[0]
    url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/x"
    env = {"PI_STORE_CONNECT_TIMEOUT": "2"}
    if given == "URL":
        url, env = url + "?connect_timeout=2", {"PI_STORE_CONNECT_TIMEOUT": "60"}
    started = time.monotonic()
    line = one_error_line(pi_store(url, "list", env=env))
    assert time.monotonic() - started < 15
    where = f"postgresql://postgres:***@127.0.0.1:{port}/x" + ("?connect_timeout=2" if given == "URL" else "")
    assert line == f"Error: cannot connect to {where}: timed out after 2 s"


@pytest.mark.parametrize("value", ["abc", "-5", "inf", ""])
def test_a_connect_timeout_in_the_url_is_checked(value: str) -> None:
    done = pi_store(f"postgresql://postgres@127.0.0.1:1/x?connect_timeout={value}", "list")
    if value == "":  # empty: the default, as an empty variable is
        assert "cannot connect to" in one_error_line(done)
        return
    assert one_error_line(done) == ("Error: the URL option connect_timeout must be a number of seconds "
                                    f"(0: no limit), not {value!r}")


def test_ctrl_c_exits_130_quietly(silent_server: tuple[int, list[socket.socket]]) -> None:
    port, accepted = silent_server
    url = f"postgresql://postgres@127.0.0.1:{port}/x"
    process = subprocess.Popen([sys.executable, "-m", "store.cli", "--db", url, "list"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "PI_STORE_CONNECT_TIMEOUT": "60"})
    deadline = time.monotonic() + 120  # Python start-up on a loaded machine
    while not accepted and time.monotonic() < deadline:  # until it is waiting for the server
        time.sleep(0.05)
    assert accepted, "pi-store never connected"
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 130 and err == "" and out == "", (process.returncode, err)


_SLOW_CLOSE = """
import sys, time
from store.session_store import SessionStore
close = SessionStore.close
def slow_close(self):  # a close that takes its time (a SQLite checkpoint after a large import)
    print("closing", file=sys.stderr, flush=True)
    time.sleep(60)
    close(self)
SessionStore.close = slow_close
from store.cli import main
main(sys.argv[1:], prog_name="pi-store")
"""


@pytest.mark.parametrize("damaged", [False, True])
def test_ctrl_c_while_the_store_closes_exits_130_quietly(tmp_path: Path, damaged: bool) -> None:
    """The store was closed after the command, outside its handling of Ctrl-C: click printed
    "Aborted!" and the exit status was 1 (also after a command that failed: a file refused)."""
    path = SESSION
    if damaged:
        path = tmp_path / "damaged.jsonl"
        path.write_bytes(SESSION.read_bytes().replace(b"}\n", b"\n", 1))
    process = subprocess.Popen([sys.executable, "-c", _SLOW_CLOSE, "--db", str(tmp_path / "s.db"), "import",
                                "--strict", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        said = []  # the import's summary line, then the close starting
        while (line := process.stderr.readline()) not in ("closing\n", ""):
            said.append(line)
        assert line and said and said[-1].startswith("1 file (1 refused)" if damaged else "1 file (1 imported)"), said
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert (process.returncode, err) == (130, ""), err
    assert out.startswith("refused " if damaged else "imported ")


@pytest.mark.parametrize("timeout", ["0", "30"])
def test_ctrl_c_stops_an_sql_statement(tmp_path: Path, timeout: str) -> None:
    """SQLite runs a statement in C; with ``--timeout 0`` no progress handler ran Python, so the
    interpreter never got to Ctrl-C's handler and the command ran on until killed. Then the
    interrupt was reported as an error ("interrupted", exit 1), or with a time limit as the
    limit reached, not as Ctrl-C."""
    url = stored_without_index(tmp_path)
    endless = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
    process = subprocess.Popen([sys.executable, "-m", "store.cli", "--db", url, "sql", endless, "--timeout", timeout],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)  # started and counting (a loaded machine: the statement may start late, it ends never)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert (process.returncode, out, err) == (130, "", "")  # as any other command stopped by Ctrl-C


# ------------------------------------------------------------- 4. 5. secrets and URL schemes
@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+psycopg"])
def test_password_never_printed(scheme: str) -> None:
    closed = pi_store(f"{scheme}://postgres:{PASSWORD}@127.0.0.1:1/x", "list")
    line = one_error_line(closed)
    assert line.startswith("Error: cannot connect to postgresql://postgres:***@127.0.0.1:1/x: ")
    server = make_url(os.environ.get("PI_STORE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"))
    wrong = server.set(drivername=scheme, password=PASSWORD, database="no_such_database_here")
    done = pi_store(wrong.render_as_string(hide_password=False), "list")
    if "Connection refused" in done.stderr:
        pytest.skip(f"no PostgreSQL server at {server.host}:{server.port}")
    line = one_error_line(done)
    assert 'database "no_such_database_here" does not exist' in line
    for output in (closed.stdout, closed.stderr, done.stdout, done.stderr):
        assert PASSWORD not in output


@pytest.mark.parametrize("scheme", ["postgres", "postgresql", "postgresql+psycopg"])
def test_postgres_url_schemes(scheme: str) -> None:
    with scratch_pg_database("pi_store_faults") as url:
        given = make_url(url).set(drivername=scheme).render_as_string(hide_password=False)
        imported = pi_store(given, "import", str(SESSION))
        assert imported.returncode == 0, imported.stderr
        assert session_id(SESSION) in pi_store(given, "list").stdout


def test_help_lists_the_settings() -> None:
    done = pi_store("sqlite://", "--help")
    for name in ("PI_STORE_CONNECT_TIMEOUT", "PI_STORE_LOCK_TIMEOUT", "PI_STORE_STATEMENT_TIMEOUT", "PI_STORE_DEBUG"):
        assert name in done.stdout


# ------------------------------------------------------------------- 6. timestamps Pi cannot read
TIMESTAMPS = {  # header timestamp -> listInfo.created, as Pi 1.6.0 computes it (null: Invalid Date)
    "garbage": None,
    "+275760-09-13T00:00:00.001Z": None,  # one ms past JavaScript's last date
    "+275760-09-13T00:00:00.000Z": "+275760-09-13T00:00:00.000Z",
    "-271821-04-20T00:00:00.000Z": "-271821-04-20T00:00:00.000Z",
    "-271821-04-19T23:59:59.999Z": None,
    "": None,
    "2024-13-01T00:00:00Z": None,
    "-000000-01-01T00:00:00Z": None,
    "2024-02-30T10:00:00Z": "2024-03-01T10:00:00.000Z",
    "2024-01-01T24:00:00Z": "2024-01-02T00:00:00.000Z",
}
PI_EPOCH_MTIME = 946_684_800  # describe.mjs forces the listed copy's mtime to 2000-01-01T00:00:00Z


@pytest.mark.parametrize("stamp", list(TIMESTAMPS))
def test_inspect_odd_header_timestamps(tmp_path: Path, stamp: str) -> None:
    sid = "0190aaaa-0000-7000-8000-000000000001"
    path = tmp_path / "odd.jsonl"
    lines = [{"type": "session", "version": 3, "id": sid, "timestamp": stamp, "cwd": "/p"},
             {"type": "message", "id": "a1", "parentId": None, "timestamp": stamp,
              "message": {"role": "user", "content": "hi"}},
             {"type": "message", "id": "a2", "parentId": "a1", "timestamp": stamp,
              "message": {"role": "assistant", "content": [{"type": "text", "text": "yo"}]}}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), "utf-8")
    os.utime(path, (PI_EPOCH_MTIME, PI_EPOCH_MTIME))
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert pi_store(url, "import", str(path)).returncode == 0
    done = pi_store(url, "inspect", sid)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    ours = json.loads(done.stdout)
    assert ours["listInfo"]["created"] == TIMESTAMPS[stamp]
    if not oracle_available():
        return
    shutil.copy(path, tmp_path / "for-pi.jsonl")
    theirs = run_describe(tmp_path / "for-pi.jsonl", all_leaves=False)
    for name in (key for key in theirs if key in ours):
        assert js_diff(theirs[name], ours[name], name) is None, js_diff(theirs[name], ours[name], name)
