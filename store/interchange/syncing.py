"""Importing many files: paths given as files or folders (Pi's layout: ``DIR/--<cwd>--/*.jsonl``),
and ``sync``, which does the same for a sessions folder again and again (``watch``).

Every file is imported on its own (``store.interchange.importing.import_file``: one transaction
each, idempotent, appends read incrementally), so an interrupted run resumes where it stopped:
the files it finished are unchanged on the next run, the one it was in starts over. A file's
failure — a conflict, a ``strict`` refusal, an unreadable file, even an unexpected error — is
reported and the run goes on; a file that is not a Pi session is reported (``not-session``) and
stored only when asked (``keep_non_sessions``). A file found in a folder and deleted before it
was opened (Pi deletes session files itself) is passed over, as a folder that vanished is.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from sqlalchemy.exc import DBAPIError, OperationalError

from store.db.engine import lock_timeout_ms, pool_options, read_transaction, whole_number
from store.db.faults import error_line
from store.errors import FileChanged, SessionChanged, SessionClaimed, SessionExists, StoreError
from store.interchange.importing import (
    BUSY,
    CONFLICT,
    FAILED,
    REFUSED,
    ImportConflict,
    ImportReport,
    KnownFile,
    import_file,
    known_files,
)
from store.interchange.reading import StrictRefusal

if TYPE_CHECKING:
    from store.session_store import SessionStore

# SQLite: an import that found the write lock taken is tried again, at most this often, while the
# lock timeout (PI_STORE_LOCK_TIMEOUT) has not run out since the first try: a quick "locked"
# (before the busy timeout ended) is retried, a lock held past the timeout is the file's failure
LOCK_RETRIES = 20
# an import failed by these may pass later: another writer's turn, a file rewritten while it was read
_MAY_PASS = (SessionChanged, SessionClaimed, SessionExists, FileChanged)
SETTLE_SECONDS = 2.0  # a file ending in an unfinished line this recently is probably being written


def session_files(paths: Iterable[str | os.PathLike], unreadable: list[OSError] | None = None) -> list[Path]:
    """The files to import: each file given, and every ``*.jsonl`` below each folder given
    (sorted, each once). ``unreadable``: gets the error of each folder below that could not be
    read (a folder that vanished meanwhile is simply passed over)."""
    found: dict[str, Path] = {}
    for path in map(Path, paths):
        if _is(path.is_dir):
            unsearchable: set[Path] = set()
            for file in sorted(_jsonl_below(path, unreadable)):
                try:
                    if file.is_file():
                        found.setdefault(os.path.realpath(file), file)
                except OSError as error:  # a folder that lists its names but cannot be entered
                    if unreadable is not None and file.parent not in unsearchable:
                        unsearchable.add(file.parent)
                        unreadable.append(OSError(error.errno, error.strerror, str(file.parent)))
        else:  # a file, or what cannot be looked at: its import fails with the reason
            found.setdefault(os.path.realpath(path), path)
    return list(found.values())


def _is(check: Callable[[], bool]) -> bool:
    """``path.is_dir()`` and the like, False where the path cannot be looked at (Python 3.11
    raises PermissionError there)."""
    try:
        return check()
    except OSError:
        return False


def _jsonl_below(folder: Path, unreadable: list[OSError] | None) -> Iterator[Path]:
    """``folder.rglob("*.jsonl")``, except that a folder that disappears while it is walked is
    passed over (rglob raised, ending ``sync --watch`` when a project folder was deleted), one
    that cannot be read is told to ``unreadable``, and symbolic links to folders are followed, as
    Pi's ``SessionManager.listAll()`` lists a project folder that is a link: each folder is
    walked once, under the first name it is reached by (a link back up does not loop)."""
    walked: set[tuple[int, int]] = set()

    def first_time(path: str) -> bool:
        try:
            info = os.stat(path)
        except OSError:  # walked all the same: the walk tells why it cannot be read (or that it is gone)
            return True
        if (info.st_dev, info.st_ino) in walked:
            return False
        walked.add((info.st_dev, info.st_ino))
        return True

    def passed_over(error: OSError) -> None:
        if unreadable is not None and not isinstance(error, FileNotFoundError):
            unreadable.append(error)

    first_time(str(folder))
    for parent, folders, names in os.walk(folder, onerror=passed_over, followlinks=True):
        folders[:] = [name for name in sorted(folders) if first_time(os.path.join(parent, name))]  # in name order
        for name in sorted(names):
            if name.endswith(".jsonl"):
                yield Path(parent, name)


def unreadable_folder(error: OSError) -> ImportReport:
    """The failed report of a folder below an imported one that could not be read (its files
    were not looked at; trying again may succeed)."""
    return ImportReport(str(error.filename), None, FAILED, retry=True,
                        error=f"{error.filename}: the folder could not be read, its files were not imported "
                              f"({error.strerror or error})")


@dataclass(slots=True)
class Summary:
    """Totals of a run of imports."""

    files: int = 0
    sessions: set[str] = field(default_factory=set)  # stored or extended by this run
    statuses: dict[str, int] = field(default_factory=dict)
    lines: int = 0
    entries: int = 0
    bytes: int = 0
    warnings: int = 0
    seconds: float = 0.0

    def add(self, report: ImportReport) -> None:
        """A file, counted by its report, and what its import read."""
        self.count(report)
        self.add_totals(report)

    def count(self, report: ImportReport) -> None:
        """A file, counted by its report's status (its outcome)."""
        self.files += 1
        self.statuses[report.status] = self.statuses.get(report.status, 0) + 1

    def add_totals(self, report: ImportReport) -> None:
        """What an import read and stored: the session, lines, entries, bytes and warnings."""
        if report.imported and report.session_id is not None:
            self.sessions.add(report.session_id)
        self.lines += report.lines
        self.entries += report.entries
        self.bytes += report.bytes
        self.warnings += report.warning_count

    @property
    def failed(self) -> int:
        return sum(self.statuses.get(status, 0) for status in (CONFLICT, REFUSED, FAILED))

    def to_json(self) -> dict:
        return {"files": self.files, "sessions": len(self.sessions), "statuses": self.statuses, "lines": self.lines,
                "entries": self.entries, "bytes": self.bytes, "warnings": self.warnings, "failed": self.failed,
                "seconds": round(self.seconds, 3)}


