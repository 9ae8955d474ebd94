"""Importing one session file: read it the way Pi reads it, keep every byte, store it in one
transaction. Re-importing the same bytes changes nothing; different bytes under a stored session
id are refused (``SessionExists``) rather than merged."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from store.bulk import store_session_rows
from store.db import queries
from store.db.engine import write_transaction
from store.db.schema import sessions
from store.errors import ImportFailed, SessionExists
from store.format import iter_lines
from store.loading import ENTRY, VALUE, LineWarning, load_lines, session_id_for

if TYPE_CHECKING:
    from store.session_store import SessionStore


@dataclass(slots=True)
class ImportReport:
    """What one import did."""

    path: str
    session_id: str
    imported: bool  # False: the same bytes were already stored
    lines: int = 0
    entries: int = 0
    bytes: int = 0
    sha256: str = ""
    pi_valid: bool = True
    migrated_from: str | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "path": self.path, "sessionId": self.session_id, "imported": self.imported, "lines": self.lines,
            "entries": self.entries, "bytes": self.bytes, "sha256": self.sha256, "piValid": self.pi_valid,
            "migratedFrom": self.migrated_from, "warnings": self.warnings,
        }


class _HashingReader:
    """A binary reader that hashes and counts what passes through it."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self.sha256 = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self.sha256.update(data)
        self.size += len(data)
        return data


def import_file(store: SessionStore, path: str | os.PathLike) -> ImportReport:
    """Store one session file (see module docstring)."""
    path = Path(path)
    try:
        with path.open("rb") as stream:
            reader = _HashingReader(stream)
            loaded = load_lines(iter_lines(reader))
            stat = os.fstat(stream.fileno())
    except OSError as exc:
        raise ImportFailed(f"{path}: cannot read: {exc.strerror or exc}") from exc
    sha = reader.sha256.hexdigest()
    session_id = session_id_for(loaded, path.name, sha)
    report = ImportReport(
        str(path), session_id, imported=True, lines=len(loaded.rows),
        entries=sum(row.kind in (ENTRY, VALUE) for row in loaded.rows), bytes=reader.size, sha256=sha,
        pi_valid=loaded.pi_valid, migrated_from=loaded.migrated_from,
    )
    warnings = list(loaded.warnings)
    if loaded.invalid_reason:
        warnings.insert(0, LineWarning(1, loaded.invalid_reason))
    with write_transaction(store.engine) as conn:
        existing = queries.session_by_id(conn, session_id)
        if existing is not None:
            if existing.source_sha256 == sha:
                report.imported = False
                return report
            raise SessionExists(
                f"{path}: session {session_id} is already stored with different content "
                f"(stored sha256 {existing.source_sha256 or 'none: written through the API'}, file {sha})"
            )
        spk = store_session_rows(
            conn, session_id, loaded.header, loaded.rows, pi_valid=loaded.pi_valid,
            mtime_ms=stat.st_mtime * 1000, warnings=warnings,
        )
        conn.execute(sessions.update().where(sessions.c.pk == spk).values(
            source_path=str(path.resolve()), source_sha256=sha, source_bytes=reader.size,
            source_mtime_ms=int(stat.st_mtime * 1000), migrated_from=loaded.migrated_from,
        ))
    report.warnings = [w.render(str(path)) for w in warnings]
    return report
