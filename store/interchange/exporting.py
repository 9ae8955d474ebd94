"""Exporting sessions as JSONL: the stored lines with their own terminators, so an imported file
comes back byte for byte; optionally the v3 form Pi writes when it migrates a file; and whole
stores in Pi's folder layout (``--all``).

Every file is written to a temporary file in the target's folder and renamed over the target only
once it is complete and on disk (:func:`write_atomically`): a failed export — no such session, a
database error, a full disk, an interrupt — leaves an existing file as it was. An existing file is
only replaced when it is the export or the start of it (an older export of the session); one that
holds anything more — the lines Pi appended to an exported file, another file — is refused
(``ExportRefused``) unless the caller forces it.

The database builds each line's bytes (``raw`` or ``line`` + ``eol``) and hands them over as
blobs, a chunk of rows at a time, so Python touches one bytes object per line and never decodes
or re-encodes text.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from store.db import queries
from store.db.engine import is_sqlite, read_transaction, sqlite_path
from store.db.schema import sessions
from store.errors import ExportRefused, StoreError

if TYPE_CHECKING:
    from store.session_store import SessionStore

CHUNK_BYTES = 1 << 20
FETCH_ROWS = 2000
ALL_ROWS = 2**31 - 1  # a ``below_seq`` past every row

_LINES = {
    ("sqlite", False): "SELECT CAST(COALESCE(raw, line) || eol AS BLOB) FROM entries WHERE session_pk = ? AND seq < ? "
                       "ORDER BY seq",
    ("sqlite", True): "SELECT CAST(line || char(10) AS BLOB) FROM entries WHERE session_pk = ? AND seq < ? "
                      "AND kind <> 'skipped' ORDER BY seq",
    ("postgresql", False): "SELECT COALESCE(raw, convert_to(line, 'UTF8')) || convert_to(eol, 'UTF8') FROM entries "
                           "WHERE session_pk = %s AND seq < %s ORDER BY seq",
    ("postgresql", True): "SELECT convert_to(line || E'\\n', 'UTF8') FROM entries WHERE session_pk = %s "
                          "AND seq < %s AND kind <> 'skipped' ORDER BY seq",
}


def session_bytes(conn: Connection, session_pk: int, as_migrated: bool = False,
                  below_seq: int = ALL_ROWS) -> Iterator[bytes]:
    """The bytes of a stored session in chunks of whole lines (about ``CHUNK_BYTES`` each), read
    inside ``conn``'s transaction. ``as_migrated``: every line Pi keeps, in its v3 form, ``\\n``-ended.
    ``below_seq``: only the rows before that one (the part a file held before the store wrote more)."""
    dbapi = conn.connection.dbapi_connection
    if is_sqlite(conn):
        cursor = dbapi.cursor()
        sql = _LINES["sqlite", as_migrated]
    else:  # a server-side cursor: the rows stream instead of arriving all at once
        cursor = dbapi.cursor("pi_store_export")  # positional: the asyncio adapter takes no keyword
        sql = _LINES["postgresql", as_migrated]
    error = conn.dialect.loaded_dbapi.Error
    try:
        cursor.execute(sql, (session_pk, below_seq))
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
    except error as exc:  # as SQLAlchemy raises it elsewhere (a damaged page: DatabaseError)
        raise DBAPIError.instance(sql, (session_pk, below_seq), exc, error, dialect=conn.dialect) from exc
    finally:
        cursor.close()


def session_sha256(conn: Connection, session_pk: int, limit: int | None = None,
                   below_seq: int = ALL_ROWS, as_migrated: bool = False) -> tuple[Any, int]:
    """sha256 of the stored lines as export writes them (``as_migrated``: in their migrated form;
    of the first ``limit`` bytes when given, of the rows before ``below_seq``), and how many bytes
    that hashed."""
    hasher, size = hashlib.sha256(), 0
    for chunk in session_bytes(conn, session_pk, as_migrated, below_seq=below_seq):
        if limit is not None:
            chunk = chunk[:limit - size]
        hasher.update(chunk)
        size += len(chunk)
        if limit is not None and size >= limit:
            break
    return hasher, size


def iter_export(store: SessionStore, session_id: str, as_migrated: bool = False) -> Iterator[bytes]:
    """The session's bytes in chunks of whole lines. ``as_migrated`` (for a file that needed
    migration): Pi's rewrite — every line Pi keeps, in its v3 form, ``\\n``-terminated — which is
    also what a migrated session the store has written to exports as (:func:`in_migrated_form`)."""
    with read_transaction(store.engine) as conn:
        row = queries.stored_session(conn, session_id)
        yield from session_bytes(conn, row.pk, in_migrated_form(row.migrated_from, row.diverged_seq, as_migrated))


def in_migrated_form(migrated_from: Any, diverged_seq: int | None, asked: bool) -> bool:
    """Whether a session exports in its migrated (v3) form: when asked, for a file that needed
    migration; and always once the store has written to such a session (``diverged_seq``): the
    rows it wrote name entries by the ids the migration gave them, which the file's own (v1)
    lines do not hold — Pi, migrating that file again, would draw new ones and lose the links
    (Pi itself rewrites a file it migrated as soon as it opens it)."""
    return migrated_from is not None and (asked or diverged_seq is not None)


def export_jsonl(store: SessionStore, session_id: str, path: str | os.PathLike, as_migrated: bool = False,
                 force: bool = False) -> int:
    """Write :func:`iter_export` to ``path`` (:func:`write_atomically`, which refuses to cut back a
    file holding more unless ``force``); returns the bytes written."""
    refuse_store_files(store, path)
    return write_atomically(path, iter_export(store, session_id, as_migrated), force=force)


def refuse_store_files(store: SessionStore, path: str | os.PathLike) -> None:
    """Raise ``StoreError`` when ``path`` is the store's own SQLite file (or its ``-wal``,
    ``-shm`` or ``-journal``): renaming an export over it replaced the whole database."""
    database = sqlite_path(store.engine.url)
    if database is None:
        return
    target = os.path.realpath(path)
    own = os.path.realpath(database)
    if target in {own, *(own + suffix for suffix in ("-wal", "-shm", "-journal"))}:
        raise StoreError(f"{path} is the store's own database file: export to another file")


def write_atomically(path: str | os.PathLike, chunks: Iterable[bytes], force: bool = False) -> int:
    """Write ``chunks`` to a new temporary file beside ``path`` (through a symlink: beside the file
    it names), fsync it, rename it over ``path`` and fsync the folder; returns the bytes written.

    An existing file is replaced only when its bytes are where the new ones start (the same file,
    or an older export of it), else ``ExportRefused`` is raised and nothing changes — unless
    ``force``. (The file is compared while the new one is written; a writer appending to it
    between that comparison and the rename would still lose its last lines: the window is the
    fsync and the rename.)

    Anything raised on the way (by ``chunks`` too, ``KeyboardInterrupt`` included) removes the
    temporary file and leaves ``path`` as it was. The new file keeps an existing file's permission
    bits; a new one gets the process's umask, as ``open`` gives it.

    A ``path`` that is not a regular file — a terminal, a pipe, ``/dev/stdout``, ``/dev/null`` — is
    written in place: renaming over it would replace the device or pipe with a file (as root,
    ``/dev/null`` itself).
    """
    iterator = iter(chunks)
    try:
        return _write_atomically(os.path.realpath(path), iterator, force)
    finally:  # a generator stopped by a failed write ends now, while what it reads is still open
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


def _write_atomically(target: str, chunks: Iterator[bytes], force: bool) -> int:
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.stat(target).st_mode):
            return _write_in_place(target, chunks)
    folder = os.path.dirname(target)
    temporary = os.path.join(folder, f".pi-store-{secrets.token_hex(8)}.tmp")
    written = 0
    fd = _create_beside(temporary, folder)
    try:
        with os.fdopen(fd, "wb") as out, _Existing(target, force) as existing:
            for chunk in chunks:
                existing.compare(chunk)
                out.write(chunk)
                written += len(chunk)
            existing.check_ended()
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temporary, os.stat(target).st_mode & 0o7777)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _fsync_folder(folder)
    return written


def _create_beside(temporary: str, folder: str) -> int:
    """Create the temporary file ``temporary`` in ``folder``; an error names the folder, in the
    error's own type ("folder X does not exist", "cannot write in folder X: Permission denied"),
    not the temporary file nobody asked for."""
    try:
        return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except FileNotFoundError:
        raise FileNotFoundError(f"folder {folder} does not exist") from None
    except OSError as exc:
        raise type(exc)(f"cannot write in folder {folder}: {exc.strerror or exc}") from None


class _Existing:
    """The file an export would replace, read alongside the new bytes: ``ExportRefused`` as soon
    as it differs from them, or at the end when it goes on past them or was replaced meanwhile.
    Nothing to compare when there is no such file, or when forced."""

    def __init__(self, target: str, force: bool) -> None:
        self.target, self.compared = target, 0
        self.file = None
        if not force:
            with contextlib.suppress(FileNotFoundError):
                self.file = open(target, "rb")  # noqa: SIM115  (closed by __exit__)

    def __enter__(self) -> _Existing:
        return self

    def __exit__(self, *_: object) -> None:
        if self.file is not None:
            self.file.close()

    def compare(self, chunk: bytes) -> None:
        if self.file is None:
            return
        old = self.file.read(len(chunk))
        if old != chunk[:len(old)]:
            differs = self.compared + next(i for i, (a, b) in enumerate(zip(old, chunk, strict=False)) if a != b)
            self._refuse(f"differs from the stored session at byte {differs:,}")
        self.compared += len(old)
        if len(old) < len(chunk):  # it ends inside the export: an older copy, replaced
            self.file.close()
            self.file = None

    def check_ended(self) -> None:
        if self.file is None:
            return
        if self.file.read(1):
            self._refuse(f"goes on past the stored session's {self.compared:,} bytes (lines written after it "
                         "was stored?)")
        now = os.stat(self.target)
        held = os.fstat(self.file.fileno())
        if (now.st_ino, now.st_dev, now.st_size) != (held.st_ino, held.st_dev, self.compared):
            self._refuse("changed while it was being exported")

    def _refuse(self, how: str) -> None:
        raise ExportRefused(f"{self.target} {how}: nothing written; import it first (pi-store sync / import), "
                            "or export with --force to replace it")


def _write_in_place(target: str, chunks: Iterable[bytes]) -> int:
    """Write ``chunks`` to the existing non-regular file ``target`` (a device, a pipe)."""
    written = 0
    with open(target, "wb") as out:
        for chunk in chunks:
            out.write(chunk)
            written += len(chunk)
    return written


def _fsync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened: Windows)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# Pi's folder layout

NAME_MAX = 255  # bytes of UTF-8 per path component (ext4, XFS, btrfs, APFS)
_UNSAFE = re.compile(r"[/\\\x00\ud800-\udfff]")  # separators, NUL, lone surrogates (no UTF-8 for them)
_LEADING_DOTS = re.compile(r"^\.+")


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(_utf8(text)).hexdigest()[:length]


def _fit(stem: str, tail: str, names: str) -> tuple[str, bool]:
    """``stem + tail`` if that is at most ``NAME_MAX`` bytes, else ``stem`` cut at a character
    boundary + ``~`` + 16 hex digits of the sha256 of ``names`` + ``tail``; and whether it was cut."""
    if len(_utf8(stem + tail)) <= NAME_MAX:
        return stem + tail, False
    mark = f"~{_digest(names, 16)}{tail}"
    room = NAME_MAX - len(mark.encode())
    return stem.encode()[:room].decode("utf-8", "ignore") + mark, True


def pi_session_dir_name(cwd: str) -> str:
    """Pi's folder for a working directory: ``--`` + the resolved path without its leading
    separator, ``/``, ``\\`` and ``:`` turned into ``-`` + ``--`` (Pi's ``getDefaultSessionDirPath``).
    Beyond Pi: NUL and lone surrogates become ``-`` too, and a name over ``NAME_MAX`` bytes is cut
    and ends in a hash of the path."""
    return _dir_name(cwd)[0]


def _dir_name(cwd: str) -> tuple[str, bool]:
    resolved = os.path.abspath(os.path.expanduser(cwd) if cwd == "~" or cwd.startswith("~/") else cwd)
    inner = resolved[1:] if resolved[:1] in ("/", "\\") else resolved
    return _fit("--" + _UNSAFE.sub("-", inner.replace(":", "-")), "--", resolved)


def _file_name(session_id: str, stamp: str | None) -> tuple[str, bool]:
    """``<stamp>_<id>.jsonl`` (or ``<id>.jsonl``) as one safe path component: separators, NUL and
    lone surrogates as ``-``, leading dots as ``-`` (no hidden file, never ``.`` or ``..``), cut
    with a hash when over ``NAME_MAX`` bytes."""
    stem = session_id if stamp is None else f"{stamp}_{session_id}"
    safe = _UNSAFE.sub("-", stem)
    safe = _LEADING_DOTS.sub(lambda dots: "-" * len(dots.group()), safe)
    return _fit(safe, ".jsonl", stem)


def pi_relative_path(session_id: str, cwd: str, created: str | None, has_header: bool) -> Path:
    """Where Pi would keep a session below its sessions folder: ``--<cwd>--/<time>_<id>.jsonl``
    with the header's timestamp (``:`` and ``.`` as ``-``). A session with no header, no cwd
    or no timestamp string (Pi could not have written it) goes to the top: ``<id>.jsonl``.

    The path is one or two components below the folder, never ``.``/``..``/absolute, each at most
    ``NAME_MAX`` bytes; :func:`export_paths` settles two sessions that would share one."""
    return _pi_path(session_id, cwd, created, has_header)[0]


def _pi_path(session_id: str, cwd: str, created: str | None, has_header: bool) -> tuple[Path, bool]:
    """:func:`pi_relative_path`, and whether a name in it was cut to fit ``NAME_MAX``."""
    if has_header and cwd and created is not None:
        folder, folder_cut = _dir_name(cwd)
        name, cut = _file_name(session_id, created.replace(":", "-").replace(".", "-"))
        return Path(folder) / name, cut or folder_cut
    name, cut = _file_name(session_id, None)
    return Path(name), cut


@dataclass(frozen=True, slots=True)
class ExportTarget:
    """Where :func:`export_all` writes one session, and why it is not the plain Pi name."""

    path: Path  # relative to the export folder
    notes: tuple[str, ...] = ()


def _same_file_key(path: Path) -> str:
    """Paths that may name one file: on case-insensitive (or normalising: APFS) file systems too."""
    return unicodedata.normalize("NFC", str(path)).casefold()


def export_paths(listing: Iterable[tuple[str, str, str | None, bool]]) -> dict[str, ExportTarget]:
    """Session id → its file below the export folder, for ``(session id, cwd, created,
    has_header)`` rows: :func:`pi_relative_path`, except that sessions sharing a path (``a/b`` and
    ``a-b``; names differing only in case) keep it in this order — the one whose id needed no
    change first, then in the given order — and the others get ``~`` + 8 hex digits of the sha256
    of their id before ``.jsonl`` (the whole digest if even that is taken). Deterministic: the
    same store exports to the same names."""
    wanted: dict[str, list[tuple[bool, int, str, Path, bool]]] = {}
    for order, (session_id, cwd, created, has_header) in enumerate(listing):
        path, cut = _pi_path(session_id, cwd, created, has_header)
        changed = cut or session_id not in path.name
        wanted.setdefault(_same_file_key(path), []).append((changed, order, session_id, path, cut))
    targets: dict[str, ExportTarget] = {}
    taken: set[str] = set(wanted)
    for claims in wanted.values():
        claims.sort()
        _, _, winner, path, cut = claims[0]
        targets[winner] = ExportTarget(path, (f"name cut to {NAME_MAX} bytes",) if cut else ())
        for _, _, session_id, path, _ in claims[1:]:
            stem = path.name[:-len(".jsonl")]
            for length in (8, 64):
                renamed = path.with_name(_fit(f"{stem}~{_digest(session_id, length)}", ".jsonl", session_id)[0])
                if _same_file_key(renamed) not in taken:
                    break
            taken.add(_same_file_key(renamed))
            targets[session_id] = ExportTarget(renamed, (f"{path} is also the name of session {winner!r}: "
                                                         "suffixed with a hash of the id",))
    return targets


@dataclass(frozen=True, slots=True)
class ExportedFile:
    """One session of :func:`export_all`: the file written, or the error that stopped it."""

    session_id: str
    path: Path
    bytes: int
    notes: tuple[str, ...] = ()
    error: str | None = None

    def to_json(self) -> dict:
        result: dict[str, Any] = {"sessionId": self.session_id, "path": str(self.path), "bytes": self.bytes}
        if self.notes:
            result["notes"] = list(self.notes)
        if self.error is not None:
            result["error"] = self.error
        return result


def export_all(store: SessionStore, directory: str | os.PathLike, as_migrated: bool = False,
               progress: Callable[[ExportedFile], None] | None = None, force: bool = False) -> list[ExportedFile]:
    """Write every stored session into ``directory`` in Pi's layout (:func:`export_paths`), each
    file atomically (:func:`write_atomically`: a file there that holds more than the store, such
    as the lines Pi appended since the last export, is left alone unless ``force``). A session
    that cannot be written (a database or file system error, a refused file) is reported with
    ``error`` set and the others go on."""
    root = Path(directory)
    with read_transaction(store.engine) as conn:
        listing = conn.execute(select(
            sessions.c.pk, sessions.c.session_id, sessions.c.cwd, sessions.c.created, sessions.c.header_seq,
            sessions.c.migrated_from, sessions.c.diverged_seq,
        ).order_by(sessions.c.pk)).all()
    targets = export_paths((row.session_id, row.cwd, row.created, row.header_seq is not None) for row in listing)
    done: list[ExportedFile] = []
    for pk, session_id, _, _, _, migrated_from, diverged_seq in listing:
        target = targets[session_id]
        path = root / target.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            refuse_store_files(store, path)
            with read_transaction(store.engine) as conn:
                written = write_atomically(path, session_bytes(conn, pk, in_migrated_form(migrated_from, diverged_seq,
                                                                                      as_migrated)), force)
            exported = ExportedFile(session_id, path, written, target.notes)
        except (OSError, SQLAlchemyError, StoreError) as exc:
            exported = ExportedFile(session_id, path, 0, target.notes, f"{type(exc).__name__}: {exc}")
        done.append(exported)
        if progress is not None:
            progress(exported)
    return done