def import_one(store: SessionStore, path: Path, *, strict: bool = False, replace: bool = False,
               prefer: str | None = None, keep_non_sessions: bool = False,
               progress: Callable[[int], None] | None = None, settle: float | None = None,
               fork: bool = True, missing_ok: bool = False,
               known: Mapping[tuple[str, str], KnownFile] | None = None) -> ImportReport | None:
    """:func:`import_file` that reports failures instead of raising them — any exception, even
    one nobody foresaw, is that file's ``failed`` report. ``settle``: a file that does not end
    with a newline and changed less than that many seconds ago is left for later (``busy``): Pi
    is probably writing its last line. ``fork``: a big file may be read by a forked worker.
    ``missing_ok`` (a file found in a folder): None, no report, when the file is gone before it
    is opened — deleted since the folder was listed, as Pi deletes sessions. ``known``: the
    quick check (:func:`quick_check`)."""
    try:
        if settle is not None and _being_written(path, settle):
            return ImportReport(str(path), None, BUSY, note=f"{path}: being written (no final newline yet)")
        attempt, started, limit_ms = 1, time.monotonic(), lock_timeout_ms()
        while True:
            try:
                return import_file(store, path, strict=strict, replace=replace, prefer=prefer,
                                   keep_non_sessions=keep_non_sessions, progress=progress, parallel=fork,
                                   known=known)
            except OperationalError as exc:  # SQLite: another writer holds the write lock
                waited_ms = (time.monotonic() - started) * 1000
                if "locked" not in str(exc.orig) or attempt == LOCK_RETRIES or 0 < limit_ms <= waited_ms:
                    raise
                attempt += 1
    except ImportConflict as exc:  # one with a writer's claim passes once the claim ends: watch retries it
        return ImportReport(str(path), exc.session_id, CONFLICT, error=str(exc), retry=exc.claimed)
    except StrictRefusal as exc:
        return ImportReport(str(path), None, REFUSED, error=str(exc))
    except StoreError as exc:  # the file's transaction rolled back: report it and go on with the next file
        if missing_ok and isinstance(exc.__cause__, FileNotFoundError):  # gone before it was opened
            return None
        return ImportReport(str(path), None, FAILED, error=f"{type(exc).__name__}: {error_line(exc)}",
                            retry=isinstance(exc, _MAY_PASS) or isinstance(exc.__cause__, OSError))  # unreadable
    except (OSError, DBAPIError, store.engine.dialect.loaded_dbapi.Error) as exc:  # a fault that may pass
        return ImportReport(str(path), None, FAILED, error=f"{path}: {type(exc).__name__}: {error_line(exc)}",
                            retry=True)
    except Exception as exc:  # a bug: still only this file's failure (its transaction rolled back)
        return ImportReport(str(path), None, FAILED,
                            error=f"{path}: unexpected {type(exc).__name__} (please report it): {exc}")


