"""``pi-store import``, ``sync``, ``export`` and ``verify``: session files in and out.

Per-file results go to stdout (a line each, or a JSON line each with ``--json``, then a
``{"summary": ...}`` line), warnings and progress to stderr. The exit status is 1 when any file
failed (a conflict, a ``--strict`` refusal, an unreadable file), else 0.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from store.analysis import fts
from store.cli.app import current_store, emit, finite, main
from store.cli.output import plural
from store.db.faults import error_line, waits_too_long
from store.format import js_stringify
from store.interchange.exporting import ExportedFile, export_all
from store.interchange.importing import BUSY, CONFLICT, FAILED, PREFER, REFUSED, ImportReport
from store.interchange.syncing import Summary, import_paths, session_files, watch
from store.interchange.verifying import (
    API,
    DAMAGED,
    DIVERGED,
    IDENTICAL,
    check_database,
    session_ids,
    verify_session,
)
from store.session_store import SessionStore
from store.visible_text import one_line

_PROGRESS = click.Choice(["auto", "bar", "json", "none"])


def _common(command: Callable) -> Callable:
    command = click.option("--json", "as_json", is_flag=True,
                           help="One JSON line per file, then a summary line.")(command)
    command = click.option("--strict", is_flag=True,
                           help="Refuse (store nothing of) a file that has any oddity.")(command)
    command = click.option("--replace", is_flag=True, help="The same as --prefer file.")(command)
    command = click.option("--prefer", type=click.Choice(PREFER),
                           help="Settle a conflict with the stored session: store the file instead of it "
                                "(file), or keep the stored history and leave the file alone (store).")(command)
    command = click.option("--keep-non-sessions", is_flag=True,
                           help="Also store files found in folders that are not Pi sessions (no session "
                                "header), as Pi never would; a file named itself is always stored.")(command)
    command = click.option("--checksum", is_flag=True,
                           help="Read every file to tell whether it changed, instead of trusting a file whose "
                                "size, times and inode are those recorded when it was last read.")(command)
    return command


class _Progress:
    """Bytes and files done, as a bar on a terminal (``auto``/``bar``) or JSON lines (``json``).

    While the bar is drawn, every line meant for that terminal goes through :meth:`echo`, which
    prints it above the bar (``rich``'s live display), so the two never share a line; the bar
    is erased when the run ends, and the summary line that follows stays.
    """

    def __init__(self, mode: str, total_bytes: int, total_files: int) -> None:
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "none"
        self.mode, self.total_bytes, self.total_files = mode, total_bytes, total_files
        self.done_bytes, self.file_index, self.path = 0, 0, ""
        self._bar: Any = None  # rich.progress.Progress while it is drawn
        self._task: Any = None

    @contextlib.contextmanager
    def running(self) -> Iterator[_Progress]:
        if self.mode != "bar":
            yield self
            return
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

        bar = Progress(TextColumn("importing"), BarColumn(), TaskProgressColumn(), TimeRemainingColumn(),
                       TextColumn("{task.description}"), console=Console(stderr=True, highlight=False),
                       transient=True, redirect_stdout=False, redirect_stderr=False)
        with bar:
            self._bar, self._task = bar, bar.add_task("", total=max(self.total_bytes, 1))
            try:
                yield self
            finally:
                self._bar = None

    def echo(self, line: str, *, err: bool = False) -> None:
        """Print ``line`` on stdout (or stderr): above the bar when it goes to the bar's terminal."""
        if self._bar is not None and (err or sys.stdout.isatty()):
            self._bar.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            click.echo(line, err=err)

    def on_file(self, index: int, path: Path) -> None:
        self.file_index, self.path = index, str(path)
        if self._bar is not None:
            self._bar.update(self._task, description=f"file {index + 1}/{self.total_files} "
                                                     f"{os.path.basename(self.path)[:40]}", refresh=True)
        self.bytes(0)

    def bytes(self, count: int) -> None:
        self.done_bytes += count
        if self._bar is not None:
            self._bar.update(self._task, advance=count)
        elif self.mode == "json":
            sys.stderr.write(js_stringify({"progress": {
                "file": self.file_index + 1, "files": self.total_files, "bytes": self.done_bytes,
                "totalBytes": self.total_bytes, "path": self.path,
            }}) + "\n")
            sys.stderr.flush()


def _print_report(report: ImportReport, as_json: bool, echo: Callable[..., None] = click.echo) -> None:
    """A file's result on stdout, its warnings, note and error on stderr, through ``echo``."""
    if as_json:
        echo(js_stringify(report.to_json()))
        sys.stdout.flush()
    else:
        detail = (f" ({plural(report.lines, 'line')}, {plural(report.bytes, 'byte')})"
                  if report.imported else "")
        echo(one_line(f"{report.status} {report.session_id or '-'} <- {report.path}{detail}"))
        for warning in report.warnings:  # a file's own text (an entry type, say) shown, not obeyed
            echo(one_line(f"warning: {warning}"), err=True)
    if report.note:
        echo(one_line(f"note: {report.note}"), err=True)
    if report.error:
        echo(one_line(f"error: {report.error}"), err=True)


def _run_imports(paths: list[str], *, as_json: bool, strict: bool, replace: bool, prefer: str | None,
                 keep_non_sessions: bool, progress: str, checksum: bool) -> None:
    files = session_files(paths)
    total = 0
    for file in files:
        with contextlib.suppress(OSError):
            total += file.stat().st_size
    summary = Summary()
    started = time.monotonic()
    meter = _Progress(progress, total, len(files))
    store = current_store()
    with meter.running():
        for report in import_paths(store, paths, strict=strict, replace=replace, prefer=prefer,
                                   keep_non_sessions=keep_non_sessions, on_file=meter.on_file, progress=meter.bytes,
                                   checksum=checksum):
            summary.add(report)
            _print_report(report, as_json, meter.echo)
    _index_imports(store)
    summary.seconds = time.monotonic() - started
    _finish(summary, as_json)


def _index_imports(store: SessionStore) -> None:
    """Leave the SQLite full-text index current for every reader of the database file (sqlite3,
    Datasette); a writer holding the lock past the busy timeout only postpones it."""
    try:
        fts.sync(store.engine)
    except OperationalError as exc:
        click.echo(f"warning: the full-text index was not brought up to date ({exc.orig}); "
                   "the next search or `pi-store fts sync` does it", err=True)


def _finish(summary: Summary, as_json: bool) -> None:
    if as_json:
        emit({"summary": summary.to_json()})
    else:
        click.echo(_summary_line(summary), err=True)
    if summary.failed:
        raise SystemExit(1)


def _summary_line(summary: Summary) -> str:
    """``71 files (15 conflict, 53 imported): 53 sessions stored, 3,249 entries, ... in 3.2 s``."""
    statuses = ", ".join(f"{count:,} {status}" for status, count in sorted(summary.statuses.items()))
    rate = f", {summary.bytes / 1e6 / summary.seconds:.1f} MB/s" if summary.seconds > 0 and summary.bytes else ""
    return (f"{plural(summary.files, 'file')} ({statuses or 'none'}): {plural(len(summary.sessions), 'session')} "
            f"stored, {plural(summary.entries, 'entry', 'entries')}, {plural(summary.bytes, 'byte')} read, "
            f"{plural(summary.warnings, 'warning')} in {summary.seconds:.1f} s{rate}")


@main.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@_common
@click.option("--progress", type=_PROGRESS, default="auto", show_default=True,
              help="Progress on stderr: a bar (on a terminal), JSON lines, or none.")
def import_command(paths: tuple[str, ...], as_json: bool, strict: bool, replace: bool, prefer: str | None,
                   keep_non_sessions: bool, progress: str, checksum: bool) -> None:
    """Store session files, or every *.jsonl below folders (Pi's sessions layout), byte for byte.

    Importing the same bytes again changes nothing (a file with the size, times and inode it had
    when it was read is not read again; --checksum reads it); a file that grew is read from where the
    last import stopped; a file rewritten in another way, or one whose session the store has
    written to since, is a conflict (see --prefer). Files found in folders that are not Pi
    sessions are skipped (not-session) unless --keep-non-sessions; a file named itself is stored.
    """
    _run_imports(list(paths), as_json=as_json, strict=strict, replace=replace, prefer=prefer,
                 keep_non_sessions=keep_non_sessions, progress=progress, checksum=checksum)


@main.command("sync")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@_common
@click.option("--progress", type=_PROGRESS, default="auto", show_default=True, help="As for import.")
@click.option("--watch", "follow", is_flag=True, help="Keep following the folder (Ctrl-C stops).")
@click.option("--interval", type=click.FloatRange(min=0.01, max=86_400), callback=finite, default=1.0,
              show_default=True, help="Seconds between looks (--watch).")
def sync_command(folder: str, as_json: bool, strict: bool, replace: bool, prefer: str | None,
                 keep_non_sessions: bool, progress: str, checksum: bool, follow: bool, interval: float) -> None:
    """Bring the store up to date with a Pi sessions folder: new files imported, grown files
    extended, unchanged files skipped (by their size, times and inode as when last read, else by
    content hash; --checksum: always by hash); safe to interrupt and rerun."""
    if not follow:
        _run_imports([folder], as_json=as_json, strict=strict, replace=replace, prefer=prefer,
                     keep_non_sessions=keep_non_sessions, progress=progress, checksum=checksum)
        return
    summary = Summary()
    started = time.monotonic()
    # each file is counted once, when the watch ends: as still to be tried again, else by its last outcome
    outcomes: dict[str, ImportReport] = {}
    again: dict[str, ImportReport] = {}  # told, to be tried again: counted only if still so at the end

    def on_gone(path: str) -> None:  # a failure of a file that is no more no longer holds
        if path in outcomes and outcomes[path].status in (CONFLICT, REFUSED, FAILED):
            del outcomes[path]

    def on_report(report: ImportReport) -> None:
        summary.add_totals(report)  # what every import read and stored
        if report.status == BUSY or report.retry:
            again[report.path] = report
        else:  # the file's outcome
            again.pop(report.path, None)
            outcomes[report.path] = report
        if report.status != "unchanged" or report.note:  # a diverged session says so every time
            _print_report(report, as_json)

    with contextlib.suppress(KeyboardInterrupt):
        store = current_store()
        watch(store, folder, interval=interval, strict=strict, replace=replace, prefer=prefer,
              keep_non_sessions=keep_non_sessions, on_report=on_report, checksum=checksum, on_gone=on_gone,
              on_readable=lambda path: again.pop(path, None), after_round=lambda: _index_imports(store))
    for report in {**outcomes, **again}.values():
        summary.count(report)
    summary.seconds = time.monotonic() - started
    _finish(summary, as_json)


@main.command("export")
@click.argument("session", required=False)
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, allow_dash=True),
              help="File (default, or -: stdout).")
