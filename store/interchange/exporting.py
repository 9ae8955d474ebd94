"""Exporting a session as JSONL: the stored lines with their own terminators, so an imported
file comes back byte for byte; optionally the v3 form Pi writes when it migrates a file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import select

from store.db import queries
from store.db.engine import read_transaction
from store.db.schema import entries
from store.errors import SessionNotFound
from store.loading import SKIPPED

if TYPE_CHECKING:
    from store.session_store import SessionStore

CHUNK_BYTES = 1 << 20


def iter_export(store: SessionStore, session_id: str, as_migrated: bool = False) -> Iterator[bytes]:
    """The session's bytes in chunks of whole lines. ``as_migrated`` (for a file that needed
    migration): Pi's rewrite — every line Pi keeps, in its v3 form, ``\\n``-terminated."""
    with read_transaction(store.engine) as conn:
        row = queries.session_by_id(conn, session_id)
        if row is None:
            raise SessionNotFound(f"no session {session_id!r} in the store")
        as_migrated = as_migrated and row.migrated_from is not None
        stmt = (select(entries.c.kind, entries.c.line, entries.c.raw, entries.c.eol)
                .where(entries.c.session_pk == row.pk).order_by(entries.c.seq))
        buffer: list[bytes] = []
        size = 0
        for kind, line, raw, eol in conn.execute(stmt).yield_per(2000):
            if as_migrated:
                if kind == SKIPPED:
                    continue
                data = line.encode("utf-8", "surrogatepass") + b"\n"
            else:
                data = (raw if raw is not None else line.encode("utf-8")) + eol.encode("ascii")
            buffer.append(data)
            size += len(data)
            if size >= CHUNK_BYTES:
                yield b"".join(buffer)
                buffer, size = [], 0
        if buffer:
            yield b"".join(buffer)


def export_jsonl(store: SessionStore, session_id: str, path: str | os.PathLike, as_migrated: bool = False) -> int:
    """Write :func:`iter_export` to ``path``; returns the number of bytes written."""
    written = 0
    with Path(path).open("wb") as out:
        for chunk in iter_export(store, session_id, as_migrated):
            out.write(chunk)
            written += len(chunk)
    return written
