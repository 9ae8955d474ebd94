"""``pi-store delete`` and ``pi-store prune``: removing sessions and old abandoned branches
(``store.retention``; each command is one call of ``SessionStore.delete`` / ``SessionStore.prune``)."""

from __future__ import annotations

import click

from store.cli.app import current_store, emit, main
from store.cli.output import plural
from store.retention import BadPolicy, Removed, RetentionPolicy, parse_duration
from store.visible_text import one_line


def _size(removed: Removed) -> str:
    return (f"{plural(removed.rows, 'row')}, {plural(removed.bytes, 'byte')} (line {removed.line_bytes:,}, "
            f"raw {removed.raw_bytes:,})")


@main.command("delete")
@click.argument("sessions", nargs=-1, required=True)
@click.option("--dry-run", is_flag=True, help="Report what would be deleted; change nothing.")
@click.option("--ignore-missing", is_flag=True,
              help="Delete the sessions that exist even if some ids are unknown (default: an unknown id "
                   "aborts the command and nothing is deleted).")
@click.option("--force", is_flag=True,
              help="Delete sessions even while a writer holds a live claim on them (default: such a session "
                   "aborts the command and nothing is deleted).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def delete_command(sessions: tuple[str, ...], dry_run: bool, ignore_missing: bool, force: bool, as_json: bool) -> None:
    """Delete whole sessions (their rows, index entries and import records) in one transaction."""
    report = current_store(reading=dry_run).delete(list(sessions), dry_run=dry_run, ignore_missing=ignore_missing,
                                                   force=force)
    if as_json:
        emit(report.to_json())
        return
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"{verb} {plural(report.sessions, 'session')}: {_size(report.removed)}")
    for session_id in report.missing:
        click.echo(one_line(f"not stored (ignored): {session_id}"), err=True)


@main.command("prune")
@click.option("--older-than", "older_than", required=True, metavar="DURATION",
              help="Cutoff D = now minus this (30d, 12h, 90m, 2w): history at or after D is kept.")
@click.option("--keep-latest", type=click.IntRange(0), default=0, show_default=True,
              help="Keep the N most recently modified sessions of each cwd whole.")
@click.option("--delete-sessions", is_flag=True,
              help="Delete whole the sessions modified before D that are not among the latest N of their "
                   "cwd, instead of trimming their old branches.")
@click.option("--apply", is_flag=True, help="Write the changes (without it: a dry run that only reports).")
@click.option("--no-vacuum", is_flag=True, help="SQLite: skip compacting the file after --apply.")
@click.option("--force", is_flag=True,
              help="Also trim or delete sessions a writer holds a live claim on (default: kept whole and listed).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def prune_command(older_than: str, keep_latest: int, delete_sessions: bool, apply: bool, no_vacuum: bool,
                  force: bool, as_json: bool) -> None:
    """Tree-aware retention: drop abandoned branches older than D, keeping what Pi opens.

    Kept in every session: the root-to-leaf path, labelled entries and their labels, entries at
    or after D, each with its path to the root, and every line that is not an entry.
    """
    try:
        policy = RetentionPolicy(parse_duration(older_than), keep_latest, delete_sessions)
    except BadPolicy as exc:
        raise click.BadParameter(str(exc), param_hint="--older-than") from exc
    report = current_store(reading=not apply).prune(policy, apply=apply, vacuum=not no_vacuum, force=force)
    if as_json:
        emit(report.to_json())
        return
    verb = "removed" if apply else "would remove"
    for item in report.trimmed:
        click.echo(one_line(f"{item.session_id}  {verb} {_size(item.removed)} of {plural(item.rows_before, 'row')}"))
    for session_id in report.deleted:
        click.echo(one_line(f"{session_id}  {'deleted' if apply else 'would delete'}"))
    for session_id in report.claimed:
        click.echo(one_line(f"{session_id}  kept whole: a writer holds a claim on it (--force includes it)"))
    click.echo(f"{verb} {_size(report.removed)}: {plural(len(report.trimmed), 'session')} trimmed, "
               f"{len(report.deleted)} deleted, {report.kept_whole} of {report.sessions_seen} kept whole"
               + ("" if apply else " (dry run: --apply writes)"))
    if report.vacuum and report.vacuum.skipped:
        click.echo(f"vacuum: skipped: {report.vacuum.skipped}", err=True)
    elif report.vacuum:
        click.echo(f"vacuum: {report.vacuum.bytes_before:,} -> {plural(report.vacuum.bytes_after, 'byte')} "
                   f"in {report.vacuum.seconds:.2f} s")