@click.option("--all", "all_dir", type=click.Path(file_okay=False),
              help="Write every session into this folder, in Pi's layout (--<cwd>--/<time>_<id>.jsonl).")
@click.option("--as-migrated", is_flag=True,
              help="Write the v3 form Pi would have rewritten on open (always, for a v1/v2 session the store has "
                   "written to).")
@click.option("--json", "as_json", is_flag=True, help="With --all: one JSON line per file written.")
@click.option("--force", is_flag=True,
              help="Replace existing files even when they hold more than the store (lines Pi wrote since).")
def export_command(session: str | None, output: str | None, all_dir: str | None, as_migrated: bool,
                   as_json: bool, force: bool) -> None:
    """Write a session as JSONL (the imported bytes, unchanged), or all of them with --all.

    Files are written whole or not at all: a temporary file beside the target, renamed over it
    once complete, so an error leaves an existing file as it was. An existing file is replaced
    only when it is the stored session or the start of it (an older export): one that holds more,
    such as the lines Pi appended to an exported file, is left as it is and reported (import it
    first: pi-store sync), unless --force. With --all, names that would
    clash, leave the folder or exceed 255 bytes are changed (and the change is reported); a
    session that fails is reported and the others go on; the exit status is 1 if any failed.
    """
    if (session is None) == (all_dir is None):
        raise click.UsageError("give a SESSION or --all DIR")
    if output == "" or all_dir == "":  # not standard output or the current folder by accident
        raise click.BadParameter("empty: name a file (or leave -o out for standard output)" if output == "" else
                                 "empty: name a folder", param_hint="-o" if output == "" else "--all")
    output = None if output == "-" else output
    existed = output is not None and os.path.exists(output)  # what a failed export leaves as it was
    try:
        if all_dir is not None:
            _export_all(all_dir, as_migrated, as_json, force)
        elif output:
            current_store().export_jsonl(session, output, as_migrated=as_migrated, force=force)
        else:
            with contextlib.closing(current_store().iter_export(session, as_migrated=as_migrated)) as chunks:
                for chunk in chunks:  # closed here when a write stops it, while the store is open
                    sys.stdout.buffer.write(chunk)
    except BrokenPipeError:  # the reader left (``| head``): the command's quiet 141, not a failed export
        raise
    except (OSError, SQLAlchemyError) as exc:
        kept = f" ({output} is unchanged)" if existed else ""
        raise click.ClickException(f"export failed{kept}: {type(exc).__name__}: {exc}") from exc


