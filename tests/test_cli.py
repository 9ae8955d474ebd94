"""What every ``pi-store`` command shares: a failure the store raises on purpose is printed as one
line (exit status 1), never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("args", [["inspect", "nope"], ["stats", "nope"], ["export", "nope"], ["verify", "nope"],
                                  ["search", "word", "--session", "nope"], ["compact", "nope"], ["search", "--", "-x"]])
def test_store_errors_are_one_line(tmp_path: Path, args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "store.cli", "--db", f"sqlite:///{tmp_path / 's.db'}", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.startswith("Error: ") and "Traceback" not in done.stderr, done.stderr


SMALL = Path(__file__).resolve().parent / "fixtures" / "oracle" / "sessions" / "small-seed1-0.jsonl"


def _stored(tmp_path: Path) -> tuple[list[str], str]:
    """The command prefix on a store holding SMALL, and its session id."""
    pi_store = [sys.executable, "-m", "store.cli", "--db", str(tmp_path / "s.db")]
    subprocess.run([*pi_store, "import", str(SMALL)], check=True, capture_output=True, timeout=120)
    listed = subprocess.run([*pi_store, "list", "--json"], check=True, capture_output=True, text=True, timeout=120)
    return pi_store, __import__("json").loads(listed.stdout)[0]["id"]


def test_commands_that_open_a_session_pi_refuses_say_so_in_one_line(tmp_path: Path) -> None:
    """``tree`` drew an empty tree of a stored file without a session header (``compact`` found
    nothing to summarise): Pi refuses to open that file, and so do they."""
    pi_store = [sys.executable, "-m", "store.cli", "--db", str(tmp_path / "s.db")]
    not_session = SMALL.with_name("edge-not-session.jsonl")
    imported = subprocess.run([*pi_store, "import", "--json", str(not_session)], check=True, capture_output=True,
                              text=True, timeout=120)
    session = __import__("json").loads(imported.stdout.splitlines()[0])["sessionId"]
    for args in (["tree", session], ["compact", session, "--dry-run"]):
        done = subprocess.run([*pi_store, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, (args, done.stderr)
        assert done.stderr.startswith(f"Error: session {session} is not a valid Pi session"), done.stderr


@pytest.mark.skipif(not Path("/dev/full").is_char_device(),
                    reason="no /dev/full here (a device whose writes fail as on a full disk)")
@pytest.mark.parametrize("to", ["stdout", "-o"])
def test_output_that_cannot_be_written_fails_the_command(tmp_path: Path, to: str) -> None:
    """``export > backup.jsonl`` on a full disk must not exit 0 with the backup cut short."""
    pi_store, session = _stored(tmp_path)
    for args in ([*pi_store, "export", session], [*pi_store, "list"], [*pi_store, "sql", "SELECT * FROM entries"],
                 [*pi_store, "--help"], [*pi_store, "--version"]):  # (help and version: printed while parsing)
        if to == "-o" and args[-1] == session:
            done = subprocess.run([*args, "-o", "/dev/full"], capture_output=True, text=True, timeout=120)
        else:
            with open("/dev/full", "wb") as full:
                done = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
        assert done.returncode == 1, args
        assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1, done.stderr
        assert "No space left on device" in done.stderr
    assert Path("/dev/full").is_char_device()


def test_export_never_writes_over_the_store_itself(tmp_path: Path) -> None:
    """``export ID -o s.db`` with s.db the store renamed the export over the database: every
    session gone, exit 0. The store's file (through a link too) and its -wal/-shm are refused;
    ``-o -`` is standard output, not a file named "-"."""
    pi_store, session = _stored(tmp_path)
    (tmp_path / "link.db").symlink_to(tmp_path / "s.db")
    for target in ("s.db", "link.db", "s.db-wal", "s.db-shm"):
        done = subprocess.run([*pi_store, "export", session, "-o", str(tmp_path / target)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 1 and "the store's own database file" in done.stderr, (target, done.stderr)
    dash = subprocess.run([*pi_store, "export", session, "-o", "-"], capture_output=True, timeout=120, cwd=tmp_path)
    assert dash.stdout == SMALL.read_bytes() and not (tmp_path / "-").exists()
    listed = subprocess.run([*pi_store, "list", "--limit", str(2**63 - 1)], capture_output=True, text=True,
                            timeout=120)  # the largest limit the option takes
    assert listed.returncode == 0 and listed.stdout.startswith(session), listed.stderr


@pytest.mark.parametrize("args", [["prune", "--older-than", "30d"], ["delete", "x", "--dry-run"],
                                  ["compact", "x", "--dry-run", "--summarizer", "deterministic"]])
def test_a_dry_run_creates_no_database(tmp_path: Path, args: list[str]) -> None:
    """A dry run only reads: on a mistyped path it made an empty store (and prune exited 0)."""
    done = subprocess.run([sys.executable, "-m", "store.cli", "--db", str(tmp_path / "typo.db"), *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "no database at" in done.stderr and not list(tmp_path.iterdir()), done.stderr


@pytest.mark.parametrize("name", ["my%41.db", "a?b.db", "per%20cent.db"])
def test_a_file_path_is_not_read_as_a_url(tmp_path: Path, name: str) -> None:
    """``--db my%41.db`` opened myA.db (the path went into a URL unescaped) and ``a?b.db`` was
    refused as a URL with options."""
    done = subprocess.run([sys.executable, "-m", "store.cli", "--db", name, "import", str(SMALL)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".db"] == [name]


def test_export_to_a_pipe_writes_through_it(tmp_path: Path) -> None:
    """``-o`` naming a FIFO (or a device, /dev/stdout): written in place, not replaced by a file
    renamed over it (the atomic write of regular files; as root it replaced /dev/full itself)."""
    import os
    import threading

    pi_store, session = _stored(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    done = subprocess.run([*pi_store, "export", session, "-o", str(fifo)], capture_output=True, timeout=120)
    reader.join(timeout=30)
    assert done.returncode == 0, done.stderr
    assert received == [SMALL.read_bytes()] and fifo.is_fifo()


@pytest.mark.parametrize("args", [
    ["list", "--limit", "99999999999999999999999"],  # past SQLite's INTEGER: OverflowError before
    ["search", "x", "--limit", "99999999999999999999"],
    ["sync", ".", "--watch", "--interval", "nan"],  # NaN passes every range check: ValueError from sleep before
    ["sync", ".", "--watch", "--interval", "1e400"],
    ["sql", "SELECT 1", "--timeout", "nan"],
    ["compact", "x", "--reserve", "1"],  # a summary cap of 0 tokens: every model refused the request
])
def test_out_of_range_numbers_are_usage_errors(tmp_path: Path, args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "store.cli", "--db", str(tmp_path / "s.db"), *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1].startswith("Error: Invalid value for "), done.stderr


@pytest.mark.parametrize(("url", "says"), [
    ("postgresql://postgres@127.0.0.1:abc/db", "not a database URL (invalid literal for int()"),
    ("mysql://me@db.example/sessions", "pi-store keeps sessions in SQLite or PostgreSQL, not mysql"),
])
def test_urls_it_cannot_use_are_named_plainly(url: str, says: str) -> None:
    done = subprocess.run([sys.executable, "-m", "store.cli", "--db", url, "list"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"Error: cannot open database {url}: {says}"), done.stderr


def test_a_sqlite_url_with_options_is_refused(tmp_path: Path) -> None:
    """SQLAlchemy warned on two lines that ``?mode=ro`` was ignored, then the command went on."""
    url = f"sqlite:///{tmp_path / 's.db'}?mode=ro"
    done = subprocess.run([sys.executable, "-m", "store.cli", "--db", url, "import", str(SMALL)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("Error: a SQLite URL takes no options here (given: mode)"), done.stderr
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("fmt", ["--json", "--nl", "--tsv"])
def test_sql_row_objects_refuse_repeated_column_names(tmp_path: Path, fmt: str) -> None:
    """``SELECT 1 AS a, 2 AS a --json`` printed ``[{"a":2}]``: a value lost without a word."""
    pi_store, _ = _stored(tmp_path)
    done = subprocess.run([*pi_store, "sql", "SELECT 1 AS a, 2 AS a, 3 AS b", fmt], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and done.stdout == "", done.stdout
    assert done.stderr == ("Error: the result names more than one column a: name them apart with AS for --json, "
                           "--nl or --tsv (--csv and the table show them all)\n")
    csv = subprocess.run([*pi_store, "sql", "SELECT 1 AS a, 2 AS a", "--csv"], capture_output=True, text=True,
                         timeout=120)
    assert csv.stdout.splitlines() == ["a,a", "1,2"]


@pytest.mark.parametrize("args", [["--db", "", "list"], ["--db", " ", "list"], ["--db", "{db}", "sql", ""],
                                  ["--db", "{db}", "sql", "  "], ["--db", "{db}", "export", "{session}", "-o", ""],
                                  ["--db", "{db}", "export", "--all", ""], ["--db", "{db}", "stats", ""],
                                  ["--db", "{db}", "stats", "--session", ""]])
def test_empty_arguments_are_usage_errors(tmp_path: Path, args: list[str]) -> None:
    """``--db ""`` opened the default database; ``sql ""`` printed "(0 rows)" on SQLite;
    ``export -o ""`` wrote to standard output, ``export --all ""`` into the current folder and
    ``stats ""`` counted every session."""
    pi_store, session = _stored(tmp_path)
    done = subprocess.run([sys.executable, "-m", "store.cli", *(a.format(db=pi_store[-1], session=session)
                                                                  for a in args)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.splitlines()[-1].startswith("Error: Invalid value for "), done.stderr
    assert "empty" in done.stderr.splitlines()[-1]


def test_the_library_names_urls_it_cannot_use_too() -> None:
    """The check lives where URLs are parsed (``store.db.engine.parse_url``), not in the CLI:
    ``SessionStore.connect("mysql://...")`` ended in a ModuleNotFoundError for MySQLdb."""
    from store.db.engine import BadSetting
    from store.session_store import SessionStore

    with pytest.raises(BadSetting, match=r"^cannot open database mysql://me:\*\*\*@db/s: pi-store keeps sessions in "):
        SessionStore.connect("mysql://me:secret@db/s")
    with pytest.raises(BadSetting, match="not a database URL"):
        SessionStore.connect("postgresql://postgres@127.0.0.1:abc/db")


def test_odd_inputs_get_the_stores_own_words(tmp_path: Path) -> None:
    """Each of these said which Python exception it was (UnicodeEncodeError, ModuleNotFoundError,
    RuntimeError, Alembic's CommandError) instead of what is wrong."""
    import os
    import sqlite3

    pi_store, _ = _stored(tmp_path)
    future = tmp_path / "future.db"
    future.write_bytes((tmp_path / "s.db").read_bytes())
    with sqlite3.connect(future) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_future'")
    cases = [
        ([*pi_store, "claims", "release", os.fsdecode(b"\xff")], "Error: no session '\\udcff' in the store"),
        ([*pi_store, "sql", os.fsdecode(b"select '\xff'")], "Error: the statement is not valid UTF-8 (at character 9)"),
        ([*pi_store[:-1], "postgresql+asyncpg://nowhere/x", "list"], "through psycopg 3, not asyncpg"),
        ([*pi_store[:-1], "~no-such-user-here/x.db", "list"], "Error: ~no-such-user-here/x.db: "),
        ([*pi_store[:-1], str(future), "list"], "made or upgraded by a newer pi-store"),
    ]
    for args, expected in cases:
        done = subprocess.run(args, capture_output=True, text=True, timeout=120, errors="surrogateescape")
        assert done.returncode == 1 and expected in done.stderr and done.stderr.count("\n") == 1, (args, done.stderr)
        assert "Error:" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("database", ["{tmp}/caf\udce9.db", "sqlite:///{tmp}/caf\udce9.db"])
def test_a_database_name_that_is_not_utf8_is_refused_before_anything_is_made(tmp_path: Path, database: str) -> None:
    """The file was created, then the store's schema failed with UnicodeEncodeError (an
    unexpected error): an empty database was left behind, and every later write failed alike."""
    import os

    named = database.format(tmp=tmp_path)
    done = subprocess.run([sys.executable, "-m", "store.cli", "--db", named, "import", str(SMALL)], capture_output=True,
                          text=True, timeout=120, errors="surrogateescape")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "its name is not valid UTF-8" in done.stderr and "Traceback" not in done.stderr
    assert os.listdir(tmp_path) == []


def test_a_one_letter_exclusion_is_part_of_the_query(tmp_path: Path) -> None:
    """``search foo -x`` failed with "No such option: -x": only longer words were exclusions."""
    import json

    pi_store, _ = _stored(tmp_path)

    def hits(*query: str) -> list[str]:
        done = subprocess.run([*pi_store, "search", *query, "--json", "--limit", "1000"], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return [hit["entryId"] for hit in json.loads(done.stdout)]

    every, without = hits("the"), hits("the", "-a")
    assert without == hits("the NOT a") and 0 < len(without) < len(every)  # the documented spelling of -a


def test_an_option_value_that_starts_with_a_dash_is_the_options(tmp_path: Path) -> None:
    """``search --session -dash zebra`` said "no session '\\x00-dash'": the value was taken for an
    exclusion and marked as one; ``--limit -3`` named the value '\\x00-3'."""
    import json

    pi_store = [sys.executable, "-m", "store.cli", "--db", str(tmp_path / "s.db")]
    entry = "e0000001"
    lines = [{"type": "session", "version": 3, "id": "-dash", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"},
             {"type": "message", "id": entry, "parentId": None, "timestamp": "2026-01-01T00:00:01.000Z",
              "message": {"role": "user", "content": "zebra crossing", "timestamp": 1}}]
    (tmp_path / "dash.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    subprocess.run([*pi_store, "import", str(tmp_path / "dash.jsonl")], check=True, capture_output=True, timeout=120)
    found = subprocess.run([*pi_store, "search", "--session", "-dash", "zebra", "--json"], capture_output=True,
                           text=True, timeout=120)
    assert found.returncode == 0, found.stderr
    assert [hit["entryId"] for hit in json.loads(found.stdout)] == [entry]
    limit = subprocess.run([*pi_store, "search", "zebra", "--limit", "-3"], capture_output=True, text=True,
                           timeout=120)
    assert limit.returncode == 2 and "Invalid value for '--limit': -3 is not in the range" in limit.stderr, limit.stderr
    assert "\x00" not in limit.stderr


def test_the_default_database_folder_is_made_by_the_first_write_only(tmp_path: Path) -> None:
    """``pi-store path`` ("nothing is opened or created") and every read command made
    ``~/.local/share/pi-store`` (and failed where HOME is read-only); an explicit ``--db`` in a
    folder that does not exist was "unable to open database file" for import, after ``list``
    had said that import would create it."""
    import os

    env = {**os.environ, "HOME": str(tmp_path / "home"), "PI_STORE_DB": "", "XDG_DATA_HOME": ""}
    (tmp_path / "home").mkdir()
    default = tmp_path / "home" / ".local" / "share" / "pi-store" / "sessions.db"

    def pi_store(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "store.cli", *args], capture_output=True, text=True,
                              timeout=120, env=env)

    assert pi_store("path").stdout.strip() == str(default)
    listed = pi_store("list")
    assert listed.returncode == 1 and f"no database at {default}" in listed.stderr
    assert list((tmp_path / "home").iterdir()) == []
    assert pi_store("import", str(SMALL)).returncode == 0 and default.is_file()
    missing = tmp_path / "nope" / "x" / "s.db"
    done = pi_store("--db", str(missing), "import", str(SMALL))
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert f"its folder {missing.parent} does not exist" in done.stderr and not (tmp_path / "nope").exists()


def test_a_read_command_on_an_older_schema_it_cannot_write_says_so(tmp_path: Path) -> None:
    """It tried to upgrade the schema read-only too and failed with "unable to open database
    file"; where it can write, a read command still upgrades it (the one write it does)."""
    import sqlite3

    import click
    from alembic import command

    from store.cli.app import _connect
    from store.db.engine import alembic_config, script_head, stored_revision
    from store.session_store import SessionStore

    db = tmp_path / "old.db"
    with SessionStore.connect(f"sqlite:///{db}") as store:
        command.downgrade(alembic_config(store.engine), "-1")  # the revision before this pi-store's
        older = stored_revision(store.engine)
    assert older != script_head()
    with pytest.raises(click.ClickException, match=rf"schema is at revision {older}, this pi-store's is .* cannot "
                                                   r"be upgraded here"):
        _connect(f"sqlite:///{db}", "ro", must_exist=True)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (older,)
    _connect(f"sqlite:///{db}", None, must_exist=True).engine.dispose()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (script_head(),)
