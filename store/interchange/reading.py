"""Reading a session file into ``entries`` rows, a chunk at a time: line classification
(``store.loading.LineReader``) and row building (``store.bulk.RowBuilder``), with the file's
sha256 and its warnings on the side.

An import stores the chunks while they come. For a big new file the reading runs in a forked
worker process (:func:`read_in_worker`) while the importing process writes what it sends: parsing
JSON and writing SQLite then use a core each. The worker reads the same open file, touches no
database, and leaves nothing behind: if either side dies the other stops and the import's
transaction rolls back. For that the worker keeps nothing of its parent's it does not need: it
closes its copy of the pipe's read end (else, its parent killed, it would wait forever to send
into a pipe it reads itself), closes its copies of the parent's sockets — database connections —
without a word on them (a PostgreSQL connection kept open by the worker would keep the killed
import's transaction, and its advisory lock, alive), and dies with its parent (Linux).
"""

from __future__ import annotations

import ctypes
import hashlib
import multiprocessing
import os
import stat
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from store.bulk import CHUNK_ROWS, RowBuilder, RowsSummary
from store.errors import ImportFailed, StoreError
from store.format import iter_lines
from store.format.lines import RawLine
from store.loading import LineReader, LineRow, LineWarning, MigrationPlan
from store.tree_columns import StoredRows

READ_BYTES = 1 << 20
MAX_WARNINGS = 1000  # kept per file (all are counted)
WORKER_MIN_BYTES = 32 << 20  # smaller files are read in the importing process (a fork costs more)

Progress = Callable[[int], None]  # receives the number of bytes read since its last call


class StrictRefusal(ImportFailed):
    """``strict``: the file has an oddity (the message names it); nothing of it was stored."""


class Warnings:
    """A file's warnings: the first ``MAX_WARNINGS`` kept, all counted; ``strict`` refuses at the first."""

    def __init__(self, source: str, strict: bool) -> None:
        self.source = source
        self.strict = strict
        self.kept: list[LineWarning] = []
        self.count = 0

    def __call__(self, warning: LineWarning) -> None:
        if self.strict:
            raise StrictRefusal(f"{warning.render(self.source)} (--strict: nothing of this file was stored)")
        self.count += 1
        if len(self.kept) < MAX_WARNINGS:
            self.kept.append(warning)

    def rendered(self) -> list[str]:
        lines = [w.render(self.source) for w in sorted(self.kept, key=lambda w: w.line)]
        if self.count > len(self.kept):
            lines.append(f"{self.source}: ... and {self.count - len(self.kept)} more warnings")
        return lines


class Window:
    """Bytes ``[start, end)`` of a file, hashed into ``hasher`` and reported to ``progress``."""

    def __init__(self, stream: BinaryIO, start: int, end: int, hasher: Any = None,
                 progress: Progress | None = None) -> None:
        stream.seek(start)
        self.stream = stream
        self.left = end - start
        self.hasher = hasher
        self.progress = progress

    def read(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left)
        data = self.stream.read(size) if size else b""
        self.left -= len(data)
        if self.hasher is not None:
            self.hasher.update(data)
        if self.progress is not None and data:
            self.progress(len(data))
        return data

    def lines(self) -> Iterator[RawLine]:
        return iter_lines(self, READ_BYTES)


def sha256_of(stream: BinaryIO, end: int) -> Any:
    """A sha256 object fed with the first ``end`` bytes of ``stream``."""
    hasher = hashlib.sha256()
    window = Window(stream, 0, end, hasher)
    while window.read(READ_BYTES):
        pass
    return hasher


@dataclass(slots=True)
class Job:
    """What to read: bytes ``[start, end)`` of an open file, as rows of session ``session_pk``
    from ``first_seq`` on (``in_body``: lines appended to a stored session)."""

    stream: BinaryIO
    start: int
    end: int
    session_pk: int
    source: str
    strict: bool = False
    plan: MigrationPlan | None = None
    first_seq: int = 0
    in_body: bool = False
    derive_tree: bool = True


@dataclass(slots=True)
class FileRows:
    """The end of a read: the reader's verdicts on the file and the summary of its rows."""

    header: dict | None
    pi_valid: bool
    migrated_from: str | None
    summary: RowsSummary
    sha256: str
    warnings: Warnings


