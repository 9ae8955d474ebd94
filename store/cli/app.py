"""The ``pi-store`` command group and what every command shares: the store and JSON output.

Every failure ends in one line on stderr and exit status 1, never a traceback: the store's own
errors (``StoreError``) as their message, anything else as ``Error: <what> (<where>)``, with
passwords masked (``PI_STORE_DEBUG=1`` shows the traceback instead). Ctrl-C exits 130 quietly.

The store is opened when a command first asks for it (``--help`` and usage errors never
connect). Read commands (:data:`READ_COMMANDS`) still read a SQLite database that cannot be
written (a read-only file or folder, a full disk): read-only, see :func:`open_store`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from store.db.engine import (
    ReadOnly,
    default_url,
    ensure_schema,
    make_engine,
    normalize_url,
    sqlite_path,
    wal_holds_commits,
)
from store.db.faults import CANNOT_WRITE, Summarised, fault_reason, mask_secrets, masked_url, sqlite_fault
from store.errors import StoreError
from store.format import js_stringify
from store.session_store import SessionStore

READ_COMMANDS = frozenset({"list", "inspect", "search", "sql", "stats", "export", "verify"})

ENVIRONMENT = """\b
Environment:
  PI_STORE_DB                 database URL (as --db)
  PI_STORE_CONNECT_TIMEOUT    seconds to wait for a PostgreSQL server (default 10, at least 2; 0: no limit)
  PI_STORE_LOCK_TIMEOUT       seconds to wait for a lock held by another writer (default 30)
  PI_STORE_STATEMENT_TIMEOUT  seconds a PostgreSQL statement may run (default 0: no limit)
  PI_STORE_DEBUG=1            show the traceback of an unexpected error
"""


@dataclass
class _Opener:
    """What the commands share: the database URL, and the store once a command asked for it."""

    url: str | None
    command: str | None
    store: SessionStore | None = None
    secrets: list[str] = field(default_factory=list)

    def where(self) -> str:
        return masked_url(self.url) if self.url else "the default database"

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


class _Commands(click.Group):
    """The command group: every failure becomes one line (see the module docstring)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            ctx.exit(130)
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


def _opener(ctx: click.Context) -> _Opener | None:
    return ctx.obj if isinstance(ctx.obj, _Opener) else None


def _mask(ctx: click.Context, text: str) -> str:
    opener = _opener(ctx)
    return mask_secrets(text, *(opener.secrets if opener else ()))


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _describe(ctx: click.Context, exc: Exception) -> str:
    """``<what> (<where>)`` for an exception the store did not raise on purpose."""
    if isinstance(exc, Summarised):  # a database fault, already worded with its database
        return str(exc)
    opener = _opener(ctx)
    command = f"pi-store {opener.command}" if opener and opener.command else "pi-store"
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
        click.echo(f"warning: {mask_secrets(record.getMessage(), *self.opener.secrets)}", err=True)


def _route_warnings(ctx: click.Context, opener: _Opener) -> None:
    logger = logging.getLogger("store")
    handler = _WarningsToStderr(opener)
    logger.addHandler(handler)
    ctx.call_on_close(lambda: logger.removeHandler(handler))


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]}, epilog=ENVIRONMENT)
@click.option("--db", "url", envvar="PI_STORE_DB", help="Database URL (default: $PI_STORE_DB or a SQLite file).")
@click.pass_context
def main(ctx: click.Context, url: str | None) -> None:
    """A SQL home for Pi coding-agent sessions: import, inspect, list and export them."""
    opener = _Opener(url, ctx.invoked_subcommand)
    if url:
        with contextlib.suppress(ArgumentError):  # not a URL at all: opening it says so
            opener.secrets.append(normalize_url(url).password or "")
    ctx.obj = opener
    ctx.call_on_close(opener.close)
    _route_warnings(ctx, opener)


def current_store() -> SessionStore:
    """The store of this invocation, opened on first use (read-only where it must be, for read commands)."""
    opener = click.get_current_context().find_object(_Opener)
    if opener.store is None:
        opener.url = opener.url or default_url()
        try:
            opener.store = open_store(opener.url, for_reading=opener.command in READ_COMMANDS)
        except (ArgumentError, NoSuchModuleError) as exc:  # not a database URL we know
            raise click.ClickException(f"cannot open database {masked_url(opener.url)}: {exc}") from exc
    return opener.store


def open_store(url: str, *, for_reading: bool) -> SessionStore:
    """Open the store at ``url`` (creating or upgrading its schema where it can).

    A SQLite file that cannot be written here (a read-only file or folder, a full disk: even the
    ``-shm`` file SQLite needs for its WAL cannot be made) is opened read-only ``for_reading``:
    ``mode=ro`` first, which stays right with concurrent writers, else ``immutable`` when no
    ``-wal`` file holds commits (see ``store.db.engine.sqlite_read_only_uri``). A write command
    on a database it cannot write fails before it starts, naming the database and the reason.
    """
    path = sqlite_path(url)
    if not for_reading and path is not None and (reason := _unwritable(path)):
        raise click.ClickException(f"cannot write to {masked_url(url)}: {reason}")
    try:
        return _connect(url, None)
    except DBAPIError as exc:
        if not for_reading or path is None or not path.is_file() or sqlite_fault(exc) not in CANNOT_WRITE:
            raise
        failure = exc
    for mode in ("ro",) if wal_holds_commits(path) else ("ro", "immutable"):
        try:
            return _connect(url, mode)
        except DBAPIError as exc:
            if sqlite_fault(exc) not in CANNOT_WRITE:
                raise
    raise failure


def _connect(url: str, read_only: ReadOnly | None) -> SessionStore:
    engine = make_engine(url, read_only=read_only)
    try:
        ensure_schema(engine)
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
    elif folder.is_dir() and not os.access(folder, os.W_OK):
        return f"its folder {folder} is read-only"
    return None


def emit(value: object) -> None:
    """Print one JSON document (JSON.stringify's form: raw UTF-8, lone surrogates escaped)."""
    sys.stdout.write(js_stringify(value) + "\n")
