#!/usr/bin/env python3
"""Regenerate the golden outcomes of operation scripts in tests/fixtures/api_scripts (needs the
live Pi oracle, see tests/oracle_support.py).

* ``random.jsonl.gz``: ``generate(seed, MIN_OPS, MAX_OPS)`` for the seeds of ``RANDOM_SEEDS``, one
  JSON line each ``{"script": ..., "pi": {results, states, files}}`` (gzip, mtime 0: reruns are
  byte-stable);
* ``regressions/<name>.script.json`` are written by hand (minimised failing scripts, with a
  ``note``); for each this writes ``<name>.pi.json`` (Pi's return values and session snapshots)
  and ``<name>.files/<session id>.jsonl`` (the files Pi wrote).

    python tools/api_fixtures.py
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.apidiff.generate import generate, generator_engine
from tests.apidiff.pi import run_on_pi
from tests.apidiff.script import dump_script, parse_script

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "api_scripts"
RANDOM_SEEDS = range(100_001, 100_161)
MIN_OPS, MAX_OPS = 20, 60


def main() -> int:
    engine = generator_engine()
    scripts = [generate(seed, MIN_OPS, MAX_OPS, engine) for seed in RANDOM_SEEDS]
    outcomes = run_on_pi(scripts)
    lines = [dump_script({"script": s, "pi": o.to_json()}) + "\n" for s, o in zip(scripts, outcomes, strict=True)]
    (FIXTURES / "random.jsonl.gz").write_bytes(gzip.compress("".join(lines).encode("ascii"), 9, mtime=0))
    regressions = sorted((FIXTURES / "regressions").glob("*.script.json"))
    outcomes = run_on_pi([parse_script(p.read_text("utf-8")) for p in regressions])
    for path, outcome in zip(regressions, outcomes, strict=True):
        name = path.name.removesuffix(".script.json")
        doc = outcome.to_json()
        (path.parent / f"{name}.pi.json").write_text(
            json.dumps({"results": doc["results"], "states": doc["states"]}, indent=1, ensure_ascii=True) + "\n")
        files = path.parent / f"{name}.files"
        shutil.rmtree(files, ignore_errors=True)
        files.mkdir()
        for sid, data in outcome.files.items():
            (files / f"{sid}.jsonl").write_bytes(data)
    print(f"{len(scripts)} random scripts ({sum(len(s['ops']) for s in scripts)} ops), {len(regressions)} regressions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
