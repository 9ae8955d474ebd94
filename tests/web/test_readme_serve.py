"""The README's "Browse it" section: a description of the pages without screenshots, and its two
commands, run as written (with ``--db`` and a free ``--port`` added): the first serves loopback
without a token, the second binds every interface and refuses requests without the token."""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from pathlib import Path

import httpx

from tests.web import sessions
from tests.web.conftest import pi_store, start_server, stop

ROOT = Path(__file__).resolve().parents[2]


def section() -> str:
    text = (ROOT / "README.md").read_text("utf-8")
    start = text.index("## Browse it: `pi-store serve`")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def commands() -> list[str]:
    (block,) = re.findall(r"```sh\n(.*?)```", section(), re.S)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_readme_describes_the_pages_without_screenshots() -> None:
    text = section()
    assert "![" not in text and "<img" not in text
    for route in ("`/`", "/sessions/ID?leaf=ENTRY", "/usage", "/api/sessions", "/api/sessions/ID/context?leaf="):
        assert route in text, route
    install, *serve = commands()
    assert install == "pip install -e '.[serve]'"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["optional-dependencies"]
    assert {re.split(r"[<>=]", dep)[0] for dep in extras["serve"]} >= {"starlette", "jinja2", "uvicorn"}
    assert len(serve) == 2 and all("pi-store serve" in line for line in serve)


def run_readme_command(line: str, db_url: str) -> tuple:
    """Start the README's ``pi-store serve`` line (an ``ENV=…`` prefix given a real value)."""
    words = shlex.split(line)
    env = {k: v for k, v in os.environ.items() if k != "PI_STORE_SERVE_TOKEN"}
    while "=" in words[0]:
        name, _ = words.pop(0).split("=", 1)
        env[name] = "readme-token-1234"
    assert words[:2] == ["pi-store", "serve"], line
    return start_server(db_url, *words[2:], env=env), env


def test_readme_commands_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    pi_store(url, "import", str(sessions.hostile(tmp_path / "h.jsonl")))
    plain, token = commands()[1:]
    (process, base), _ = run_readme_command(plain, url)
    try:
        assert httpx.get(base + "/api/sessions", timeout=60).json()[0]["id"] == sessions.HOSTILE_ID
    finally:
        stop(process)
    (process, base), env = run_readme_command(token, url)
    try:
        assert "--host" in token and httpx.get(base + "/api/sessions", timeout=60).status_code == 401
        answer = httpx.get(
            base + "/api/sessions", headers={"X-Pi-Store-Token": env["PI_STORE_SERVE_TOKEN"]}, timeout=60
        )
        assert answer.status_code == 200
    finally:
        stop(process)
