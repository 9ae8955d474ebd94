#!/usr/bin/env python3
"""Sibling order against V8: seeded lists of timestamps, some of them no date, sorted the way Pi
sorts a node's children — by ``store.format.jssort.v8_sort`` and by the real Node.

    python tools/sort_differential.py --count 20000 --seed 1          # a campaign, prints mismatches
    python tools/sort_differential.py --count 400 --seed 20261207 \\
        --write tests/fixtures/dates/v8_sibling_orders.json.gz          # the suite's golden file

Pi's comparator is ``(a, b) => new Date(a.timestamp).getTime() - new Date(b.timestamp).getTime()``:
NaN where either timestamp is no date, which the sort reads as "equal", so the order depends on
the exact comparisons V8's TimSort makes. Case ``i`` draws from ``Random(f"{seed}:{i}")`` alone:
a length (1 to 1,500, most around V8's 64-item threshold for merging runs), then blocks of
ascending, descending, constant and random timestamps, with a share of bad ones ("bad", "",
null) sprinkled in or in blocks. Node runs with ``TZ=UTC``. Ends with
``sort-differential: M mismatches of N``; exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from random import Random

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from store.format.jsdate import parse_js_date  # noqa: E402
from store.format.jssort import v8_sort  # noqa: E402
from tests.oracle_support import ORACLE_NODE, node_apply  # noqa: E402

_BAD = ["bad", "", None, "2025-13-01T00:00:00Z"]


def _stamp(second: int) -> str:
    return f"2025-01-01T{second // 3600 % 24:02d}:{second // 60 % 60:02d}:{second % 60:02d}.000Z"


def timestamps(seed: int | str, index: int) -> list[str | None]:
    """Case ``index`` of ``seed``: the same list on every machine."""
    rng = Random(f"{seed}:{index}")
    length = rng.choice([rng.randint(1, 20), rng.randint(50, 80), rng.randint(60, 70), rng.randint(100, 300),
                         rng.randint(500, 1500)])
    bad_share = rng.choice([0.0, 0.01, 0.05, 0.2, 0.5, 0.9])
    out: list[str | None] = []
    while len(out) < length:
        size = min(length - len(out), rng.randint(1, 80))
        kind = rng.random()
        start = rng.randrange(50_000)
        if kind < 0.25:
            block = [_stamp(start + i * rng.randint(0, 3)) for i in range(size)]
        elif kind < 0.45:
            block = [_stamp(start - i * rng.randint(0, 3)) for i in range(size)]
        elif kind < 0.55:
            block = [_stamp(start)] * size
        elif kind < 0.62:
            block = [rng.choice(_BAD)] * size
        else:
            block = [_stamp(rng.randrange(start, start + rng.choice([5, 100, 10_000]))) for _ in range(size)]
        out.extend(rng.choice(_BAD) if rng.random() < bad_share else stamp for stamp in block)
    return out


def node_orders(node: Path, cases: list[list[str | None]]) -> list[list[int]]:
    """The index order Node's sort leaves each list in (Pi's comparator)."""
    return node_apply("(lists) => lists.map((stamps) => stamps.map((timestamp, i) => ({ i, timestamp }))"
                      ".sort((a, b) => new Date(a.timestamp).getTime() - new Date(b.timestamp).getTime())"
                      ".map((item) => item.i))", cases, node)


def ours(stamps: list[str | None]) -> list[int]:
    times = [parse_js_date(stamp) for stamp in stamps]

    def compare(a: int, b: int) -> float | None:
        return None if times[a] is None or times[b] is None else times[a] - times[b]

    return v8_sort(list(range(len(stamps))), compare)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--seed", default="1")
    parser.add_argument("--node", type=Path, default=ORACLE_NODE,
                        help=f"the Node to ask (default: the oracle's, {ORACLE_NODE})")
    parser.add_argument("--write", type=Path, help="write the lists and Node's orders here as a golden file")
    args = parser.parse_args(argv)
    cases = [timestamps(args.seed, index) for index in range(args.count)]
    expected = node_orders(args.node, cases)
    mismatches = [index for index, (stamps, want) in enumerate(zip(cases, expected, strict=True))
                  if ours(stamps) != want]
    for index in mismatches[:10]:
        print(f"case {index}: {len(cases[index])} timestamps")
    print(f"sort-differential: {len(mismatches)} mismatches of {len(cases)} "
          f"({sum(len(case) for case in cases):,} timestamps, seed {args.seed})")
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        lines = ",\n".join(json.dumps([stamps, order]) for stamps, order in zip(cases, expected, strict=True))
        document = f'{{"seed": {json.dumps(args.seed)}, "cases": [\n{lines}\n]}}\n'.encode()
        args.write.write_bytes(gzip.compress(document, mtime=0) if args.write.suffix == ".gz" else document)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
