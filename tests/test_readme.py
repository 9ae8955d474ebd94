"""The README runs as written: its Python examples (the sync API, then the async one), and every
command line of its "Use it" section.

The command lines run one after another in bash, in a scratch home whose Pi sessions folder
(``~/.pi/agent/sessions``) holds fixture sessions, so ``~`` and the default database
(``~/.local/share/pi-store/sessions.db``) are the scratch home's; the working directory also holds
``sessions.db``, a store of the same sessions (``--db sessions.db``). ``SESSION`` stands for one
stored session's id, and a PostgreSQL URL for a scratch database of the test server holding the
same sessions. Each line must exit 0 without a traceback or an ``Error:`` line. Lines that run
until interrupted (:data:`LONG_RUNNING`) must still be running after a few seconds; then they get
Ctrl-C. A command line added to the README that cannot run here makes this test fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.conftest import scratch_pg_database

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SESSIONS = ROOT / "tests" / "fixtures" / "oracle" / "sessions"
FIXTURES = ("small-seed1-0.jsonl", "small-seed2-0.jsonl", "small-seed32-0.jsonl")
SEED1_SESSION_ID = "018da346-a275-7883-9492-51c39b129f0f"  # small-seed1-0.jsonl's
SESSION_ID = "01922b86-b51f-7754-877a-d47a8729ab04"  # small-seed32-0: compact --dry-run has a plan
PG_URL = re.compile(r"postgres(?:ql)?(?:\+\w+)?://\S+")
# Commands that serve or follow until Ctrl-C: they are interrupted once they have run this long.
LONG_RUNNING = re.compile(r"--watch\b|\bpi-store\b.*\bserve\b|(?:^|\|\s*)datasette\b")
RUNS_FOR_S = 3
LINE_TIMEOUT_S = 120


def _run_example(index: int, folder: Path) -> None:
    code = re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), re.S)
    assert len(code) > index, f"the README has no Python example number {index + 1}"
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        exec(compile(code[index], str(README), "exec"), {"__name__": "__readme__"})
    finally:
        os.chdir(cwd)


def test_readme_python_example_runs(tmp_path: Path) -> None:
    _run_example(0, tmp_path)
    assert (tmp_path / "out.jsonl").read_bytes().count(b"\n") > 1000


def test_readme_async_example_runs(tmp_path: Path) -> None:
    _run_example(1, tmp_path)
    lines = (tmp_path / "async-out.jsonl").read_bytes().splitlines()
    assert len(lines) == 1 + 2 + 100 + 1 and b"Plan B" in lines[-1]


def use_it_lines() -> list[str]:
    """The command lines of the README's "Use it" section (every line of its sh blocks)."""
    text = README.read_text("utf-8")
    section = re.search(r"^## Use it\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, 'the README has no "## Use it" section'
    blocks = re.findall(r"```(?:sh|bash|console)\n(.*?)```", section[1], re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_use_it_has_command_lines() -> None:
    lines = use_it_lines()
    assert len(lines) > 10 and all("pi-store" in line or line.startswith("datasette") for line in lines), lines


def _environment(home: Path, bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PI_STORE_") or k == "PI_STORE_SHARED"}
    return {**env, "HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}"
            f"{env.get('PATH', '')}", "NO_COLOR": "1", "COLUMNS": "120"}


def _stand_in_datasette(bin_dir: Path) -> None:
    """Where Datasette is not installed (it is the optional ``[datasette]`` extra): a stand-in
    that checks its argument is a SQLite store (the README's point: ``pi-store path`` names it),
    then serves nothing until Ctrl-C, as Datasette would serve it."""
    script = bin_dir / "datasette"
    script.write_text(f"#!{sys.executable}\nimport signal, sqlite3, sys\n"
                      "sqlite3.connect(f'file:{sys.argv[1]}?mode=ro', uri=True).execute('SELECT count(*) FROM "
                      "sessions').fetchone()\ntry:\n    signal.pause()\nexcept KeyboardInterrupt:\n    pass\n")
    script.chmod(0o755)


def _run(line: str, env: dict[str, str], cwd: Path) -> tuple[int | None, str, str]:
    """Run ``line`` in bash: (exit status, stdout, stderr); a long-running line is interrupted
    after :data:`RUNS_FOR_S` and its status is None if it was still running then."""
    process = subprocess.Popen(["bash", "-c", line], cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    if LONG_RUNNING.search(line):
        deadline = time.monotonic() + RUNS_FOR_S
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
        still_running = process.poll() is None
        if still_running:
            os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=LINE_TIMEOUT_S)
        return (None if still_running and process.returncode in (0, 130) else process.returncode), out, err
    try:
        out, err = process.communicate(timeout=LINE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"README line did not finish in {LINE_TIMEOUT_S} s (if it runs until interrupted, "
                    f"add it to LONG_RUNNING): {line}\n{err[-2000:]}")
    return process.returncode, out, err


def test_every_use_it_line_runs(tmp_path: Path) -> None:
    home, work, bin_dir = tmp_path / "home", tmp_path / "work", tmp_path / "bin"
    folder = home / ".pi" / "agent" / "sessions" / "--home-me-project--"
    for path in (folder, work, bin_dir):
        path.mkdir(parents=True)
    for name in FIXTURES:
        shutil.copy(SESSIONS / name, folder / name)
    if shutil.which("datasette") is None:
        _stand_in_datasette(bin_dir)
    env = _environment(home, bin_dir)
    pi_store = [sys.executable, "-m", "store.cli"]
    subprocess.run([*pi_store, "--db", str(work / "sessions.db"), "import", str(folder)], check=True,
                   capture_output=True, env=env, timeout=LINE_TIMEOUT_S)
    skipped: list[str] = []
    with ExitStack() as stack:
        pg_url: list[str] = []
        for line in use_it_lines():
            command = re.sub(r"\bSESSION\b(\.\.\.)?", SESSION_ID, line)
            if PG_URL.search(command):
                if not pg_url:
                    try:
                        pg_url.append(stack.enter_context(scratch_pg_database("readme")))
                    except pytest.skip.Exception as exc:
                        skipped.append(f"{line} ({exc})")
                        continue
                    subprocess.run([*pi_store, "--db", pg_url[0], "import", str(folder)], check=True,
                                   capture_output=True, env=env, timeout=LINE_TIMEOUT_S)
                command = PG_URL.sub(pg_url[0], command)
            code, out, err = _run(command, env, work)
            assert code in (0, None), f"README line exited {code}: {line}\n{out[-1000:]}\n{err[-2000:]}"
            if LONG_RUNNING.search(line):
                assert code is None, f"README line stopped by itself before it was interrupted: {line}\n{err}"
            assert "Traceback" not in err and not re.search(r"^Error:", err, re.M), f"{line}\n{err[-2000:]}"
    if skipped:
        pytest.skip("README lines not run: " + "; ".join(skipped))


def test_readme_stats_and_datasette_lines_run(tmp_path: Path) -> None:
    """The ``stats`` and Datasette lines of "Use it" run as written (SESSION: a stored session) on
    a store of one fixture file; Datasette's lines are given ``--get`` so that they answer one
    request and exit instead of serving (skipped when Datasette is not installed)."""
    lines = [line.split("  #", 1)[0].strip() for line in use_it_lines()]
    lines = [line for line in lines if line.startswith("pi-store stats") or "datasette" in line]
    assert len(lines) >= 5, lines
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # this environment's pi-store first
    env = {**os.environ, "PI_STORE_DB": str(tmp_path / "sessions.db"), "PATH": path}
    fixture = SESSIONS / "small-seed1-0.jsonl"
    subprocess.run(["pi-store", "import", str(fixture)], env=env, check=True, capture_output=True, timeout=120)
    has_datasette = shutil.which("datasette", path=env["PATH"]) is not None
    for line in lines:
        command = line.replace("SESSION", SEED1_SESSION_ID)
        if "datasette" in line:
            if not has_datasette:
                continue
            command += " --get /sessions/activity.json"
        result = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and result.stdout.strip(), (line, result.stderr)
        if "--by day --json" in line:
            assert json.loads(result.stdout)["rows"][0]["key"] == "2024-02-13"
        if "-m -" in line:
            assert json.loads(result.stdout)["rows"], "the activity view through Datasette"
