"""The ``pi-store`` command group and what every command shares: the store and JSON output.

Every failure ends in one line on stderr and exit status 1, never a traceback: the store's own
errors (``StoreError``) as their message, anything else as ``Error: <what> (<where>)``, with
passwords masked (``PI_STORE_DEBUG=1`` shows the traceback instead). Ctrl-C exits 130 quietly, and
so does a closed pipe (``pi-store list | head``), with 141. A SIGTERM (``kill``, a service manager
stopping ``sync --watch``) is handled as Ctrl-C is — the database's work cancelled or rolled back,
what the command does on Ctrl-C done — and exits 143, as the signal's own exit would.

The store is opened when a command first asks for it (``--help`` and usage errors never
connect). Read commands (:data:`READ_COMMANDS`) still read a SQLite database that cannot be
written (a read-only file or folder, a full disk): read-only, see :func:`open_store`; they never
create a SQLite file that does not exist. ``--db`` takes a URL or a file path
(``store.db.engine.resolve_url``).

Start-up stays cheap: the command modules are imported when one of their commands runs
(:data:`COMMANDS`), and SQLAlchemy and the store only when a command opens it.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import math
import os
import sqlite3
import sys
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from store.errors import StoreError

if TYPE_CHECKING:
    from store.db.engine import ReadOnly
    from store.session_store import SessionStore

READ_COMMANDS = frozenset({"list", "inspect", "search", "sql", "stats", "export", "verify", "tree", "serve"})

# Each command's module (imported when the command runs: ``--help`` and one command do not import
# them all) and its one-line help as ``pi-store --help`` lists it (tests/test_cli_app.py checks
# it against the command's own). Modules that register commands themselves still work.
COMMANDS: dict[str, tuple[str, str]] = {
    "claims": ("claims", 'Sessions claimed by a writer: owner, fencing token, expiry (without a...'),
    "compact": ("context", "Summarise the older part of a session's context into a compaction entry."),
    "delete": ("retention", 'Delete whole sessions (their rows, index entries and import records) in one...'),
    "export": ("interchange", 'Write a session as JSONL (the imported bytes, unchanged), or all of them with...'),
    "fts": ("analysis", 'The full-text search index.'),
    "import": ("interchange", "Store session files, or every *.jsonl below folders (Pi's sessions layout),..."),
    "inspect": ("sessions", "Print one JSON document shaped like the oracle's describe.mjs output."),
    "list": ("sessions", 'Sessions, most recently modified first; served from the sessions table alone.'),
    "path": ("app", "Print the database: a SQLite file's path, else its URL (password masked)."),
    "prune": ("retention", 'Tree-aware retention: drop abandoned branches older than D, keeping what Pi...'),
    "serve": ("serve", "Browse sessions, their trees and what the model sees, read-only, in a web..."),
    "search": ("analysis", 'Full-text search: words, "phrases", prefix*, -word, NOT, AND, OR, (groups).'),
    "sql": ("analysis", 'Run one read-only SQL statement (views: docs/sql.md) and print the rows as...'),
    "stats": ("analysis", 'Messages, tool calls, tokens and cost of a session (all sessions without...'),
    "sync": ("interchange", 'Bring the store up to date with a Pi sessions folder: new files imported,...'),
    "tree": ("tree", "Draw a session's tree: branches, labels, compactions, summaries, the leaf."),
    "verify": ("interchange", "Tell identical, diverged and damaged sessions apart, one line each."),
}

ENVIRONMENT = """\b
Environment:
  PI_STORE_DB                 database: a SQLAlchemy URL or a SQLite file path (as --db)
  PI_STORE_CONNECT_TIMEOUT    seconds to wait for a PostgreSQL server (default 10, at least 2; 0: no limit)
  PI_STORE_LOCK_TIMEOUT       seconds to wait for a lock held by another writer (default 30)
  PI_STORE_STATEMENT_TIMEOUT  seconds a PostgreSQL statement may run (default 0: no limit)
  PI_STORE_POOL_SIZE, PI_STORE_MAX_OVERFLOW
                              PostgreSQL connections kept open (default 5) and opened beyond them (10)
  PI_STORE_POOLER=transaction a pooler in transaction mode (PgBouncer) is in front of PostgreSQL
  PI_STORE_IMPORT_JOBS        files a folder import stores at once on PostgreSQL (default 2)
  PI_STORE_DEBUG=1            show the traceback of an unexpected error
  PI_STORE_SUMMARY_BASE_URL, PI_STORE_SUMMARY_MODEL, PI_STORE_SUMMARY_API_KEY
                              the OpenAI-compatible server `compact` summarises with
  NO_COLOR                    no colour on a terminal
