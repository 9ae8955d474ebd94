"""Exporting sessions as JSONL: the stored lines with their own terminators, so an imported file
comes back byte for byte; optionally the v3 form Pi writes when it migrates a file; and whole
stores in Pi's folder layout (``--all``).

The database builds each line's bytes (``raw`` or ``line`` + ``eol``) and hands them over as
blobs, a chunk of rows at a time, so Python touches one bytes object per line and never decodes
or re-encodes text.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from store.db import queries
from store.db.engine import is_sqlite, read_transaction
from store.db.schema import sessions

if TYPE_CHECKING:
    from store.session_store import SessionStore

CHUNK_BYTES = 1 << 20
FETCH_ROWS = 2000

_LINES = {
    ("sqlite", False): "SELECT CAST(COALESCE(raw, line) || eol AS BLOB) FROM entries WHERE session_pk = ? ORDER BY seq",
    ("sqlite", True): "SELECT CAST(line || char(10) AS BLOB) FROM entries WHERE session_pk = ? AND kind <> 'skipped' "
                      "ORDER BY seq",
    ("postgresql", False): "SELECT COALESCE(raw, convert_to(line, 'UTF8')) || convert_to(eol, 'UTF8') FROM entries "
                           "WHERE session_pk = %s ORDER BY seq",
    ("postgresql", True): "SELECT convert_to(line || E'\\n', 'UTF8') FROM entries WHERE session_pk = %s "
                          "AND kind <> 'skipped' ORDER BY seq",
}


def session_bytes(conn: Connection, session_pk: int, as_migrated: bool = False) -> Iterator[bytes]:
    """The bytes of a stored session in chunks of whole lines (about ``CHUNK_BYTES`` each), read
    inside ``conn``'s transaction. ``as_migrated``: every line Pi keeps, in its v3 form, ``\\n``-ended."""
    dbapi = conn.connection.dbapi_connection
    if is_sqlite(conn):
        cursor = dbapi.cursor()
        sql = _LINES["sqlite", as_migrated]
    else:  # a server-side cursor: the rows stream instead of arriving all at once
        cursor = dbapi.cursor(name="pi_store_export")
        sql = _LINES["postgresql", as_migrated]
    try:
        cursor.execute(sql, (session_pk,))
        buffer: list[bytes] = []
        size = 0
        while rows := cursor.fetchmany(FETCH_ROWS):
            for (data,) in rows:
                buffer.append(data)
                size += len(data)
            if size >= CHUNK_BYTES:
                yield b"".join(buffer)
                buffer, size = [], 0
        if buffer:
            yield b"".join(buffer)
    finally:
        cursor.close()


def session_sha256(conn: Connection, session_pk: int, limit: int | None = None) -> tuple[Any, int]:
    """sha256 of what export writes for a stored session (of its first ``limit`` bytes when given),
    and how many bytes that hashed."""
    hasher, size = hashlib.sha256(), 0
    for chunk in session_bytes(conn, session_pk):
        if limit is not None:
            chunk = chunk[:limit - size]
        hasher.update(chunk)
        size += len(chunk)
        if limit is not None and size >= limit:
            break
    return hasher, size


def iter_export(store: SessionStore, session_id: str, as_migrated: bool = False) -> Iterator[bytes]:
    """The session's bytes in chunks of whole lines. ``as_migrated`` (for a file that needed
    migration): Pi's rewrite — every line Pi keeps, in its v3 form, ``\\n``-terminated."""
    with read_transaction(store.engine) as conn:
        row = queries.stored_session(conn, session_id)
        yield from session_bytes(conn, row.pk, as_migrated and row.migrated_from is not None)


def export_jsonl(store: SessionStore, session_id: str, path: str | os.PathLike, as_migrated: bool = False) -> int:
    """Write :func:`iter_export` to ``path``; returns the number of bytes written."""
    written = 0
    with Path(path).open("wb") as out:
        for chunk in iter_export(store, session_id, as_migrated):
            out.write(chunk)
            written += len(chunk)
    return written


# ---------------------------------------------------------------------------------------------
# Pi's folder layout


def pi_session_dir_name(cwd: str) -> str:
    """Pi's folder for a working directory: ``--`` + the resolved path without its leading
    separator, ``/``, ``\\`` and ``:`` turned into ``-`` + ``--`` (Pi's ``getDefaultSessionDirPath``)."""
    resolved = os.path.abspath(os.path.expanduser(cwd) if cwd == "~" or cwd.startswith("~/") else cwd)
    inner = resolved[1:] if resolved[:1] in ("/", "\\") else resolved
    return "--" + inner.replace("/", "-").replace("\\", "-").replace(":", "-") + "--"


def _file_part(text: str) -> str:
    return text.replace("/", "-").replace("\\", "-").replace("\0", "-")


def pi_relative_path(session_id: str, cwd: str, created: str | None, has_header: bool) -> Path:
    """Where Pi would keep a session below its sessions folder: ``--<cwd>--/<time>_<id>.jsonl``
    with the header's timestamp (``:`` and ``.`` as ``-``). A session with no header, no cwd
    or no timestamp string (Pi could not have written it) goes to the top: ``<id>.jsonl``."""
    if has_header and cwd and created is not None:
        stamp = created.replace(":", "-").replace(".", "-")
        return Path(pi_session_dir_name(cwd)) / _file_part(f"{stamp}_{session_id}.jsonl")
    return Path(_file_part(f"{session_id}.jsonl"))


@dataclass(frozen=True, slots=True)
class ExportedFile:
    session_id: str
    path: Path
    bytes: int

    def to_json(self) -> dict:
        return {"sessionId": self.session_id, "path": str(self.path), "bytes": self.bytes}


def export_all(store: SessionStore, directory: str | os.PathLike, as_migrated: bool = False,
               progress: Callable[[ExportedFile], None] | None = None) -> list[ExportedFile]:
    """Write every stored session into ``directory`` in Pi's layout (:func:`pi_relative_path`)."""
    root = Path(directory)
    with read_transaction(store.engine) as conn:
        listing = conn.execute(select(
            sessions.c.pk, sessions.c.session_id, sessions.c.cwd, sessions.c.created, sessions.c.header_seq,
            sessions.c.migrated_from,
        ).order_by(sessions.c.pk)).all()
    done: list[ExportedFile] = []
    for pk, session_id, cwd, created, header_seq, migrated_from in listing:
        target = root / pi_relative_path(session_id, cwd, created, header_seq is not None)
        target.parent.mkdir(parents=True, exist_ok=True)
        written = 0
        with target.open("wb") as out, read_transaction(store.engine) as conn:
            for chunk in session_bytes(conn, pk, as_migrated and migrated_from is not None):
                out.write(chunk)
                written += len(chunk)
        done.append(ExportedFile(session_id, target, written))
        if progress is not None:
            progress(done[-1])
    return done
