"""The ``pi-store`` command group and what every command shares: the store and JSON output."""

from __future__ import annotations

import sys

import click

from store.errors import StoreError
from store.format import js_stringify
from store.session_store import SessionStore


class _Commands(click.Group):
    """The command group: what the store raises on purpose (``StoreError``) is printed as its
    message with exit status 1, from every command, instead of a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except StoreError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
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


def current_store() -> SessionStore:
    return click.get_current_context().obj


def emit(value: object) -> None:
    """Print one JSON document (JSON.stringify's form: raw UTF-8, lone surrogates escaped)."""
    sys.stdout.write(js_stringify(value) + "\n")
