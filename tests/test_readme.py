"""The README's Python example runs as written (in a scratch directory)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SESSION = "018da346-a275-7883-9492-51c39b129f0f"  # small-seed1-0.jsonl's


def test_readme_python_example_runs(tmp_path: Path) -> None:
    code = re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), re.S)
    assert code, "the README has no Python example"
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(code[0], str(README), "exec"), {})
    finally:
        os.chdir(cwd)
    assert (tmp_path / "out.jsonl").read_bytes().count(b"\n") > 1000


def use_it_lines() -> list[str]:
    """The command lines of the README's "Use it" block, without their comments."""
    block = README.read_text("utf-8").split("## Use it", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_readme_stats_and_datasette_lines_run(tmp_path: Path) -> None:
    """The ``stats`` and Datasette lines of "Use it" run as written (SESSION: a stored session) on
    a store of one fixture file; Datasette's lines are given ``--get`` so that they answer one
    request and exit instead of serving (skipped when Datasette is not installed)."""
    lines = [line for line in use_it_lines() if line.startswith("pi-store stats") or "datasette" in line]
    assert len(lines) >= 5, lines
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # this environment's pi-store first
    env = {**os.environ, "PI_STORE_DB": str(tmp_path / "sessions.db"), "PATH": path}
    fixture = README.parent / "tests" / "fixtures" / "oracle" / "sessions" / "small-seed1-0.jsonl"
    subprocess.run(["pi-store", "import", str(fixture)], env=env, check=True, capture_output=True, timeout=120)
    has_datasette = shutil.which("datasette", path=env["PATH"]) is not None
    for line in lines:
        command = line.replace("SESSION", SESSION)
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