class RowReading:
    """Reads a :class:`Job` in this process: iterate :meth:`chunks`, then read :attr:`result`.

    ``hasher`` may carry the sha256 of the bytes before ``job.start``. Appends pass the
    ``stored`` rows that new rows may name, and ``before_chunk``, which fills them in before
    each chunk of lines becomes rows (``SessionWriter.look_up_stored``).
    """

    def __init__(self, job: Job, hasher: Any = None, progress: Progress | None = None,
                 before_chunk: Callable[[list[LineRow], RowBuilder], None] | None = None,
                 stored: StoredRows | None = None) -> None:
        self.job = job
        self.hasher = hasher if hasher is not None else hashlib.sha256()
        self.progress = progress
        self.before_chunk = before_chunk
        self.warnings = Warnings(job.source, job.strict)
        self.builder = RowBuilder(job.session_pk, first_seq=job.first_seq, derive_tree=job.derive_tree,
                                  stored=stored)
        self.result: FileRows | None = None

    def chunks(self) -> Iterator[list[tuple]]:
        job = self.job
        reader = LineReader(self.warnings, plan=job.plan, first_seq=job.first_seq, in_body=job.in_body)
        builder = self.builder
        pending: list[LineRow] = []
        for raw in Window(job.stream, job.start, job.end, self.hasher, self.progress).lines():
            pending.append(reader.read(raw))
            if len(pending) >= CHUNK_ROWS:
                yield self._build(pending)
                pending = []
        reader.finish(job.end - job.start)
        if pending:
            yield self._build(pending)
        summary = builder.finish()
        self.result = FileRows(reader.header, reader.pi_valid, reader.migrated_from, summary,
                               self.hasher.hexdigest(), self.warnings)

    def _build(self, rows: list[LineRow]) -> list[tuple]:
        if self.before_chunk is not None:
            self.before_chunk(rows, self.builder)
        return self.builder.build(rows)


# ---------------------------------------------------------------------------------------------
# in a worker process


_PR_SET_PDEATHSIG = 1  # prctl(2)


def _cut_loose(parent: int, receive: Any, send: Any) -> None:
    """First thing in the worker: die with ``parent``, drop the read end of the pipe and every
    inherited socket (see the module docstring)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)  # SIGKILL when the parent dies
        if os.getppid() != parent:  # it died before prctl took effect
            os._exit(1)
    receive.close()
    for name in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ():
        fd = int(name)
        if fd == send.fileno():
            continue
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                # os.close, not the driver's close: closing a copy sends nothing (no terminate
                # message, no FIN while the parent holds the socket), and the driver objects
                # that name it are never used here (the worker leaves through os._exit)
                os.close(fd)
        except OSError:  # the descriptor of the listing itself, gone by now
            continue


def _work(job: Job, send: Any, receive: Any, parent: int) -> None:
    """The worker: read ``job`` and send ``("rows", values, bytes)`` per chunk, then ``("done",
    FileRows)``; or ``("error", StoreError)`` / ``("crash", traceback)``."""
    _cut_loose(parent, receive, send)
    read = 0

    def count(size: int) -> None:
        nonlocal read
        read += size

    try:
        reading = RowReading(job, progress=count)
        done = 0
        for values in reading.chunks():
            send.send(("rows", values, read - done))
            done = read
        send.send(("done", reading.result, read - done))
    except StoreError as exc:
        send.send(("error", exc))
    except BaseException:  # anything else: reported to the importing process, which raises
        send.send(("crash", traceback.format_exc()))
    finally:
        send.close()


def read_in_worker(job: Job, progress: Progress | None = None) -> Iterator[list[tuple] | FileRows]:
    """Chunks of rows read by a forked worker, then (last) the :class:`FileRows`."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    worker = context.Process(target=_work, args=(job, send, receive, os.getpid()), name="pi-store-reader",
                             daemon=True)
    worker.start()
    send.close()
    try:
        while True:
            try:
                message = receive.recv()
            except EOFError:
                raise ImportFailed(f"{job.source}: the reading process stopped "
                                   f"(exit code {worker.exitcode})") from None
            if message[0] in ("rows", "done") and progress is not None and message[2]:
                progress(message[2])
            if message[0] == "rows":
                yield message[1]
            elif message[0] == "done":
                yield message[1]
                return
            elif message[0] == "error":
                raise message[1]
            else:
                raise ImportFailed(f"{job.source}: the reading process failed:\n{message[1]}")
    finally:
        receive.close()
        if worker.is_alive():
            worker.kill()
        worker.join()
