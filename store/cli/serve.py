"""``pi-store serve``: the read-only web viewer (``store.web``) over the store."""

from __future__ import annotations

import ipaddress
import os
import re
import socket

import click

from store.cli.app import current_store, main
from store.session_store import SessionStore

TOKEN_ENV = "PI_STORE_SERVE_TOKEN"

# RFC 6265 cookie-octet: what a cookie value carries unchanged (no quotes, spaces, commas, ; or backslashes)
_COOKIE_SAFE = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]+")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost`` or a loopback address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@main.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="Port to bind.")
@click.option("--token", envvar=TOKEN_ENV, help=f"Required on every request (header X-Pi-Store-Token, "
              f"'Authorization: Bearer', or ?token=); needed to bind a non-loopback address. Default ${TOKEN_ENV}.")
def serve_command(host: str, port: int, token: str | None) -> None:
    """Browse sessions, their trees and what the model sees, read-only, in a web browser."""
    try:
        import uvicorn

        from store.web.app import create_app
        from store.web.data import readonly_engine
    except ImportError as exc:
        raise click.ClickException(f"the viewer needs the 'serve' extra: pip install 'pi-session-store[serve]' "
                                   f"({exc})") from exc
    if not is_loopback(host) and not token:
        raise click.ClickException(f"refusing to serve on {host} without --token (or ${TOKEN_ENV}): "
                                   "session history would be readable by anyone who can reach it")
    if token is not None and (len(token) < 8 or not _COOKIE_SAFE.fullmatch(token)):
        raise click.ClickException("the token must be at least 8 printable ASCII characters, without spaces, "
                                   "quotes, ',', ';' or '\\' (it is kept in a cookie)")
    store = current_store()  # brings the schema to head, as every command does
    shown = f"[{host.strip('[]')}]" if ":" in host else host
    try:  # bound here, so that a port in use is this command's error and port 0 is announced as bound
        listening = socket.create_server((host.strip("[]"), port),
                                         family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise click.ClickException(f"cannot listen on {shown}:{port}: {reason}") from exc
    viewer = SessionStore(readonly_engine(store.engine.url.render_as_string(hide_password=False)))
    store.engine.dispose()  # the schema check's connection: closed now, not as the last one when serving ends
    click.echo(f"pi-store serve: http://{shown}:{listening.getsockname()[1]}/ (read-only"
               f"{', token required' if token else ''}; Ctrl-C stops)", err=True)
    try:
        # use_colors given: uvicorn would ask whether stdout is a terminal, which fails when it is closed
        server = uvicorn.Server(uvicorn.Config(create_app(viewer, token), log_level="warning", server_header=False,
                                               access_log=False, use_colors=False))
        server.run(sockets=[listening])
    finally:
        listening.close()
        viewer.close()

