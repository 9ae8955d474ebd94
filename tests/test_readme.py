"""The README's Python examples (the sync API, then the async one) run as written, in a scratch directory."""

from __future__ import annotations

import os
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


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