\b
Shell completion (bash; zsh and fish: zsh_source, fish_source):
  eval "$(_PI_STORE_COMPLETE=bash_source pi-store)"
"""


@dataclass
class _Opener:
    """What the commands share: the database URL, and the store once a command asked for it."""

    url: str | None
    command: str | None
    store: SessionStore | None = None
    secrets: list[str] = field(default_factory=list)

    def where(self) -> str:
        from store.db.faults import masked_url

        return masked_url(self.url) if self.url else "the default database"

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


class _Commands(click.Group):
    """The command group: commands imported on demand (:data:`COMMANDS`), and every failure one
    line (see the module docstring)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(f"store.cli.{COMMANDS[cmd_name][0]}")  # registers its commands
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list, from :data:`COMMANDS` for the commands not imported yet."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is None and name in COMMANDS:
                rows.append((name, COMMANDS[name][1]))
            elif command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width - 6 - len(name))))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        """Parsing prints ``--help`` and ``--version`` (eager options), before :meth:`invoke`:
        output that cannot be written fails as it does there, in one line."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except BrokenPipeError:
            _silence_stdout()
            raise click.exceptions.Exit(141) from None
        except OSError as exc:
            from store.db.faults import fault_reason

            raise click.ClickException(fault_reason(exc) or exc.strerror or str(exc)) from exc

    def invoke(self, ctx: click.Context) -> object:
        for name in ("stdout", "stderr"):  # started with it closed (>&-): what Python's print does, drop the text
            if getattr(sys, name) is None:
                setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 (open for the life of the process)
            elif isinstance(stream := getattr(sys, name), io.TextIOWrapper):
                # a lone surrogate (legal in Pi's JSON, stored as such) cannot be encoded: printed as
                # its escape, \ud800, as JSON writes it, where it failed the whole listing
                stream.reconfigure(errors="backslashreplace")
        terminated = _on_sigterm_interrupt(ctx)
        try:
            try:
                result = super().invoke(ctx)
                sys.stdout.flush()  # output that cannot be written (a full disk) fails the command, not the exit
            finally:
                # the store closes here (a SQLite checkpoint, say), also after a command that
                # failed, where Ctrl-C is still a quiet 130 and a failure one line; after the
                # command it was click's "Aborted!" and exit 1
                ctx.close()
            return result
        except KeyboardInterrupt:
            ctx.exit(143 if terminated else 130)
        except BrokenPipeError:  # the reader left (``| head``): stop quietly, as a killed writer would
            _silence_stdout()
            ctx.exit(141)
        except click.ClickException as exc:
            exc.message = _mask(ctx, exc.message)
            raise
        except (click.exceptions.Exit, click.Abort):
            raise
        except StoreError as exc:
            raise click.ClickException(_mask(ctx, str(exc))) from exc
        except Exception as exc:
            if os.environ.get("PI_STORE_DEBUG") == "1":
                raise
            raise click.ClickException(_mask(ctx, _describe(ctx, exc))) from exc


def _on_sigterm_interrupt(ctx: click.Context) -> list[bool]:
    """Until ``ctx`` closes, a SIGTERM raises ``KeyboardInterrupt``, as Ctrl-C does (psycopg then
    cancels a running query, which the server went on with after the process died), unless
    someone else handles the signal; returns a list that holds ``True`` once it came. (Restored
    at the close: a command run inside another program leaves its handler as it found it.)"""
    import signal

    came: list[bool] = []

    def interrupt(_signum: int, _frame: object) -> None:
        came.append(True)
        raise KeyboardInterrupt

    with contextlib.suppress(ValueError):  # not the main thread (a command invoked from a thread)
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, interrupt)
            ctx.call_on_close(lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    return came


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush does not fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _opener(ctx: click.Context) -> _Opener | None:
    return ctx.obj if isinstance(ctx.obj, _Opener) else None


def _mask(ctx: click.Context, text: str) -> str:
    from store.db.faults import mask_secrets

    opener = _opener(ctx)
    return mask_secrets(text, *(opener.secrets if opener else ()))


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _describe(ctx: click.Context, exc: Exception) -> str:
    """``<what> (<where>)`` for an exception the store did not raise on purpose."""
    opener = _opener(ctx)
    command = f"pi-store {opener.command}" if opener and opener.command else "pi-store"
    from sqlalchemy.exc import DBAPIError

    from store.db.faults import Summarised, fault_reason

    if isinstance(exc, Summarised):  # a database fault, already worded with its database
        return str(exc)
    if isinstance(exc, (DBAPIError, sqlite3.Error)) or type(exc).__module__.startswith("psycopg"):
        driver = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        what = fault_reason(exc) or _first_line(str(driver)) or type(driver).__name__
        return f"{what} ({opener.where() if opener else command})"
    if isinstance(exc, OSError):
        what = fault_reason(exc) or exc.strerror or _first_line(str(exc)) or type(exc).__name__
        return f"{what} ({exc.filename if exc.filename is not None else command})"
    return f"{type(exc).__name__}: {_first_line(str(exc))} ({command})"


class _WarningsToStderr(logging.Handler):
    """The store's logged warnings (e.g. a full-text index left behind) as ``warning: ...`` lines."""

    def __init__(self, opener: _Opener) -> None:
        super().__init__(logging.WARNING)
        self.opener = opener

    def emit(self, record: logging.LogRecord) -> None:
        from store.db.faults import mask_secrets

        click.echo(f"warning: {mask_secrets(record.getMessage(), *self.opener.secrets)}", err=True)