def _export_all(directory: str, as_migrated: bool, as_json: bool, force: bool) -> None:
    def report(exported: ExportedFile) -> None:
        if as_json:
            emit(exported.to_json())
        elif exported.error is not None:
            click.echo(one_line(f"failed {exported.session_id} -> {exported.path}: {exported.error}"))
        else:
            click.echo(one_line(f"{exported.session_id} -> {exported.path} ({plural(exported.bytes, 'byte')})"))
        if not as_json:
            for note in exported.notes:
                click.echo(one_line(f"  note: {note}"))

    done = export_all(current_store(), directory, as_migrated=as_migrated, progress=report, force=force)
    failed = sum(exported.error is not None for exported in done)
    summary = {"files": len(done) - failed, "failed": failed, "renamed": sum(bool(e.notes) for e in done)}
    if as_json:
        emit({"summary": summary})
    else:
        click.echo(f"{plural(summary['files'], 'file')} written, {failed:,} failed, {summary['renamed']:,} renamed",
                   err=True)
    if failed:
        raise SystemExit(1)


@main.command("verify")
@click.argument("session", required=False)
@click.option("--all", "everything", is_flag=True, help="Verify every stored session, and the database.")
@click.option("--full", is_flag=True, help="SQLite, with --all: PRAGMA integrity_check instead of quick_check.")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per session, then a summary line.")
def verify_command(session: str | None, everything: bool, full: bool, as_json: bool) -> None:
    """Tell identical, diverged and damaged sessions apart, one line each.

    identical: export is the imported file, byte for byte. diverged: the file's lines are intact
    and the store wrote more after them. api: created through the API, its lines and tree
    check out. damaged: anything else (bytes differ, rows missing, tree columns that do not
    re-derive, the database reports an error). --all also checks the database (SQLite:
    quick_check or, with --full, integrity_check, and the full-text index). Exit status 1 if
    anything is damaged, else 0.
    """
    if (session is None) == (not everything):
        raise click.UsageError("give a SESSION or --all")
    store = current_store()
    counts = dict.fromkeys(_VERDICTS, 0)
    ids, database = [session], None
    if everything:
        database = check_database(store, full=full)
        try:
            ids = session_ids(store)
        except SQLAlchemyError as exc:
            if waits_too_long(exc):  # locked or timed out: this command's error, not the database's damage
                raise
            ids = []
            database.problems.append(f"the list of sessions cannot be read: {error_line(exc)}")
        if as_json:
            emit({"database": database.to_json()})
        else:
            click.echo(database.describe())
            for detail in database.details:
                click.echo(f"  {detail}")
    for session_id in ids:
        health = verify_session(store, session_id)
        counts[health.verdict] += 1
        if as_json:
            emit(health.to_json())
            continue
        click.echo(one_line(f"{health.session_id}: {health.describe()}"))
        for detail in health.details:
            click.echo(f"  {detail}")
    damaged = counts[DAMAGED] + (database is not None and not database.ok)
    summary = {**counts, "sessions": sum(counts.values()), "databaseOk": None if database is None else database.ok}
    if as_json:
        emit({"summary": summary})
    else:
        state = "" if database is None else f"; database {'ok' if database.ok else 'damaged'}"
        click.echo(f"{plural(summary['sessions'], 'session')}: " + ", ".join(f"{counts[v]:,} {v}" for v in _VERDICTS)
                   + state)
    if damaged:
        raise SystemExit(1)


_VERDICTS = (IDENTICAL, DIVERGED, API, DAMAGED)
