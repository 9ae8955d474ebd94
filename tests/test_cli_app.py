"""The command line as a daily tool: database selection (URL or file path), ``pi-store path``,
``--version``, the help's command table and environment, read commands never creating a file."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from store.cli import main
from store.cli.app import COMMANDS
from store.db.engine import head_revision, script_head

SMALL = Path(__file__).resolve().parent / "fixtures" / "oracle" / "sessions" / "small-seed1-0.jsonl"


def run(*args: str, env: dict | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_db_takes_a_relative_file_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert run("--db", "x.db", "import", str(SMALL))[0] == 0
    assert (tmp_path / "x.db").is_file()
    code, out, _ = run("--db", str(tmp_path / "x.db"), "list", "--json")
    assert code == 0 and len(__import__("json").loads(out)) == 1
    code, out, _ = run("list", "--json", env={"PI_STORE_DB": "x.db"})
    assert code == 0 and out.startswith("[{")


def test_path_prints_the_file_or_the_masked_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert run("--db", "x.db", "path") == (0, f"{tmp_path / 'x.db'}\n", "")
    code, out, _ = run("--db", "x.db", "path", "--json")
    assert code == 0 and __import__("json").loads(out) == {
        "database": str(tmp_path / "x.db"), "url": f"sqlite:///{tmp_path / 'x.db'}", "engine": "sqlite",
        "exists": False}
    assert not (tmp_path / "x.db").exists()
    code, out, _ = run("--db", "postgresql://me:secret@db.example/s", "path", "--json")
    assert __import__("json").loads(out) == {"database": "postgresql://me:***@db.example/s",
                                             "url": "postgresql://me:***@db.example/s",
                                             "engine": "postgresql", "exists": None}
    assert run("--db", "postgresql://me:secret@db.example/s", "path")[1] == "postgresql://me:***@db.example/s\n"


@pytest.mark.parametrize("args", [["list"], ["search", "x"], ["stats"], ["sql", "SELECT 1"], ["tree", "s"],
                                  ["inspect", "s"]])
def test_read_commands_do_not_create_a_missing_file(tmp_path: Path, args: list[str]) -> None:
    code, out, err = run("--db", str(tmp_path / "none.db"), *args)
    assert code == 1 and out == ""
    assert err == f"Error: no database at {tmp_path / 'none.db'} (a write command, e.g. pi-store import, creates it)\n"
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("args", [["list"], ["search", "x"], ["stats"], ["sql", "SELECT 1"], ["verify", "--all"],
                                  ["export", "--all", "out"]])
def test_read_commands_do_not_create_a_store_in_an_empty_database(db_url: str, tmp_path: Path,
                                                                   args: list[str]) -> None:
    """An empty PostgreSQL database, an empty SQLite file: a read command refuses and leaves it
    as it was (no tables; the SQLite file still empty)."""
    from sqlalchemy import create_engine, inspect

    if db_url.startswith("sqlite"):
        (tmp_path / "store.db").touch()
    code, out, err = run("--db", db_url, *args)
    assert code == 1 and out == ""
    assert err.startswith("Error: no pi-store database at ") and err.count("\n") == 1
    if db_url.startswith("sqlite"):
        assert (tmp_path / "store.db").stat().st_size == 0
    else:
        engine = create_engine(db_url)
        assert [name for name in inspect(engine).get_table_names() if name != "usage_days"] == []
        engine.dispose()


def test_version_and_help() -> None:
    code, out, _ = run("--version")
    assert code == 0 and out.startswith("pi-store, version ")
    code, out, _ = run("--help")
    for name in COMMANDS:
        assert f"  {name} " in out, name
    for variable in ("PI_STORE_DB", "PI_STORE_CONNECT_TIMEOUT", "PI_STORE_LOCK_TIMEOUT", "PI_STORE_STATEMENT_TIMEOUT",
                     "PI_STORE_POOL_SIZE", "PI_STORE_MAX_OVERFLOW", "PI_STORE_POOLER", "PI_STORE_IMPORT_JOBS",
                     "PI_STORE_DEBUG", "PI_STORE_SUMMARY_BASE_URL", "_PI_STORE_COMPLETE=bash_source"):
        assert variable in out, variable


def test_command_table_matches_the_commands() -> None:
    """``pi-store --help`` lists each command with its own one-line help, without importing it."""
    from store.cli.app import main as group

    for name, (module, short) in COMMANDS.items():
        importlib.import_module(f"store.cli.{module}")
        assert group.commands[name].get_short_help_str(limit=80) == short, name


def test_schema_head_read_without_alembic_is_alembics() -> None:
    assert script_head() == head_revision()


def test_completion_script() -> None:
    result = CliRunner().invoke(main, [], env={**os.environ, "_PI_STORE_COMPLETE": "bash_source"},
                                prog_name="pi-store")
    assert "_PI_STORE_COMPLETE=bash_complete" in result.stdout


def test_a_command_run_in_process_leaves_sigterm_as_it_found_it(tmp_path: Path) -> None:
    """The CLI turns SIGTERM into Ctrl-C's interrupt while a command runs; run inside another
    program (a test, a notebook) it left its handler installed after the command."""
    import signal

    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert run("--db", str(tmp_path / "s.db"), "import", str(SMALL))[0] == 0
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