def _route_warnings(ctx: click.Context, opener: _Opener) -> None:
    logger = logging.getLogger("store")
    handler = _WarningsToStderr(opener)
    logger.addHandler(handler)
    ctx.call_on_close(lambda: logger.removeHandler(handler))


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]}, epilog=ENVIRONMENT)
@click.option("--db", "database", envvar="PI_STORE_DB", metavar="URL|FILE",
              help="Database: a SQLAlchemy URL or a SQLite file path (default: $PI_STORE_DB, else "
                   "~/.local/share/pi-store/sessions.db).")
@click.version_option(package_name="pi-session-store", prog_name="pi-store")
@click.pass_context
def main(ctx: click.Context, database: str | None) -> None:
    """A SQL home for Pi coding-agent sessions: import, inspect, list and export them."""
    from store.db.engine import resolve_url

    if database is not None and not database.strip():  # not the default database by accident
        raise click.BadParameter("empty (leave --db out for $PI_STORE_DB or the default database)",
                                 param_hint="--db")
    url = resolve_url(database) if database else None
    opener = _Opener(url, ctx.invoked_subcommand)
    if url:
        with contextlib.suppress(ValueError):  # not a URL at all: opening it says so
            opener.secrets.append(urllib.parse.urlsplit(url).password or "")
    ctx.obj = opener
    ctx.call_on_close(opener.close)
    _route_warnings(ctx, opener)


def current_url() -> str:
    """The database URL of this invocation (``--db``, ``$PI_STORE_DB`` or the default), not opened."""
    from store.db.engine import default_url

    opener = click.get_current_context().find_object(_Opener)
    opener.url = opener.url or default_url()
    return opener.url


