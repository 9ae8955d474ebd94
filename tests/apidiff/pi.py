"""Running operation scripts on the real Pi (``pi_runner.mjs`` through the oracle's run.sh)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from store.format import js_parse
from tests.apidiff.script import Outcome, dump_script
from tests.oracle_support import ORACLE_DIR, ORACLE_SRC, RUN_SH, OracleError, oracle_available

RUNNER = Path(__file__).with_name("pi_runner.mjs")


def run_on_pi(scripts: Iterable[dict[str, Any]], timeout: float = 3600.0) -> list[Outcome]:
    """Pi's outcome of each script, in order (one Node process for all of them)."""
    if not oracle_available():
        raise OracleError("the Pi oracle is not installed (see tests.oracle_support.ORACLE_SKIP_REASON)")
    with tempfile.TemporaryDirectory(prefix="apidiff-") as tmp:
        path = Path(tmp) / "scripts.jsonl"
        path.write_text("".join(dump_script(s) + "\n" for s in scripts), "utf-8")
        result = subprocess.run(
            [str(RUN_SH), str(RUNNER), str(ORACLE_SRC / "lib.mjs"), str(path)], capture_output=True,
            timeout=timeout, stdin=subprocess.DEVNULL, env={**os.environ, "PI_ORACLE_DIR": str(ORACLE_DIR)},
        )
    if result.returncode != 0:
        tail = result.stderr.decode("utf-8", "replace").strip().splitlines()[-10:]
        raise OracleError(f"pi_runner.mjs exited {result.returncode}:\n" + "\n".join(tail))
    return [Outcome.from_json(js_parse(line)) for line in result.stdout.decode("utf-8").split("\n") if line]
