#!/usr/bin/env python3
"""Context-service benchmarks, reported as ratios against baselines measured in the same run.

    python tools/bench_context.py [--entries 100000]

* open + build the context of a 20k-entry compacted session written by Pi (gen.mjs --size large),
  against Pi's own open + buildSessionContext() of the same file (../shared/baselines/pi_baseline.mjs);
* the same for a 100k-entry linear session (no compaction: the context is the whole path);
* prepare_compaction on that 100k path, against building its context.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarking import BASELINES, ORACLE_RUN, median_ms, pi_open_ms, record

from store.session_store import SessionStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=100_000)
    args = parser.parse_args()
    os.environ.setdefault("PI_ORACLE_DIR", str(Path.home() / ".cache" / "pi-oracle"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        store = SessionStore.connect(f"sqlite:///{work / 'bench.db'}")
        if ORACLE_RUN.exists():
            subprocess.run([str(ORACLE_RUN), "gen.mjs", "--seed", "1", "--size", "large", "--out", str(work / "g")],
                           check=True, capture_output=True)
            large = next((work / "g").glob("*.jsonl"))
            sid = store.import_jsonl(large)
            ours = median_ms(lambda: store.open(sid).build_session_context())
            pi = pi_open_ms(large, 7)
            manager = store.open(sid)
            record(op="open + build context, 20k compacted (gen.mjs large)", entries=len(manager.get_entries()),
                   context_messages=len(manager.build_session_context().messages), ms=ours, pi_ms=pi,
                   speedup_vs_pi=pi / ours if pi else None)
        else:
            record(op="open + build context, 20k compacted", skipped="oracle not installed (../shared/oracle)")
        linear = work / "linear.jsonl"
        subprocess.run([sys.executable, str(BASELINES / "make_linear_session.py"), str(args.entries), str(linear)],
                       check=True)
        sid = store.import_jsonl(linear)
        manager = store.open(sid)
        context_ms = median_ms(lambda: store.open(sid).build_session_context(), reps=3)
        pi = pi_open_ms(linear, 7)
        record(op="open + build context, linear (whole path is context)", entries=args.entries, ms=context_ms,
               pi_ms=pi, speedup_vs_pi=pi / context_ms if pi else None)
        prepare_ms = median_ms(lambda: manager.prepare_compaction(), reps=3)
        record(op="prepare_compaction, linear", entries=args.entries, ms=prepare_ms, context_ms=context_ms,
               ratio_to_context=prepare_ms / context_ms)


if __name__ == "__main__":
    main()