def _being_written(path: Path, settle: float) -> bool:
    """Whether ``path`` changed within ``settle`` seconds and does not end with a newline (a file
    that cannot be read is not: the import then says why, in its own words)."""
    try:
        info = path.stat()
        if info.st_size == 0 or time.time() - info.st_mtime > settle:
            return False
        with path.open("rb") as stream:
            stream.seek(info.st_size - 1)
            return stream.read(1) != b"\n"
    except OSError:
        return False


def import_paths(store: SessionStore, paths: Iterable[str | os.PathLike], *, strict: bool = False,
                 replace: bool = False, prefer: str | None = None, keep_non_sessions: bool = False,
                 on_file: Callable[[int, Path], None] | None = None,
                 progress: Callable[[int], None] | None = None,
                 settle: float | None = None, jobs: int | None = None,
                 checksum: bool = False) -> Iterator[ImportReport]:
    """Import every file of :func:`session_files`, one report each, in their order.
    ``on_file(i, path)`` is called as each starts; ``progress`` gets the bytes read. A file that
    is not a Pi session is stored only when it was named itself (an explicit choice, like
    ``keep_non_sessions``), never when it was merely found in a folder; one found in a folder and
    deleted before it is opened gets no report (``missing_ok``). ``jobs``: files imported
    at once on PostgreSQL (default :func:`default_jobs`; SQLite stores one at a time), see
    :func:`_in_parallel`. ``checksum``: read every file, no :func:`quick_check`."""
    paths = list(paths)
    named = {os.path.realpath(path) for path in paths if not _is(Path(path).is_dir)}

    def one(index: int, path: Path, *, fork: bool = True,
            stop: threading.Event | None = None) -> ImportReport | None:
        if on_file is not None:
            on_file(index, path)
        named_itself = os.path.realpath(path) in named
        return import_one(store, path, strict=strict, replace=replace, prefer=prefer,
                          keep_non_sessions=keep_non_sessions or named_itself,
                          progress=progress if stop is None else _stoppable(progress, stop), settle=settle,
                          fork=fork, missing_ok=not named_itself, known=known)

    unreadable: list[OSError] = []
    files = session_files(paths, unreadable)
    known = None if checksum or not files else quick_check(store, files)
    yield from map(unreadable_folder, unreadable)
    jobs = import_jobs(store, jobs)
    if jobs <= 1 or len(files) < 2:
        for index, path in enumerate(files):
            if (report := one(index, path)) is not None:
                yield report
        return
    yield from _in_parallel(files, jobs, one)