def current_store(*, reading: bool = False) -> SessionStore:
    """The store of this invocation, opened on first use (read-only where it must be, for read
    commands; ``reading``: this use of a command that can also write only reads)."""
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from store.db.faults import masked_url

    opener = click.get_current_context().find_object(_Opener)
    if opener.store is None:
        url = current_url()
        try:
            opener.store = open_store(url, for_reading=reading or opener.command in READ_COMMANDS)
        except (ArgumentError, NoSuchModuleError) as exc:  # not a database URL we know
            raise click.ClickException(f"cannot open database {masked_url(url)}: {exc}") from exc
        except ModuleNotFoundError as exc:  # a dialect whose driver is not installed (postgresql+asyncpg://)
            raise click.ClickException(f"cannot open database {masked_url(url)}: its driver is not installed "
                                       f"(no module named {exc.name!r})") from exc
    return opener.store


def open_store(url: str, *, for_reading: bool) -> SessionStore:
    """Open the store at ``url`` (creating or upgrading its schema where it can).

    ``for_reading``, a SQLite file that does not exist, or a database without the store's schema,
    is an error (reading never creates one), and
    one that cannot be written here (a read-only file or folder, a full disk: even the ``-shm``
    file SQLite needs for its WAL cannot be made) is opened read-only: ``mode=ro`` first, which
    stays right with concurrent writers, else ``immutable`` when no ``-wal`` file holds commits
    (see ``store.db.engine.sqlite_read_only_uri``). A write command on a database it cannot
    write fails before it starts, naming the database and the reason.
    """
    from sqlalchemy.exc import DBAPIError

    from store.db.engine import default_file, read_only_modes, sqlite_path
    from store.db.faults import CANNOT_WRITE, masked_url, sqlite_fault

    path = sqlite_path(url)
    if not for_reading and path is not None and path == default_file():  # the store nobody named: made here
        path.parent.mkdir(parents=True, exist_ok=True)
    if for_reading and path is not None and not path.exists():
        raise click.ClickException(f"no database at {path} (a write command, e.g. pi-store import, creates it)")
    if for_reading and path is not None and path.is_file() and path.stat().st_size == 0:  # SQLite: its header
        raise click.ClickException(f"no pi-store database at {path}: the file is empty "
                                   "(a write command, e.g. pi-store import, creates one)")
    if not for_reading and path is not None and (reason := _unwritable(path)):
        raise click.ClickException(f"cannot write to {masked_url(url)}: {reason}")
    try:
        return _connect(url, None, must_exist=for_reading)
    except DBAPIError as exc:
        if not for_reading or path is None or not path.is_file() or sqlite_fault(exc) not in CANNOT_WRITE:
            raise
        failure = exc
    for mode in read_only_modes(path):
        try:
            return _connect(url, mode, must_exist=True)
        except DBAPIError as exc:
            if sqlite_fault(exc) not in CANNOT_WRITE:
                raise
    raise failure


def _connect(url: str, read_only: ReadOnly | None, *, must_exist: bool = False) -> SessionStore:
    """The store at ``url``, its schema created or upgraded; ``must_exist``: a database without
    the store's schema (an empty PostgreSQL database, an empty SQLite file) is an error instead —
    a read command creates nothing."""
    from sqlalchemy import inspect

    from store.db.engine import ensure_schema, make_engine, script_head, stored_revision
    from store.db.faults import masked_url
    from store.session_store import SessionStore

    engine = make_engine(url, read_only=read_only, wal=not must_exist)
    try:
        if must_exist and not inspect(engine).has_table("alembic_version"):
            raise click.ClickException(f"no pi-store database at {masked_url(url)}: it holds no store yet "
                                       "(a write command, e.g. pi-store import, creates one)")
        if read_only is not None and (stored := stored_revision(engine)) != script_head():
            raise click.ClickException(  # the upgrade would write ("unable to open database file")
                f"{masked_url(url)}: its schema is at revision {stored}, this pi-store's is {script_head()}, and "
                "it cannot be upgraded here (this process cannot write the database): run pi-store where it can, "
                "or the pi-store that wrote it")
        ensure_schema(engine)  # Alembic (slow to import) only when an upgrade is needed
    except BaseException:
        engine.dispose()
        raise
    return SessionStore(engine)


