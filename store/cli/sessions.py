"""``pi-store list`` and ``pi-store inspect``."""

from __future__ import annotations

import sys

import click

from store.analysis.listing import SORTS
from store.cli.app import MAX_LIMIT, current_store, emit, main
from store.cli.output import Column, console, format_options, plural, resolve, write_rows
from store.format.jsdate import parse_iso_date


@main.command("list")
@click.option("--cwd", help="Only sessions of this working directory.")
@click.option("--sort", type=click.Choice(SORTS), default="modified", show_default=True,
              help="modified/created: newest first; name: A to Z; cost: highest first.")
@click.option("--reverse", is_flag=True, help="Reverse the sort order.")
@click.option("--limit", type=click.IntRange(1, MAX_LIMIT), help="Page size (then --cursor continues).")
@click.option("--cursor", help="Continue after this position (printed with the previous page).")
@click.option("--name", help="Only sessions whose name contains this (case-insensitive, in every script).")
@click.option("--model", help="Only sessions that used this model (MODEL or PROVIDER/MODEL).")
@click.option("--since", help="Only sessions modified at or after this date (ISO 8601, e.g. 2026-01-31).")
@click.option("--until", help="Only sessions modified before this date.")
@format_options("Print a JSON list of sessions (with --limit too: the next page's cursor goes to stderr).")
def list_command(cwd: str | None, sort: str, reverse: bool, limit: int | None, cursor: str | None,
                 name: str | None, model: str | None, since: str | None, until: str | None, fmt: str | None) -> None:
    """Sessions, most recently modified first; served from the sessions table alone.

    Piped, one line per session: id, modified, "N messages", cost, cwd, title (two spaces apart).
    With --limit, a further page is announced on stderr as ``more: --cursor X``.
    """
    options = {"sort": sort, "reverse": reverse, "cursor": cursor, "name": name, "model": model,
               "since_ms": _date_ms(since, "--since"), "until_ms": _date_ms(until, "--until"),
               "limit": None if limit is None else min(limit + 1, 2**63 - 1)}  # one more: is there a next page?
    store = current_store()
    infos = store.list(cwd, **options) if cwd else store.list_all(**options)
    next_cursor = None
    if limit is not None and len(infos) > limit:
        infos = infos[:limit]
        next_cursor = infos[-1].cursor
    rows = [info.to_json() for info in infos]
    write_rows(resolve(fmt), LIST_COLUMNS, rows, _list_line)
    if next_cursor:
        click.echo(f"more: --cursor {next_cursor}", err=True)


def _title(row: dict) -> str:
    return " ".join((row["name"] or row["firstMessage"]).split())  # one line per session


LIST_COLUMNS = (
    Column("id", "session", fold=False), Column("modified", "modified", fold=False),
    Column("created", "created", table=False), Column("messageCount", "messages", numeric=True, fold=False),
    Column("tokens", "tokens", numeric=True, text="{:,}".format, fold=False),
    Column("cost", "cost", numeric=True, text="${:.4f}".format, fold=False), Column("cwd", "cwd", one_line=True),
    Column("name", "name", table=False), Column("firstMessage", "title", delimited=False, one_line=True),
    Column("parentSession", "parent", table=False),
)


def _list_line(row: dict) -> str:
    return (f"{row['id']}  {row['modified'] or '-':24}  {plural(row['messageCount'], 'message'):>14}  "
            f"${row['cost']:<9.4f}  {row['cwd']}  {_title(row)[:60]}")


def _date_ms(value: str | None, option: str) -> int | None:
    if value is None:
        return None
    ms = parse_iso_date(value)
    if ms is None:
        raise click.BadParameter(f"not a date: {value!r}", param_hint=option)
    return int(ms)


@main.command("inspect")
@click.argument("session")
@click.option("--leaf", help="Describe the session as if this entry were the leaf.")
@click.option("--all-leaves", is_flag=True, help="Also give the path of every entry taken as leaf.")
@click.option("--json", "as_json", is_flag=True,
              help="One line of JSON, as when piped (on a terminal the document is indented).")
def inspect_command(session: str, leaf: str | None, all_leaves: bool, as_json: bool) -> None:
    """Print one JSON document shaped like the oracle's describe.mjs output.

    Piped (or with --json): the document on one line, exactly as scripts and the conformance
    suite read it. On a terminal: the same document indented two spaces, coloured.
    """
    from store.describe import describe_session

    document = describe_session(current_store(), session, leaf, all_leaves)
    if as_json or not sys.stdout.isatty():
        emit(document)
        return
    from rich.highlighter import JSONHighlighter

    from store.format.jsjson import js_stringify

    console().print(JSONHighlighter()(js_stringify(document, 2)), soft_wrap=True)