def quick_check(store: SessionStore, files: Iterable[Path]) -> dict[tuple[str, str], KnownFile]:
    """What an import run trusts without reading a file: those of ``files`` the store holds whole, each
    with its stat when it was read (``store.interchange.importing.known_files``, as the store
    stands when the run starts). A file with another stat (written, truncated, touched, replaced,
    moved) is read and compared as always. A database that cannot be read now trusts nothing:
    then each file's import says what failed, as without the check."""
    try:
        with read_transaction(store.engine) as conn:
            return known_files(conn, [os.path.realpath(path) for path in files])
    except DBAPIError:
        return {}


def import_jobs(store: SessionStore, asked: int | None) -> int:
    """How many files an import stores at once: ``asked`` (else :func:`default_jobs`) on
    PostgreSQL, at most as many as the pool has connections (a thread waiting for one past the
    pool's timeout would fail its file); one on SQLite and on the async API (whose calls run on
    its event loop's greenlet, where other threads cannot reach the database)."""
    engine = store.engine
    if engine.dialect.name == "sqlite" or engine.dialect.is_async:
        return 1
    return max(1, min(default_jobs(store) if asked is None else asked, sum(pool_options(engine.url).values())))


def default_jobs(store: SessionStore) -> int:
    """Files a folder import stores at once: one on SQLite (one writer at a time), two on
    PostgreSQL (while one file's rows are parsed here, the server stores another's; a second
    core is what that needs), unless ``$PI_STORE_IMPORT_JOBS`` says otherwise."""
    if store.engine.dialect.name == "sqlite":
        return 1
    return whole_number("PI_STORE_IMPORT_JOBS", os.environ.get("PI_STORE_IMPORT_JOBS", "").strip() or None, 2, 1)


def _in_parallel(files: list[Path], jobs: int,
                 one: Callable[..., ImportReport | None]) -> Iterator[ImportReport]:
    """Import ``files`` on ``jobs`` threads, each file in its own transaction as always, the
    reports in file order, each file started after the files :func:`start_after` names. Big
    files are read in this process (no forked reader next to other threads). When the caller
    stops (Ctrl-C, or it reads no more reports), the files being stored stop at their next read
    and roll back, rather than being waited for (a Ctrl-C took as long as the biggest file)."""
    futures: list[Future] = []
    pending: deque[Future] = deque()
    stop = threading.Event()

    def run(index: int, path: Path, before: list[Future]) -> ImportReport | None:
        for future in before:  # submitted earlier: running or done (the pool takes work in order)
            future.result()
        return one(index, path, fork=False, stop=stop)

    with ThreadPoolExecutor(jobs, thread_name_prefix="pi-store-import") as pool:
        try:
            waits = start_after([_header_id(path) for path in files])
            for index, (path, after) in enumerate(zip(files, waits, strict=True)):
                futures.append(pool.submit(run, index, path, [futures[i] for i in after]))
                pending.append(futures[-1])
                while pending and (pending[0].done() or len(pending) > 4 * jobs):
                    if (report := pending.popleft().result()) is not None:  # None: the file was gone
                        yield report
            while pending:
                if (report := pending.popleft().result()) is not None:
                    yield report
        finally:
            stop.set()  # the caller stopped reading the reports: no new files, the running ones end
            for future in pending:
                future.cancel()


class ImportStopped(KeyboardInterrupt):
    """Raised in a file's import thread when the folder's import stops (:func:`_in_parallel`):
    not an ``Exception``, so that the file is not reported as failed: its transaction rolls back."""


def _stoppable(progress: Callable[[int], None] | None, stop: threading.Event) -> Callable[[int], None]:
    """``progress``, raising :class:`ImportStopped` at each read once ``stop`` is set."""
    def read(size: int) -> None:
        if stop.is_set():
            raise ImportStopped
        if progress is not None:
            progress(size)
    return read


def start_after(sessions: list[str | None]) -> list[list[int]]:
    """For files whose sessions are ``sessions`` (a header's id; None: not known from the first
    64 KiB), the earlier files each must wait for, so that files of one session are stored in
    file order, as one at a time would: the session's previous file and the last unknown one.
    A file of an unknown session waits for every file since the unknown one before it (which
    waited for those before)."""
    last_of: dict[str, int] = {}
    barrier: int | None = None
    after: list[list[int]] = []
    for index, session in enumerate(sessions):
        if session is None:
            after.append(list(range(barrier or 0, index)))
            barrier = index
        else:
            after.append([i for i in (last_of.get(session), barrier) if i is not None])
            last_of[session] = index
    return after


