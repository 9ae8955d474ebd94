"""``pi-store import`` and ``pi-store export``."""

from __future__ import annotations

import sys

import click

from store.cli.app import current_store, emit, main
from store.errors import StoreError


@main.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON report per file (JSON lines).")
def import_command(paths: tuple[str, ...], as_json: bool) -> None:
    """Store session files byte for byte (re-importing the same bytes changes nothing)."""
    failed = 0
    for path in paths:
        try:
            report = current_store().import_file(path)
        except StoreError as exc:
            failed += 1
            click.echo(f"error: {exc}", err=True)
            continue
        if as_json:
            emit(report.to_json())
        else:
            verb = "imported" if report.imported else "unchanged"
            click.echo(f"{verb} {report.session_id} <- {path} ({report.lines} lines, {report.bytes} bytes)")
            for warning in report.warnings:
                click.echo(f"warning: {warning}", err=True)
    if failed:
        raise SystemExit(1)


@main.command("export")
@click.argument("session")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), help="File (default: stdout).")
@click.option("--as-migrated", is_flag=True, help="Write the v3 form Pi would have rewritten on open.")
def export_command(session: str, output: str | None, as_migrated: bool) -> None:
    """Write a session as JSONL (the imported bytes, unchanged)."""
    try:
        if output:
            current_store().export_jsonl(session, output, as_migrated=as_migrated)
        else:
            for chunk in current_store().iter_export(session, as_migrated=as_migrated):
                sys.stdout.buffer.write(chunk)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