def _unwritable(path: Path) -> str | None:
    """Why SQLite cannot write the database file ``path``, where the file system says so up front."""
    folder = path.parent
    if path.exists():
        if not os.access(path, os.W_OK):
            return "the database file is read-only"
        if not os.access(folder, os.W_OK) and not Path(f"{path}-wal").exists():
            return f"its folder {folder} is read-only (SQLite writes its -wal and -shm files there)"
        for side in (Path(f"{path}-wal"), Path(f"{path}-shm")):
            with contextlib.suppress(FileNotFoundError):  # gone meanwhile (the owner's stat): made anew
                if side.exists() and not os.access(side, os.W_OK):
                    return (f"its file {side} cannot be written here (owner: {_owner(side)}); every process "
                            "that writes the database shares it: run pi-store as that user, or let the users "
                            "who write the store write it (a group, or the owner's umask)")
    elif not folder.is_dir():
        return f"its folder {folder} does not exist"
    elif not os.access(folder, os.W_OK):
        return f"its folder {folder} is read-only"
    return None


def _owner(path: Path) -> str:
    """The name of the user who owns ``path`` (its uid when it has none)."""
    import pwd

    uid = path.stat().st_uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


MAX_LIMIT = 2**63 - 1  # the largest LIMIT both engines take (a 64-bit integer)


def finite(_ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A click callback refusing NaN, which passes every range check."""
    if value is not None and math.isnan(value):
        raise click.BadParameter("not a number", param=param)
    return value


def emit(value: object, *, indent: int = 0) -> None:
    """Print one JSON document (JSON.stringify's form: raw UTF-8, lone surrogates escaped), on one
    line or, with ``indent``, as ``JSON.stringify(value, null, indent)`` for a person to read."""
    from store.format.jsjson import js_stringify

    sys.stdout.write(js_stringify(value, indent) + "\n")


@main.command("path")
@click.option("--json", "as_json", is_flag=True, help='Print {"database": ..., "url": ..., "engine": ...}.')
@click.option("--datasette-metadata", "metadata", is_flag=True,
              help="Print Datasette metadata for this SQLite store (titles, descriptions, facets, queries).")
def path_command(as_json: bool, metadata: bool) -> None:
    """Print the database: a SQLite file's path, else its URL (password masked).

    So ``datasette "$(pi-store path)"`` opens a SQLite store, and
    ``pi-store path --datasette-metadata | datasette "$(pi-store path)" -m -`` opens it with the
    metadata shipped with the package (store/analysis/datasette.json). Nothing is opened or created.
    """
    from store.db.engine import normalize_url, sqlite_path
    from store.db.faults import masked_url

    url = current_url()
    path = sqlite_path(url)
    database = str(path) if path is not None else masked_url(url)
    if metadata:
        if path is None:
            raise click.ClickException(f"Datasette opens SQLite files, not {database}")
        emit(datasette_metadata(path))
    elif as_json:
        emit({"database": database, "url": masked_url(url), "engine": normalize_url(url).get_backend_name(),
              "exists": path.exists() if path is not None else None})
    else:
        click.echo(database)


def datasette_metadata(path: Path) -> dict:
    """The package's Datasette metadata for the SQLite file ``path``: Datasette names a database
    after its file (``sessions.db``: ``sessions``), and the metadata of a database under its name."""
    import json

    shipped = json.loads((Path(__file__).parents[1] / "analysis" / "datasette.json").read_text("utf-8"))
    (database,) = shipped["databases"].values()
    return {**shipped, "databases": {path.stem: database}}
