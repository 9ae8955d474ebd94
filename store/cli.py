"""``pi-store``: the command line, one command per store operation.

    pi-store [--db URL] import FILE... [--json]
    pi-store [--db URL] export SESSION [-o FILE] [--as-migrated]
    pi-store [--db URL] list [--cwd DIR] [--json]
    pi-store [--db URL] inspect SESSION [--leaf ID] [--all-leaves]

``--db`` takes a SQLAlchemy URL (``sqlite:////abs/path.db``, ``postgresql://user@host/db``);
default ``$PI_STORE_DB``, else a SQLite file in the user's data directory.
"""

from __future__ import annotations

import sys

import click

from store.errors import StoreError
from store.format import js_stringify
from store.session_store import SessionStore


def _emit(value: object) -> None:
    sys.stdout.write(js_stringify(value) + "\n")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "url", envvar="PI_STORE_DB", help="Database URL (default: $PI_STORE_DB or a SQLite file).")
@click.pass_context
def main(ctx: click.Context, url: str | None) -> None:
    """A SQL home for Pi coding-agent sessions: import, inspect, list and export them."""
    try:
        store = SessionStore.connect(url)
    except Exception as exc:  # a bad URL or an unreachable server: say so, briefly
        raise click.ClickException(f"cannot open database {url or '(default)'}: {exc}") from exc
    ctx.call_on_close(store.close)
    ctx.obj = store


def _store() -> SessionStore:
    return click.get_current_context().obj


@main.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON report per file (JSON lines).")
def import_command(paths: tuple[str, ...], as_json: bool) -> None:
    """Store session files byte for byte (re-importing the same bytes changes nothing)."""
    failed = 0
    for path in paths:
        try:
            report = _store().import_file(path)
        except StoreError as exc:
            failed += 1
            click.echo(f"error: {exc}", err=True)
            continue
        if as_json:
            _emit(report.to_json())
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
            _store().export_jsonl(session, output, as_migrated=as_migrated)
        else:
            for chunk in _store().iter_export(session, as_migrated=as_migrated):
                sys.stdout.buffer.write(chunk)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc


@main.command("list")
@click.option("--cwd", help="Only sessions of this working directory.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def list_command(cwd: str | None, as_json: bool) -> None:
    """Sessions, most recently modified first."""
    infos = _store().list(cwd) if cwd else _store().list_all()
    if as_json:
        _emit([info.to_json() for info in infos])
        return
    for info in infos:
        title = info.name or info.first_message
        click.echo(f"{info.id}  {info.modified or '-':24}  {info.message_count:6} msgs  {info.cwd}  {title[:60]}")


@main.command("inspect")
@click.argument("session")
@click.option("--leaf", help="Describe the session as if this entry were the leaf.")
@click.option("--all-leaves", is_flag=True, help="Also give the path of every entry taken as leaf.")
def inspect_command(session: str, leaf: str | None, all_leaves: bool) -> None:
    """Print one JSON document shaped like the oracle's describe.mjs output."""
    from store.describe import describe_session

    try:
        _emit(describe_session(_store(), session, leaf, all_leaves))
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc


if __name__ == "__main__":
    main()
