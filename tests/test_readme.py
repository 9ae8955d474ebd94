"""The README's Python example runs as written (in a scratch directory)."""

from __future__ import annotations

import os
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


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
