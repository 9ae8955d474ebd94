"""Database faults in one line: what happened and where, with secrets masked.

SQLAlchemy words a driver error over several lines (the driver's message, the SQL, its
parameters, a link) and a PostgreSQL URL carries its password. :func:`fault_reason` names the
faults an operator can act on (disk full, read-only, locked, corrupt, unreachable server) in the
driver's own words; :func:`mask_secrets` removes passwords from any text. The engines
(``store.db.engine``) raise these faults as their SQLAlchemy class with a one-line ``str`` (the
statement stays on ``.statement``).
"""

from __future__ import annotations

import errno
import re
import sqlite3
from typing import Any

from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

__all__ = ["CANNOT_WRITE", "Summarised", "fault_reason", "mask_secrets", "masked_url", "sqlite_fault", "with_summary"]

_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s@]*@")
_KEY_PASSWORD = re.compile(r"""(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s'"]+)""", re.IGNORECASE)

# sqlite3 error names (Python 3.11+: ``sqlite_errorname``) by what they mean for the operator
_SQLITE_PREFIXES = (
    ("SQLITE_FULL", "disk full"),
    ("SQLITE_READONLY", "read-only"),
    ("SQLITE_BUSY", "locked"),
    ("SQLITE_LOCKED", "locked"),
    ("SQLITE_CORRUPT", "corrupt"),
    ("SQLITE_NOTADB", "corrupt"),
    ("SQLITE_CANTOPEN", "cannot open"),
    ("SQLITE_IOERR", "I/O error"),
    ("SQLITE_PERM", "cannot open"),
)
# what stops a write here (so a read may still go ahead on a read-only connection)
CANNOT_WRITE = frozenset({"disk full", "read-only", "cannot open", "I/O error"})


def mask_secrets(text: str, *secrets: str | None) -> str:
    """``text`` with URL passwords, ``password=...`` values and the given secrets as ``***``."""
    text = _URL_PASSWORD.sub(r"\1***@", text)
    text = _KEY_PASSWORD.sub(r"\1***", text)
    for secret in secrets:
        if secret and len(secret) >= 3:  # a one- or two-letter password would mask half the text
            text = text.replace(secret, "***")
    return text


def masked_url(url: URL | str) -> str:
    """A database URL as text, its password as ``***`` (and no driver name: ``postgresql://``)."""
    if isinstance(url, URL):
        return url.set(drivername=url.get_backend_name()).render_as_string(hide_password=True)
    return mask_secrets(url)


def _sqlite_kind(error: sqlite3.Error) -> str | None:
    name = getattr(error, "sqlite_errorname", "") or ""
    return next((kind for prefix, kind in _SQLITE_PREFIXES if name.startswith(prefix)), None)


def _driver_error(error: BaseException) -> BaseException:
    return error.orig if isinstance(error, DBAPIError) and error.orig is not None else error


def sqlite_fault(error: BaseException) -> str | None:
    """The kind of a SQLite fault (``disk full``, ``read-only``, ``locked``, ``corrupt``,
    ``cannot open``, ``I/O error``), for SQLAlchemy's errors and sqlite3's own; else None."""
    driver = _driver_error(error)
    return _sqlite_kind(driver) if isinstance(driver, sqlite3.Error) else None


def waits_too_long(error: BaseException) -> bool:
    """Whether ``error`` ended a wait — for a lock another writer holds, or past the statement
    timeout — rather than reporting anything about the data."""
    driver = _driver_error(error)
    if isinstance(driver, sqlite3.Error):
        return _sqlite_kind(driver) == "locked"
    return getattr(driver, "sqlstate", None) in ("55P03", "57014")  # lock_not_available, query_canceled


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def fault_reason(error: BaseException, *, connecting: bool = False, connect_timeout_s: int | None = None) -> str | None:
    """The reason in one line when ``error`` is a fault an operator can act on, else None.

    ``connecting``: the error ended an attempt to connect (PostgreSQL: any driver error then is
    "cannot connect"); ``connect_timeout_s`` is how long that attempt waited.
    """
    driver = _driver_error(error)
    if isinstance(driver, sqlite3.Error):
        kind = _sqlite_kind(driver)
        message = str(driver) or type(driver).__name__
        if getattr(driver, "sqlite_errorname", "") == "SQLITE_IOERR_SHMSIZE":  # the -shm file cannot grow
            return f"disk full: no room for the database's -shm file ({message})"
        if kind is None:
            return None
        return f"disk full: {message}" if kind == "disk full" else message
    if isinstance(driver, OSError) and driver.errno == errno.ENOSPC:
        return f"disk full: {driver.strerror}"
    module = type(driver).__module__
    if module.startswith("psycopg"):
        sqlstate = getattr(driver, "sqlstate", None)
        message = _first_line(str(driver))
        if type(driver).__name__ == "ConnectionTimeout":
            return f"timed out after {connect_timeout_s} s" if connect_timeout_s else "timed out"
        if sqlstate == "53100":
            return f"disk full: {message}"
        if sqlstate == "55P03":  # lock_not_available: lock_timeout expired
            return f"database is locked: {message}"
        if sqlstate == "57014":  # query_canceled: statement_timeout expired
            return f"timed out: {message}"
        if sqlstate in ("25006", "XX001", "XX002"):  # read-only transaction, data / index corrupted
            return message
        if connecting or (sqlstate is None and type(driver).__name__ == "OperationalError"):  # lost server
            message = re.sub(r"^connection failed: ", "", message)
            message = re.sub(r'^connection to server at "[^"]*"(?:, port \d+)? failed: ', "", message)
            message = re.sub(r"^FATAL:\s+", "", message)
            if "unsupported startup parameter: options" in message:  # how PgBouncer refuses them
                message += " (a pooler in transaction mode? add pooler=transaction to the URL: README, Servers)"
            return message
    return None


class Summarised:
    """Mixin of a SQLAlchemy error whose ``str`` is one line (``summary``)."""

    summary: str

    def __str__(self) -> str:
        return self.summary


_SUMMARISED: dict[type, type] = {}


def with_summary(error: DBAPIError, summary: str) -> DBAPIError:
    """``error`` as an instance of its own class (``except OperationalError`` still catches it)
    whose ``str`` is ``summary``; statement, parameters and driver error stay on it."""
    cls: Any = type(error)
    summarised = _SUMMARISED.get(cls)
    if summarised is None:
        summarised = _SUMMARISED[cls] = type(cls.__name__, (Summarised, cls), {"__module__": cls.__module__})
    new = summarised.__new__(summarised)
    new.__dict__.update(error.__dict__)
    new.args = error.args
    new.summary = summary
    return new


def error_line(error: BaseException) -> str:
    """What went wrong in one line, never the SQL or its parameters: an error's own summary (see
    :func:`with_summary`), else the fault's reason (:func:`fault_reason`), else the first line of
    what the driver said."""
    if isinstance(error, Summarised):
        return error.summary
    return fault_reason(error) or _first_line(str(getattr(error, "orig", None) or error)) or type(error).__name__