def _header_id(path: Path) -> str | None:
    """The ``id`` of a file's header line (its first line, when it is a session header and no
    longer than 64 KiB), if any."""
    try:
        with path.open("rb") as stream:
            first = stream.readline(1 << 16)
        header = orjson.loads(first)
    except (OSError, orjson.JSONDecodeError):
        return None
    if isinstance(header, dict) and header.get("type") == "session" and isinstance(header.get("id"), str):
        return header["id"]
    return None


def watch(store: SessionStore, folder: str | os.PathLike, *, interval: float = 1.0, strict: bool = False,
          replace: bool = False, prefer: str | None = None, keep_non_sessions: bool = False,
          on_report: Callable[[ImportReport], None], on_readable: Callable[[str], object] = lambda path: None,
          stop: Callable[[], bool] = lambda: False, after_round: Callable[[], object] = lambda: None,
          checksum: bool = False, on_gone: Callable[[str], object] = lambda path: None) -> None:
    """Follow a live sessions folder: import every file now, then each file whose size or
    modification time changes, every ``interval`` seconds, until ``stop()`` says so (or the
    process is interrupted). A file still being written (``busy``) or whose import failed for a
    fault that may pass (``report.retry``: the database locked or unreachable, the file
    unreadable) is looked at again next round; ``on_report`` hears of it when it first happens
    for the file's size and time. A folder below that could not be read is reported so too.
    ``on_readable(path)`` hears when such a folder can be read again, or when such a folder or
    file is gone (Pi deletes session files): its report no longer holds; ``on_gone(path)``,
    when a file whose outcome it reported is gone (a file there later is a new one). A file deleted before
    it was opened is passed over. ``after_round`` runs after each look at the folder. The first
    look trusts the :func:`quick_check` unless ``checksum``; the later ones import only files
    whose size or modification time changed."""
    seen: dict[str, tuple[tuple[int, int], str]] = {}  # key -> the size and time imported, the reported path
    first = not checksum  # the first look trusts the quick check
    # told, looked at again each round: key -> the reported path, and the state and what was reported
    pending: dict[str, tuple[str, tuple[tuple[int, int], str, str | None]]] = {}

    def tell(key: str, signature: tuple[int, int], report: ImportReport) -> None:  # once, until it changes
        if pending.get(key) != (told := (report.path, (signature, report.status, report.error))):
            pending[key] = told
            on_report(report)

    while not stop():
        unreadable: list[OSError] = []
        files = session_files([folder], unreadable)
        still = {os.path.realpath(path) for path in files}
        for report in map(unreadable_folder, unreadable):
            still.add(key := os.path.realpath(report.path))
            tell(key, (0, 0), report)
        for key in pending.keys() - still:  # readable again, or gone (a new failure is told again)
            on_readable(pending.pop(key)[0])
        for key in seen.keys() - still:
            on_gone(seen.pop(key)[1])
        known, first = quick_check(store, files) if first and files else None, False
        for path in files:
            try:
                info = path.stat()
            except OSError:
                continue
            key, signature = os.path.realpath(path), (info.st_size, info.st_mtime_ns)
            if key in seen and seen[key][0] == signature:
                continue
            report = import_one(store, path, strict=strict, replace=replace, prefer=prefer,
                                keep_non_sessions=keep_non_sessions, settle=SETTLE_SECONDS, missing_ok=True,
                                known=known)
            if report is None:  # deleted since it was listed
                continue
            if report.status == BUSY or report.retry:
                tell(key, signature, report)
                continue
            pending.pop(key, None)
            seen[key] = (signature, report.path)
            on_report(report)
        after_round()
        time.sleep(interval)
