"""What every ``pi-store`` command shares: a failure the store raises on purpose is printed as one
line (exit status 1), never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("args", [["inspect", "nope"], ["stats", "nope"], ["export", "nope"], ["verify", "nope"],
                                  ["search", "word", "--session", "nope"], ["compact", "nope"], ["search", "--", "-x"]])
def test_store_errors_are_one_line(tmp_path: Path, args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "store.cli", "--db", f"sqlite:///{tmp_path / 's.db'}", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.startswith("Error: ") and "Traceback" not in done.stderr, done.stderr
