"""The viewer's fixtures: a store imported with ``pi-store import`` from the oracle fixture
sessions, the corpus (read in place; absent: left out, said in the test output) and the files of
``tests.web.sessions``, and ``pi-store serve`` running over it as a real subprocess on a free
loopback port, on SQLite and on PostgreSQL."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import scratch_pg_database
from tests.oracle_support import CORPUS_DIR, FIXTURES
from tests.web import sessions

START_TIMEOUT_S = 60


@dataclass
class Served:
    """A running ``pi-store serve``: its URL, the store's URL, and the SQLite file (if any)."""

    base: str
    db_url: str
    db_file: Path | None
    process: subprocess.Popen

    def get(self, path: str, **kw: object) -> httpx.Response:
        return httpx.get(self.base + path, timeout=120, **kw)


def pi_store(db_url: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the real command line on ``db_url``."""
    return subprocess.run([sys.executable, "-m", "store.cli", "--db", db_url, *args], capture_output=True,
                          text=True, check=check, timeout=600)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(db_url: str, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """Start ``pi-store serve`` and wait until it answers (its stderr goes to a pipe)."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "store.cli", "--db", db_url, "serve", "--port", str(port), *args],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"pi-store serve exited: {process.stderr.read()}")
        try:
            httpx.get(base + "/static/style.css", timeout=5)
            return process, base
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("pi-store serve did not answer within a minute")


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def import_files(db_url: str, folder: Path) -> list[Path]:
    """Import the fixture sessions (Pi's and the crafted ones), the corpus and the viewer's own
    test sessions."""
    files = sorted((FIXTURES / "sessions").glob("*.jsonl")) + sorted((FIXTURES / "crafted").glob("*.jsonl"))
    if CORPUS_DIR.is_dir():
        files += sorted(CORPUS_DIR.glob("*.jsonl"))
    else:
        print(f"corpus absent at {CORPUS_DIR}: the viewer is tested on the fixtures alone")
    files += [sessions.hostile(folder / "hostile.jsonl"), sessions.long_linear(folder / "long.jsonl"),
              sessions.branchy(folder / "branchy.jsonl")]
    pi_store(db_url, "import", *map(str, files), check=False)  # conflicting duplicates are reported, not fatal
    return files


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def served(request, tmp_path_factory) -> Iterator[Served]:
    """``pi-store serve`` over the imported store, on each engine."""
    if request.param == "sqlite":
        yield request.getfixturevalue("served_sqlite")
        return
    folder = tmp_path_factory.mktemp("serve-postgresql")
    with scratch_pg_database("pi_store_serve") as url:
        import_files(url, folder)
        process, base = start_server(url)
        yield Served(base, url, None, process)
        stop(process)


@pytest.fixture(scope="session")
def served_sqlite(tmp_path_factory) -> Iterator[Served]:
    """The SQLite half (alone: the browser tests)."""
    folder = tmp_path_factory.mktemp("serve-browser")
    db_file = folder / "store.db"
    url = f"sqlite:///{db_file}"
    import_files(url, folder)
    process, base = start_server(url)
    yield Served(base, url, db_file, process)
    stop(process)
