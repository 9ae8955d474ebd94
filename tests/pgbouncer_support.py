"""A real PgBouncer in transaction mode in front of the test server, for the tests and for
``tools/bench_pooler.py``: its configuration in a folder of its own, a free loopback port, trust
authentication, and a server pool smaller than the number of clients the callers run."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"  # Debian puts it in /usr/sbin
START_TIMEOUT_S = 15


class PgBouncerUnavailable(Exception):
    """PgBouncer could not be started or did not answer; the message says what failed."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _config(server_url: str, port: int, pool_size: int, folder: Path) -> str:
    server = make_url(server_url)
    user = server.username or "postgres"
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    return (
        "[databases]\n"
        f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\nadmin_users = {user}\n"
        f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nreserve_pool_size = 0\n"
        "max_client_conn = 500\n"
    )


@contextmanager
def running_pgbouncer(server_url: str, *, pool_size: int = 2) -> Iterator[tuple[str, Path]]:
    """Start PgBouncer (transaction pooling, ``pool_size`` server connections per database and
    user) in front of the server of ``server_url``; yields ``server_url`` with its host and port
    replaced by PgBouncer's, and PgBouncer's log file. Raises :class:`PgBouncerUnavailable` when it
    cannot start or does not pass a query through within ``START_TIMEOUT_S``."""
    if not Path(PGBOUNCER).exists():
        raise PgBouncerUnavailable(f"no pgbouncer executable at {PGBOUNCER} (Debian package pgbouncer)")
    folder = Path(tempfile.mkdtemp(prefix="pi-store-pgbouncer-"))
    folder.chmod(0o755)  # PgBouncer refuses to run as root: as root it switches to nobody, who reads here
    port = _free_port()
    (folder / "pgbouncer.ini").write_text(_config(server_url, port, pool_size, folder))
    for name in ("pgbouncer.ini", "users.txt"):
        (folder / name).chmod(0o644)
    log = folder / "pgbouncer.log"
    command = [PGBOUNCER, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("nobody")
        except KeyError:
            raise PgBouncerUnavailable("running as root, and no user nobody for pgbouncer to run as") from None
        command[1:1] = ["-u", "nobody"]
    url = make_url(server_url).set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_until_it_answers(process, url, log)
        yield url, log
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_until_it_answers(process: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise PgBouncerUnavailable(f"pgbouncer exited with status {process.returncode}: {_tail(log)}")
        engine = create_engine(url, connect_args={"connect_timeout": 2, "prepare_threshold": None})
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return
        except Exception as exc:  # not listening yet, or no server behind it
            last = exc
            time.sleep(0.1)
        finally:
            engine.dispose()
    raise PgBouncerUnavailable(
        f"pgbouncer did not pass a query within {START_TIMEOUT_S} s "
        f"({type(last).__name__}: {str(last).strip()[:200]}); its log: {_tail(log)}"
    )


def _tail(log: Path, lines: int = 5) -> str:
    text_ = log.read_text(errors="replace").strip().splitlines()[-lines:] if log.exists() else []
    return " | ".join(text_) or "(empty)"


def admin_rows(bouncer_url: str, command: str) -> list[dict]:
    """The rows of a PgBouncer admin console command (``SHOW POOLS``, ``SHOW SERVERS``, ...)."""
    import psycopg

    url = make_url(bouncer_url)
    with psycopg.connect(
        host=url.host,
        port=url.port,
        user=url.username or "postgres",
        dbname="pgbouncer",
        autocommit=True,
        prepare_threshold=None,
    ) as conn:
        cursor = conn.execute(command)
        names = [column.name for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
