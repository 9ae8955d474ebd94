"""``pi-store claims``: the writer claims sessions carry (``store.ownership``), and releasing one."""

from __future__ import annotations

import click

from store.cli.app import current_store, emit, main
from store.visible_text import one_line


@main.group("claims", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_context
def claims_group(ctx: click.Context, as_json: bool) -> None:
    """Sessions claimed by a writer: owner, fencing token, expiry (without a subcommand: list them)."""
    if ctx.invoked_subcommand is not None:
        return
    store = current_store(reading=True)
    now = store.clock()
    claims = store.claims()
    if as_json:
        emit([claim.to_json(now) for claim in claims])
        return
    if not claims:
        click.echo("no session is claimed")
        return
    for claim in claims:
        doc = claim.to_json(now)
        state = "live" if doc["live"] else "expired"
        click.echo(one_line(f"{claim.session_id}  {claim.owner}  token {claim.token}  {state} "
                           f"(expires {doc['expires'] or 'never'})"))


@claims_group.command("release")
@click.argument("session")
@click.option("--owner", help="Only if this owner holds the claim.")
def release_command(session: str, owner: str | None) -> None:
    """End a session's claim, live or expired (its old holder stays fenced off: its token is stale)."""
    if current_store().release_claim(session, owner=owner):
        click.echo(f"released the claim on {session}")
    else:
        click.echo(f"{session} was not claimed")
