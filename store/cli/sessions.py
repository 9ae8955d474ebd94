"""``pi-store list`` and ``pi-store inspect``."""

from __future__ import annotations

import click

from store.cli.app import current_store, emit, main
from store.describe import describe_session
from store.errors import StoreError


@main.command("list")
@click.option("--cwd", help="Only sessions of this working directory.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def list_command(cwd: str | None, as_json: bool) -> None:
    """Sessions, most recently modified first."""
    infos = current_store().list(cwd) if cwd else current_store().list_all()
    if as_json:
        emit([info.to_json() for info in infos])
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
    try:
        emit(describe_session(current_store(), session, leaf, all_leaves))
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
